//! `berth mcp`: a Model Context Protocol server over stdio for coding agents, speaking for the
//! repository and the worktree it runs in, within its service key's capabilities (see
//! docs/mcp.md).

mod access;
mod context;
mod data;
mod instances;
mod output;
mod resources;
mod server;

pub use server::{McpArgs, run};
