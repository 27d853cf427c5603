//! reproagent: turns an issue report into a test that reproduces it, on an embedded
//! code knowledge graph (CozoDB) built with tree-sitter.
//!
//! The library is what the CLI, the MCP server and Rust callers share: [`index`] builds
//! and updates the graph, [`graph`] answers queries over it, [`model`] talks to the LLM
//! (or replays a cassette of it).

pub mod bench;
pub(crate) mod cancel;
pub mod cli;
pub mod confine;
pub mod extract;
pub mod graph;
pub mod index;
pub mod lang;
pub mod localize;
pub(crate) mod mcp;
pub mod model;
pub mod reproduce;
pub(crate) mod resolve;
pub mod sandbox;
pub mod search;
pub mod store;
pub mod tools;
