//! `reproagent localize --issue FILE`: key-free fault localization.

use std::path::PathBuf;

use clap::Args;

use crate::localize;
use crate::search::SearchIndex;
use crate::store;

/// Rank the files and entities an issue points at, without a model: traceback frames
/// first, then names in code spans, named paths, the issue's words (BM25) and the call
/// graph around the strongest suspects.
#[derive(Args, Debug)]
pub struct LocalizeArgs {
    /// The issue, as Markdown or plain text (`-` reads standard input).
    #[arg(long)]
    pub issue: PathBuf,
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: LocalizeArgs) -> anyhow::Result<()> {
    let text = if args.issue.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(&args.issue).map_err(|e| {
            super::with_hint(format!("{}: {e}", args.issue.display()), Some("give the path of the issue text"))
        })?
    };
    let graph = store::open(&store::db_path(&args.repo)).map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
    let search = match SearchIndex::open(&args.repo) {
        Ok(i) if i.check_fresh(graph.meta("tree_digest")?.as_deref()).is_ok() => Some(i),
        Ok(_) | Err(_) => {
            eprintln!("warning: the keyword index is missing or stale, ranking without it (run `reproagent index`)");
            None
        }
    };
    let loc = localize::localize(&graph, search.as_ref(), &text, args.limit)
        .map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&loc)?);
        return Ok(());
    }
    if loc.files.is_empty() {
        println!("nothing in the repository matches the issue");
        return Ok(());
    }
    println!("files:");
    for (i, f) in loc.files.iter().enumerate() {
        println!("{:>3}. {:>6.2}  {}  — {}", i + 1, f.score, f.file, f.reason);
    }
    println!("entities:");
    for (i, e) in loc.entities.iter().enumerate() {
        println!(
            "{:>3}. {:>6.2}  {}  ({}:{}-{}) — {}",
            i + 1,
            e.score,
            e.entity.as_deref().unwrap_or(""),
            e.file,
            e.start_line,
            e.end_line,
            e.reason
        );
    }
    Ok(())
}
