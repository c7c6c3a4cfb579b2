//! Shared fixtures for the end-to-end tests; the tests themselves live in `e2e/`.
//!
//! This crate also compiles and runs the code blocks of the README, so the
//! embedding examples there cannot rot.

#[doc = include_str!("../../README.md")]
mod readme {}
