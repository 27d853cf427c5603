//! `index`: bring the index up to date from the server, so an agent that wrote a file
//! can go on asking (the MCP server's registry only: the pipeline's agent works in a
//! sandbox copy and never changes the indexed tree).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ToolContext, ToolError, TypedTool};

pub struct Index;

/// Update the index.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IndexArgs {
    /// Rebuild from scratch instead of parsing only the changed files (default false).
    #[serde(default)]
    pub full: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct IndexOutput {
    /// `full`, `incremental` or `unchanged`.
    pub mode: String,
    pub files: usize,
    /// Files parsed again, and files removed from the index.
    pub parsed: usize,
    pub removed: usize,
    pub entities: usize,
    pub edges: usize,
    /// Files left out (too large, not UTF-8, a symlink out), first 20, and how many.
    pub skipped: Vec<String>,
    pub skipped_total: usize,
    pub seconds: f64,
}

impl TypedTool for Index {
    const NAME: &'static str = "index";
    const DESCRIPTION: &'static str = "Update the code index after files changed (the graph tools and search_code report changed files as `stale`): incremental, only changed files are parsed again (a fraction of a second for a few files). `full: true` rebuilds from scratch.";
    type Args = IndexArgs;
    type Output = IndexOutput;

    fn run(&self, ctx: &ToolContext, a: IndexArgs) -> Result<IndexOutput, ToolError> {
        let mut opts = crate::index::Options::new(ctx.root());
        opts.full = a.full;
        let s = crate::index::run(&opts).map_err(|e| {
            let hint = e.hint().map(|h| format!(" (hint: {h})")).unwrap_or_default();
            ToolError::Other(format!("indexing failed: {e}{hint}"))
        })?;
        let skipped_total = s.skipped.len();
        Ok(IndexOutput {
            mode: s.mode,
            files: s.files,
            parsed: s.parsed,
            removed: s.removed,
            entities: s.entities,
            edges: s.edges,
            skipped: s.skipped.iter().take(20).map(|k| format!("{} ({})", k.path, k.reason)).collect(),
            skipped_total,
            seconds: s.seconds,
        })
    }
}
