//! Retrieval benchmark (issue 3): on the Django corpus of the index benchmark, the time of
//! the whole `index` (graph and keyword index together) against tree-sitter's parse-only
//! time with the same threads in the same run, then search latency (p50/p99 over 100
//! fixed queries), callers/callees, the tests reaching an entity (`test_of`) and 5-hop
//! call_chain latency, and the index size on
//! disk next to the source size.
//!
//! cargo bench --bench retrieval            (after `bash benches/fetch.sh`)
//! REPROAGENT_BENCH_CORPUS=path/to/tree cargo bench --bench retrieval

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or a benchmark stops at the first surprise

mod common;

use common::{copy_tree, corpus, percentile, strings};

use std::path::Path;
use std::time::Instant;

use reproagent::graph;
use reproagent::index::{self, Options};
use reproagent::search::SearchIndex;
use reproagent::store;

fn dir_size(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else { return 0 };
    if meta.is_file() {
        return meta.len();
    }
    std::fs::read_dir(p).map(|rd| rd.flatten().map(|e| dir_size(&e.path())).sum()).unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let Some(src) = corpus() else {
        eprintln!("no corpus: run `bash benches/fetch.sh` (Django from PyPI) or set REPROAGENT_BENCH_CORPUS");
        return;
    };
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    copy_tree(&src, root);
    println!("# Retrieval benchmark: {} ({} threads)\n", src.display(), threads);

    // The whole index against parse-only, alternated three times, medians.
    let (mut parse, mut full) = (Vec::new(), Vec::new());
    let mut summary = None;
    for _ in 0..3 {
        let (_, d) = index::parse_only(root, Some(threads)).unwrap();
        parse.push(d.as_secs_f64());
        let mut o = Options::new(root);
        o.threads = Some(threads);
        o.full = true;
        let t = Instant::now();
        let s = index::run(&o).unwrap();
        full.push(t.elapsed().as_secs_f64());
        summary = Some(s);
    }
    let s = summary.unwrap();
    let (p, f) = (median(parse), median(full));
    println!("| files | entities | edges | parse-only s | full index (graph + keyword) s | ratio |");
    println!("|---|---|---|---|---|---|");
    println!("| {} | {} | {} | {:.2} | {:.2} | {:.2}x |\n", s.files, s.entities, s.edges, p, f, f / p);

    let graph_db = store::db_path(root);
    let source_bytes: u64 =
        index::walk(root, false).0.iter().map(|f| std::fs::metadata(&f.abs).map(|m| m.len()).unwrap_or(0)).sum();
    let graph_bytes = dir_size(&graph_db);
    let search_bytes = dir_size(&reproagent::search::search_dir(root));
    println!(
        "Index size: graph {:.1} MiB + keyword {:.1} MiB = {:.1} MiB, for {:.1} MiB of source ({:.2}x).\n",
        graph_bytes as f64 / 1048576.0,
        search_bytes as f64 / 1048576.0,
        (graph_bytes + search_bytes) as f64 / 1048576.0,
        source_bytes as f64 / 1048576.0,
        (graph_bytes + search_bytes) as f64 / source_bytes as f64
    );

    let store = store::open(&graph_db).unwrap();
    let search = SearchIndex::open(root).unwrap();

    // 100 fixed queries: 50 entity names and 50 four-word phrases from docstrings, taken
    // at a fixed stride over the sorted ids so every run asks the same.
    let names = strings(&store, "?[id, name] := *entity{id, name, kind}, kind != 'module' :order id");
    let docs = strings(&store, "?[id, doc] := *entity{id, doc}, doc != '' :order id");
    let mut queries: Vec<String> = Vec::new();
    let stride = (names.len() / 50).max(1);
    queries.extend(names.iter().step_by(stride).take(50).map(|r| r[1].clone()));
    let stride = (docs.len() / 50).max(1);
    queries.extend(
        docs.iter().step_by(stride).take(50).map(|r| r[1].split_whitespace().take(4).collect::<Vec<_>>().join(" ")),
    );
    // Warm the searcher once, as a server would be.
    let _ = search.search("warm up", None, None, 10);
    let mut lat = Vec::new();
    let mut found_first = 0;
    for (i, q) in queries.iter().enumerate() {
        let t = Instant::now();
        let hits = search.search(q, None, None, 10).unwrap();
        lat.push(t.elapsed());
        if i < 50
            && hits.first().is_some_and(|h| {
                h.id.ends_with(&format!(":{q}")) || h.id.contains(&format!(".{q}")) || h.id.ends_with(q.as_str())
            })
        {
            found_first += 1;
        }
    }
    let n = lat.len();
    println!("| query | n | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    println!("| search (limit 10) | {n} | {:.2} | {:.2} |", percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));

    // callers / callees of 100 entities that have callers; call chains of 5 hops.
    let called = strings(&store, "?[callee] := *calls{callee, confidence}, confidence >= 0.5 :order callee");
    let mut callee_ids: Vec<String> = called.into_iter().map(|r| r[0].clone()).collect();
    callee_ids.dedup();
    let stride = (callee_ids.len() / 100).max(1);
    let sample: Vec<&String> = callee_ids.iter().step_by(stride).take(100).collect();
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for id in &sample {
        let t = Instant::now();
        let _ = graph::callers(&store, id, 1, 0.0).unwrap();
        up.push(t.elapsed());
        let t = Instant::now();
        let _ = graph::callees(&store, id, 1, 0.0).unwrap();
        down.push(t.elapsed());
    }
    println!(
        "| callers (depth 1) | {} | {:.2} | {:.2} |",
        up.len(),
        percentile(&mut up, 0.5),
        percentile(&mut up, 0.99)
    );
    println!(
        "| callees (depth 1) | {} | {:.2} | {:.2} |",
        down.len(),
        percentile(&mut down, 0.5),
        percentile(&mut down, 0.99)
    );

    // The tests that reach each of them: `test_of`, walked back from the entity since
    // format 9 (it was a stored relation, one indexed lookup).
    let mut tests = Vec::new();
    let mut with_tests = 0;
    for id in &sample {
        let t = Instant::now();
        let found = graph::tests_for(&store, id).unwrap();
        tests.push(t.elapsed());
        with_tests += usize::from(!found.is_empty());
    }
    println!(
        "| tests reaching (test_of, 3 levels back) | {} | {:.2} | {:.2} |",
        tests.len(),
        percentile(&mut tests, 0.5),
        percentile(&mut tests, 0.99)
    );

    // Pairs (a, b) with b exactly 5 calls from a along certain edges.
    let mut pairs: Vec<(String, String)> = Vec::new();
    for id in callee_ids.iter().step_by((callee_ids.len() / 400).max(1)) {
        let edges = graph::callees(&store, id, 5, 0.5).unwrap();
        if let Some(e) = edges.iter().find(|e| e.depth == 5) {
            pairs.push((id.clone(), e.callee.clone()));
        }
        if pairs.len() == 20 {
            break;
        }
    }
    let mut chain = Vec::new();
    let mut found = 0;
    for (a, b) in &pairs {
        let t = Instant::now();
        let paths = graph::paths(&store, a, b, 5, 0.5, 10).unwrap();
        chain.push(t.elapsed());
        found += usize::from(!paths.is_empty());
    }
    println!(
        "| call_chain (5 hops, certain edges) | {} | {:.2} | {:.2} |",
        chain.len(),
        percentile(&mut chain, 0.5),
        percentile(&mut chain, 0.99)
    );
    println!(
        "\nName queries whose first hit is the entity named: {found_first}/50; call chains found: {found}/{}; entities of the callers' sample that tests reach: {with_tests}/{}.",
        pairs.len(),
        sample.len()
    );
}
