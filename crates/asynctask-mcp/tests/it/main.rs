//! Integration tests of the MCP server's tool calls, in process.

mod server;
mod tasks;
mod texts;
