//! What an agent gets, timed (issue 12): on the Django corpus of the index benchmark
//! (`benches/fetch.sh`, or REPROAGENT_BENCH_CORPUS), each tool called 100 times with fixed
//! arguments, twice: in process through `Registry::call` (the tool layer alone), and
//! through a real MCP session with `reproagent serve` (JSON-RPC over stdio, the time a
//! client waits). p50 and p99 per tool, and the largest answer in characters.
//!
//! `cargo bench --bench mcp` (a release build). Prints Markdown tables. The MCP half runs
//! `REPROAGENT_BENCH_BIN` when set (an older build's binary, for a before/after pair).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test or a benchmark stops at the first surprise

mod common;

use common::{copy_tree, corpus, percentile, strings};

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reproagent::index::{self, Options};
use reproagent::store;
use reproagent::tools::{self, ToolContext};
use serde_json::{json, Value};

/// Every `n`-th of `v`, `k` of them: the same sample every run.
fn sample(v: &[String], k: usize) -> Vec<String> {
    let stride = (v.len() / k).max(1);
    v.iter().step_by(stride).take(k).cloned().collect()
}

/// The calls: (tool, arguments), 100 per tool.
fn workload(store: &store::Store) -> Vec<(&'static str, Vec<Value>)> {
    let col = |q: &str| -> Vec<String> { strings(store, q).into_iter().map(|r| r[0].clone()).collect() };
    let called = col("?[callee] := *calls{callee, confidence}, confidence >= 0.5 :order callee");
    let mut called = called;
    called.dedup();
    let ids = sample(&called, 100);
    let names: Vec<String> = ids.iter().map(|id| id.rsplit(['.', ':']).next().unwrap().to_string()).collect();
    let classes = sample(&col("?[id] := *entity{id, kind}, kind == 'class' :order id"), 100);
    let files = sample(&col("?[path] := *file{path, lang}, lang == 'python' :order path"), 100);
    let docs: Vec<String> = sample(&col("?[doc, id] := *entity{id, doc}, doc != '' :order id"), 100)
        .into_iter()
        .map(|d| d.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        .collect();
    // Caller and callee two sure calls apart (a chain exists), outside tests.
    let pairs: Vec<Vec<String>> = strings(
        store,
        "?[a, c] := *calls{caller: a, callee: b, confidence: c1}, c1 >= 0.5, \
         *calls{caller: b, callee: c, confidence: c2}, c2 >= 0.5, a != c, a != b, b != c, \
         !starts_with(a, 'tests/') :order a, c",
    );
    let stride = (pairs.len() / 100).max(1);
    let chains: Vec<Value> =
        pairs.iter().step_by(stride).take(100).map(|p| json!({"from": p[0], "to": p[1]})).collect();
    let map = |v: &[String], f: &dyn Fn(&String) -> Value| v.iter().map(f).collect::<Vec<_>>();
    vec![
        ("find_entity", map(&ids, &|id| json!({"name": id}))),
        ("find_entity (name)", map(&names, &|n| json!({"name": n}))),
        ("read_entity", map(&ids, &|id| json!({"name": id}))),
        ("callers", map(&ids, &|id| json!({"name": id}))),
        ("callees", map(&ids, &|id| json!({"name": id}))),
        ("call_chain", chains),
        ("class_structure", map(&classes, &|id| json!({"name": id}))),
        ("imports", map(&files, &|p| json!({"path": p}))),
        ("tests_for", map(&ids, &|id| json!({"name": id}))),
        ("search_code", map(&docs, &|q| json!({"query": q}))),
        ("grep", map(&names, &|n| json!({"pattern": format!("def {n}\\b")}))),
        ("read_file", map(&files, &|p| json!({"path": p}))),
    ]
}

/// The first file the `imports` calls name (an indexed Python file).
fn first_imported_file(work: &[(&'static str, Vec<Value>)]) -> String {
    let imports = work.iter().find(|(l, _)| *l == "imports").unwrap();
    imports.1[0]["path"].as_str().unwrap().to_string()
}

fn tool_name(label: &str) -> &str {
    label.split(' ').next().unwrap()
}

struct Row {
    label: &'static str,
    lat: Vec<Duration>,
    max_chars: usize,
    errors: usize,
}

fn print(title: &str, rows: &mut [Row]) {
    println!("\n{title}\n");
    println!("| tool | calls | p50 ms | p99 ms | largest answer (chars) | errors |");
    println!("|---|---|---|---|---|---|");
    for r in rows.iter_mut() {
        let n = r.lat.len();
        println!(
            "| {} | {n} | {:.2} | {:.2} | {} | {} |",
            r.label,
            percentile(&mut r.lat, 0.5),
            percentile(&mut r.lat, 0.99),
            r.max_chars,
            r.errors
        );
    }
}

fn main() {
    let Some(src) = corpus() else {
        eprintln!("no corpus: run `bash benches/fetch.sh` (Django from PyPI) or set REPROAGENT_BENCH_CORPUS");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    copy_tree(&src, &root);
    let s = index::run(&Options::new(&root)).unwrap();
    println!("# MCP and tool latency: {} ({} files, {} entities)", src.display(), s.files, s.entities);
    let store = store::open(&store::db_path(&root)).unwrap();
    let work = workload(&store);
    drop(store);

    // In process: the tool layer alone (what the agent loop calls).
    let reg = tools::for_server(false);
    let ctx = ToolContext::new(&root).unwrap();
    let _ = reg.call(&ctx, "ls", json!({}));
    let mut rows = Vec::new();
    for (label, calls) in &work {
        let mut row = Row { label, lat: Vec::new(), max_chars: 0, errors: 0 };
        for args in calls {
            let t = Instant::now();
            let out = reg.call(&ctx, tool_name(label), args.clone());
            row.lat.push(t.elapsed());
            row.max_chars = row.max_chars.max(out.value.to_string().chars().count());
            row.errors += usize::from(out.is_error);
        }
        rows.push(row);
    }
    // After an edit: each call follows a rewrite of one indexed file (same bytes, new
    // mtime), so the freshness check has something to look at again.
    let edited = root.join(first_imported_file(&work));
    let bytes = std::fs::read(&edited).unwrap();
    let mut row = Row { label: "find_entity (after a write)", lat: Vec::new(), max_chars: 0, errors: 0 };
    for args in &work[0].1 {
        std::fs::write(&edited, &bytes).unwrap();
        let t = Instant::now();
        let out = reg.call(&ctx, "find_entity", args.clone());
        row.lat.push(t.elapsed());
        row.max_chars = row.max_chars.max(out.value.to_string().chars().count());
        row.errors += usize::from(out.is_error);
    }
    rows.push(row);
    print("## In process (`Registry::call`)", &mut rows);

    // A real MCP session: the binary, JSON-RPC over its stdin and stdout.
    // REPROAGENT_BENCH_BIN: another build's binary, for a before/after pair in one run.
    let bin = std::env::var("REPROAGENT_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_reproagent").to_string());
    let mut child = Command::new(&bin)
        .args(["serve", "-C"])
        .arg(&root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut id = 0;
    let mut request = |method: &str, params: Value| -> Value {
        id += 1;
        writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        stdin.flush().unwrap();
        loop {
            let v: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    };
    request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
    );
    let mut rows = Vec::new();
    for (label, calls) in &work {
        let mut row = Row { label, lat: Vec::new(), max_chars: 0, errors: 0 };
        for args in calls {
            let t = Instant::now();
            let r = request("tools/call", json!({"name": tool_name(label), "arguments": args}));
            row.lat.push(t.elapsed());
            let content = &r["result"]["content"];
            let chars: usize = content
                .as_array()
                .map(|a| a.iter().map(|c| c["text"].as_str().unwrap_or("").chars().count()).sum())
                .unwrap_or(0);
            row.max_chars = row.max_chars.max(chars);
            row.errors += usize::from(r["result"]["isError"] == json!(true));
        }
        rows.push(row);
    }
    print("## Through an MCP session (`reproagent serve`, stdio; text content counted)", &mut rows);
    let _ = child.kill();
    let _ = child.wait();
}
