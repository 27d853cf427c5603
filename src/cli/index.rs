//! `reproagent index [PATH]`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::extract::Limits;
use crate::index::{self, Options};

/// Index a repository into the code knowledge graph at PATH/.reproagent/graph.db.
///
/// Incremental by default: only files whose content changed are parsed again, and only
/// the rows that changed are written. Files that cannot be indexed are reported with the
/// reason and skipped.
#[derive(Args, Debug)]
pub struct IndexArgs {
    /// The repository root.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// Worker threads (default: one per core).
    #[arg(long, short = 'j')]
    pub threads: Option<usize>,
    /// Rebuild from scratch instead of updating.
    #[arg(long)]
    pub full: bool,
    /// Also index vendored trees (node_modules, vendor, site-packages, virtualenvs...).
    #[arg(long)]
    pub include_vendored: bool,
    /// Skip files larger than this many bytes.
    #[arg(long, default_value_t = Limits::default().max_bytes)]
    pub max_file_bytes: u64,
    /// Give up parsing a file after this many milliseconds of CPU time.
    #[arg(long, default_value_t = Limits::default().max_parse_time.as_millis() as u64)]
    pub max_parse_ms: u64,
    /// Keep at most this many entities per file (the module included); a file past it is
    /// kept with its first ones and reported as truncated.
    #[arg(long, default_value_t = Limits::default().max_entities)]
    pub max_entities: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Do not list skipped files, only count them.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: IndexArgs) -> anyhow::Result<()> {
    if args.threads == Some(0) {
        anyhow::bail!("--threads must be at least 1");
    }
    if args.max_entities == 0 {
        anyhow::bail!("--max-entities must be at least 1 (it counts the module entity)");
    }
    let opts = Options {
        root: args.path.clone(),
        threads: args.threads,
        include_vendored: args.include_vendored,
        full: args.full,
        limits: Limits {
            max_bytes: args.max_file_bytes,
            max_parse_time: Duration::from_millis(args.max_parse_ms),
            max_entities: args.max_entities,
        },
        progress: !args.json && std::io::stderr().is_terminal(),
    };
    let summary = index::run(&opts).map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    if let Some(why) = &summary.rebuilt_because {
        eprintln!("note: rebuilt from scratch: {why}");
    }
    if !args.quiet {
        for s in &summary.skipped {
            eprintln!("skipped {}: {}", if s.path.is_empty() { "?" } else { &s.path }, s.reason);
        }
        for t in &summary.truncated {
            eprintln!("truncated {}: {}", t.path, t.reason);
        }
    }
    println!("{}", summary.line());
    Ok(())
}
