//! `reproagent search QUERY`: BM25 over entities and files.

use std::path::PathBuf;

use clap::Args;

use crate::search::SearchIndex;
use crate::store;

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
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SearchArgs) -> anyhow::Result<()> {
    if args.query.trim().is_empty() {
        anyhow::bail!("the query is empty");
    }
    let fail = |e: crate::search::SearchError| super::with_hint(e.to_string(), e.hint());
    let graph = store::open(&store::db_path(&args.repo)).map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
    let index = SearchIndex::open(&args.repo).map_err(fail)?;
    index.check_fresh(graph.meta("tree_digest")?.as_deref()).map_err(fail)?;
    let hits = index.search(&args.query, args.kind.as_deref(), args.path.as_deref(), args.limit).map_err(fail)?;
    if let Some(cut) = crate::search::query_words(&args.query).1 {
        eprintln!("note: {cut}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&hits)?);
        return Ok(());
    }
    if hits.is_empty() {
        println!("no match for {:?}", crate::extract::truncate(args.query.clone(), 200));
    }
    for h in hits {
        println!("{:>7.2}  {:<9} {}  ({}:{}-{})", h.score, h.kind, h.id, h.path, h.start_line, h.end_line);
        if !h.snippet.is_empty() {
            println!("          {}", h.snippet);
        }
    }
    Ok(())
}
