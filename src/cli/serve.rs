//! `reproagent serve`: the MCP server over stdio, offering the agent tools on one
//! indexed repository.

use std::path::PathBuf;

use clap::Args;

use crate::mcp::{self, Server};
use crate::tools::{self, ToolContext};

/// Serve the agent tools over MCP (stdio) on an indexed repository. Made for MCP
/// clients to start; it waits for `initialize` on stdin.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let ctx = ToolContext::new(&a.repo).map_err(|e| super::with_hint(e.to_string(), e.hint().as_deref()))?;
    mcp::serve_stdio(Server::new(tools::all(), ctx))?;
    Ok(())
}
