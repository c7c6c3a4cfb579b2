//! The end-to-end test package: the tests live in `e2e/` (a whole session across
//! the layers with a fake host and runner; the CLI demo under paused time).
//!
//! This library holds no code of its own: it compiles and runs the code blocks
//! of the README as doc tests, so the embedding examples there cannot rot.

#[doc = include_str!("../../README.md")]
mod readme {}
