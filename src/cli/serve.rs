//! `reproagent serve`: the MCP server over stdio, offering the agent tools on one
//! indexed repository (and, with `--sandbox`, the runtime tools in a sandbox).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::mcp::{self, Server};
use crate::sandbox::{self, image, Choice, SandboxConfig};
use crate::tools::{self, runtime::RuntimeContext, ToolContext};

/// Serve the agent tools over MCP (stdio) on an indexed repository. Made for MCP
/// clients to start; it waits for `initialize` on stdin.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
    /// Also offer run_command, run_python and run_test, in this sandbox (a private copy
    /// of the repository; the user's tree is never written).
    #[arg(long, value_enum, default_value = "none")]
    pub sandbox: ServeSandbox,
    /// Docker image for the sandbox (default: the one `sandbox prepare` recorded).
    #[arg(long)]
    pub image: Option<String>,
    #[command(flatten)]
    pub env: super::EnvFlags,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ServeSandbox {
    None,
    Auto,
    Docker,
    Local,
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    // Before any thread exists: on SIGTERM or Ctrl-C the sandbox (container or local
    // copy, both registered) is removed and the server exits 143 / 130.
    crate::sandbox::interrupt::install().map_err(|e| anyhow::anyhow!("installing the signal handler: {e}"))?;
    let ctx = ToolContext::new(&a.repo).map_err(|e| super::with_hint(e.to_string(), e.hint().as_deref()))?;
    let choice = match a.sandbox {
        ServeSandbox::None => return Ok(mcp::serve_stdio(Server::new(tools::for_server(false), ctx))?),
        ServeSandbox::Auto => Choice::Auto,
        ServeSandbox::Docker => Choice::Docker,
        ServeSandbox::Local => Choice::Local,
    };
    let repo = ctx.root().to_path_buf();
    let image = a.image.or_else(|| image::recorded_image(&repo)).unwrap_or_else(|| "reproagent-env:none".into());
    let environment = a.env.resolve(&repo)?;
    let rt = mcp::runtime()?;
    let opened = rt
        .block_on(sandbox::open(choice, SandboxConfig::new(&repo, image).with_env(Some(environment), &a.env.options())))
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("opening the sandbox")?;
    eprintln!("reproagent serve: sandbox {}", opened.reason);
    let sb: Arc<dyn sandbox::Sandbox> = Arc::from(opened.sandbox);
    let ctx = ctx.with_runtime(RuntimeContext { sandbox: sb.clone(), handle: rt.handle().clone(), repo });
    let served = mcp::serve_stdio_on(&rt, Server::new(tools::for_server(true), ctx));
    crate::sandbox::interrupt::wait_if_interrupted();
    let closed = rt.block_on(sb.close());
    served?;
    closed.map_err(|e| anyhow::anyhow!("closing the sandbox: {e}"))?;
    Ok(())
}
