//! `search_code`: BM25 over entities and files ([`crate::search`]), name matches ranked
//! over signatures, docs and bodies.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ToolContext, ToolError, TypedTool};
use crate::search::{SearchHit, SearchIndex};

pub struct SearchCode;

/// Keyword search over the code.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchCodeArgs {
    /// Free text: identifiers (split at `_`, camelCase, dots), an error message, words
    /// from a docstring or an issue.
    pub query: String,
    /// Only this kind: file, module, class, interface, enum, function, method, field.
    #[serde(default)]
    pub kind: Option<String>,
    /// Only paths matching this glob, e.g. `src/**/*.py`.
    #[serde(default)]
    pub path_glob: Option<String>,
    #[serde(default)]
    pub offset: usize,
    /// At most this many hits (default 10, at most 50).
    #[serde(default = "ten")]
    pub limit: usize,
}

fn ten() -> usize {
    10
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchCodeOutput {
    pub query: String,
    /// Ranked hits, best first: kind, id, path, line range, score and a snippet.
    pub hits: Vec<SearchHit>,
    pub offset: usize,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When nothing matched: entity ids whose names are nearest to the query.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nearest: Vec<String>,
}

impl TypedTool for SearchCode {
    const NAME: &'static str = "search_code";
    const DESCRIPTION: &'static str = "Keyword search (BM25) over the code's entities and files: identifiers are split at `_`, camelCase and dots, and names rank over signatures, docs and bodies. Filters by kind and path glob. Bounded: 10 hits by default, at most 50 a call, with offset for more.";
    type Args = SearchCodeArgs;
    type Output = SearchCodeOutput;

    fn run(&self, ctx: &ToolContext, a: SearchCodeArgs) -> Result<SearchCodeOutput, ToolError> {
        if a.query.trim().is_empty() {
            return Err(ToolError::BadArgs { tool: Self::NAME.into(), message: "query is empty".into() });
        }
        let store = ctx.store()?;
        let index = SearchIndex::open(ctx.root())?;
        index.check_fresh(store.meta("tree_digest")?.as_deref())?;
        let limit = a.limit.clamp(1, 50);
        let mut hits = index.search(&a.query, a.kind.as_deref(), a.path_glob.as_deref(), a.offset + limit + 1)?;
        let more = hits.len() > a.offset + limit;
        let hits: Vec<SearchHit> = hits.drain(..).skip(a.offset).take(limit).collect();
        let (_, cut) = crate::search::query_words(&a.query);
        let (note, nearest) = if more {
            (
                Some(format!(
                    "showing hits {}-{}; pass offset={} for more",
                    a.offset + 1,
                    a.offset + hits.len(),
                    a.offset + hits.len()
                )),
                Vec::new(),
            )
        } else if hits.is_empty() && a.offset == 0 {
            let nearest =
                ctx.names(&store)?.nearest(crate::extract::truncate(a.query.trim().to_string(), 200).as_str(), 5);
            let note = if nearest.is_empty() {
                format!("no hit for '{}' and no entity has a close name; try grep, or other words", a.query)
            } else {
                format!("no hit for '{}'; the entities with the nearest names are listed", a.query)
            };
            (Some(note), nearest)
        } else {
            (None, Vec::new())
        };
        // A cut query says so first; the echoed query is cut too.
        let note = match (cut, note) {
            (Some(c), Some(n)) => Some(format!("{c}; {n}")),
            (c, n) => c.or(n),
        };
        let query =
            if a.query.len() > 200 { format!("{}...", crate::extract::truncate(a.query, 200)) } else { a.query };
        Ok(SearchCodeOutput { query, hits, offset: a.offset, truncated: more, note, nearest })
    }
}
