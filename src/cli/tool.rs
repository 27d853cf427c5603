//! `reproagent tool --list` and `reproagent tool NAME 'JSON-ARGS'`: run one agent tool and
//! print its JSON output, exactly as the MCP server and the agent loop get it.

use std::path::PathBuf;

use clap::Args;

use crate::tools::{self, ToolContext};

/// Run one agent tool (the same tools `serve` offers) and print its JSON output.
#[derive(Args, Debug)]
pub struct ToolArgs {
    /// The tool to run (`--list` lists them).
    #[arg(required_unless_present = "list")]
    pub name: Option<String>,
    /// Its arguments as a JSON object, e.g. '{"pattern": "def \\w+"}'.
    #[arg(default_value = "{}")]
    pub args: String,
    /// List the tools with their descriptions and argument schemas (JSON).
    #[arg(long)]
    pub list: bool,
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
}

pub fn run(a: ToolArgs) -> anyhow::Result<()> {
    let registry = tools::all();
    if a.list {
        println!("{}", serde_json::to_string_pretty(&registry.describe())?);
        return Ok(());
    }
    let name = a.name.unwrap_or_default();
    let args: serde_json::Value = serde_json::from_str(&a.args).map_err(|e| {
        super::with_hint(format!("arguments are not JSON: {e}"), Some("pass one JSON object, e.g. '{\"path\": \".\"}'"))
    })?;
    let ctx = ToolContext::new(&a.repo).map_err(|e| super::with_hint(e.to_string(), e.hint().as_deref()))?;
    let out = registry.call(&ctx, &name, args);
    println!("{}", serde_json::to_string_pretty(&out.value)?);
    if out.is_error {
        let msg = out.value.get("error").and_then(|v| v.as_str()).unwrap_or("tool error").to_string();
        return Err(anyhow::anyhow!("{msg}"));
    }
    Ok(())
}
