//! `reproagent search QUERY`: BM25 over entities and files.

use std::path::PathBuf;

use clap::Args;

use crate::tools::search::{SearchCode, SearchCodeArgs};
use crate::tools::{ToolContext, ToolError, TypedTool};

/// Search the code by keywords: names (split at `_`, camelCase, dots and slashes) rank
/// over signatures, docs and bodies.
#[derive(Args, Debug)]
pub struct SearchArgs {
    /// Free text: identifiers, an error message, words from a docstring.
    pub query: String,
    /// Only this kind: file, module, class, interface, enum, function, method, field.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only paths matching this glob (e.g. 'src/**/*.py').
    #[arg(long)]
    pub path: Option<String>,
    /// At most this many hits (at most 50).
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Skip this many hits.
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
    #[arg(long)]
    pub json: bool,
}

/// The query is the `search_code` tool the MCP server and the agent call: the same
/// bounds, freshness check and errors.
pub fn run(args: SearchArgs) -> anyhow::Result<()> {
    if args.query.trim().is_empty() {
        anyhow::bail!("the query is empty");
    }
    let fail = |e: ToolError| super::with_hint(e.to_string(), e.hint().as_deref());
    let ctx = ToolContext::new(&args.repo).map_err(fail)?;
    let a = SearchCodeArgs {
        query: args.query,
        kind: args.kind,
        path_glob: args.path,
        offset: args.offset,
        limit: args.limit,
    };
    let out = SearchCode.run(&ctx, a).map_err(fail)?;
    if let Some(n) = &out.note {
        eprintln!("note: {n}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    if out.hits.is_empty() {
        println!("no match for {:?}", out.query);
        if !out.nearest.is_empty() {
            println!("nearest names: {}", out.nearest.join(", "));
        }
    }
    for h in out.hits {
        println!("{:>7.2}  {:<9} {}  ({}:{}-{})", h.score, h.kind, h.id, h.path, h.start_line, h.end_line);
        if !h.snippet.is_empty() {
            println!("          {}", h.snippet);
        }
    }
    Ok(())
}
