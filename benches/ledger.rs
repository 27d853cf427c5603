//! What the evidence ledger costs and saves per retrieval (issue 14): on the Django corpus
//! of the index benchmark (`benches/fetch.sh`, or REPROAGENT_BENCH_CORPUS), 100 fixed
//! calls each of `read_file`, `search_code` and `grep`, each timed four ways in the same
//! run, interleaved call by call:
//!
//! - `tool`: `Registry::call` alone (what the agent loop did per call before);
//! - `state`: `ToolContext::state_for` alone (a `stat` for `read_file`, the freshness
//!   check's digest for the others);
//! - `first call`: the state, the tool and `Ledger::note` (a call the ledger cannot answer);
//! - `repeat`: the state and `Ledger::recall` (the same call again, answered from the
//!   ledger without the tool).
//!
//! p50 and p99 in ms, and the ratios to `tool` at p50.
//!
//! `cargo bench --bench ledger` (a release build). Prints a Markdown table.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or a benchmark stops at the first surprise

mod common;

use common::{copy_tree, corpus, percentile};

use std::time::{Duration, Instant};

use reproagent::index::{self, Options};
use reproagent::reproduce::ledger::Ledger;
use reproagent::tools::{self, ToolContext};
use serde_json::{json, Value};

fn main() {
    let Some(src) = corpus() else {
        eprintln!("no corpus: run `bash benches/fetch.sh` (Django from PyPI) or set REPROAGENT_BENCH_CORPUS");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    copy_tree(&src, root);
    index::run(&Options::new(root)).unwrap();

    // 100 Python files, every n-th in walk order: the same sample every run.
    let mut files: Vec<String> =
        index::walk(root, false).0.into_iter().map(|f| f.rel).filter(|p| p.ends_with(".py")).collect();
    files.sort();
    let stride = (files.len() / 100).max(1);
    let files: Vec<String> = files.into_iter().step_by(stride).take(100).collect();
    let stem = |p: &String| p.rsplit('/').next().unwrap().trim_end_matches(".py").to_string();
    let workload: Vec<(&str, Vec<Value>)> = vec![
        ("read_file", files.iter().map(|f| json!({"path": f})).collect()),
        ("search_code", files.iter().map(|f| json!({"query": stem(f).replace('_', " ")})).collect()),
        ("grep", files.iter().map(|f| json!({"pattern": format!("def {}", stem(f))})).collect()),
    ];

    let ctx = ToolContext::new(root).unwrap();
    let reg = tools::all();
    // Warm the store, the name table and the freshness cache.
    for (tool, calls) in &workload {
        let _ = reg.call(&ctx, tool, calls[0].clone());
    }
    let _ = ctx.state_for("search_code", &json!({}));

    println!("# Evidence ledger: cost per retrieval on {} (100 calls per tool)\n", src.display());
    println!("| tool | tool p50 / p99 ms | state p50 / p99 | first call p50 / p99 | repeat p50 / p99 | first call / tool | repeat / tool |");
    println!("|---|---|---|---|---|---|---|");
    for (tool, calls) in &workload {
        let (mut plain, mut state, mut first, mut repeat): (
            Vec<Duration>,
            Vec<Duration>,
            Vec<Duration>,
            Vec<Duration>,
        ) = Default::default();
        let mut ledger = Ledger::default();
        for args in calls {
            let t = Instant::now();
            let out = reg.call(&ctx, tool, args.clone());
            plain.push(t.elapsed());
            assert!(!out.is_error, "{tool} {args}: {}", out.value);

            let t = Instant::now();
            let tree = ctx.state_for(tool, args);
            state.push(t.elapsed());
            assert!(tree.is_some());

            let t = Instant::now();
            let tree = ctx.state_for(tool, args).unwrap();
            let out = reg.call(&ctx, tool, args.clone());
            ledger.note("localization", tool, args, &out.value, out.is_error, Some(&tree), root);
            first.push(t.elapsed());

            let t = Instant::now();
            let tree = ctx.state_for(tool, args).unwrap();
            let again = ledger.recall("root_cause", tool, args, &tree);
            repeat.push(t.elapsed());
            assert!(again.is_some(), "{tool} {args}: not answered from the ledger");
        }
        let p = |v: &mut Vec<Duration>| (percentile(v, 0.5), percentile(v, 0.99));
        let (a, b, c, d) = (p(&mut plain), p(&mut state), p(&mut first), p(&mut repeat));
        println!(
            "| {tool} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2}x | {:.2}x |",
            a.0,
            a.1,
            b.0,
            b.1,
            c.0,
            c.1,
            d.0,
            d.1,
            c.0 / a.0,
            d.0 / a.0
        );
    }
}
