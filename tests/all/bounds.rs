//! Bounded work (issue 15, items 6, 7 and two low ones): every test feeds input that made
//! today's code run for minutes or gigabytes, and states its bound in rows and bytes.
//! The inputs are generated here (see `fixtures/evil/README.md`), never committed big.

use std::path::Path;

use reproagent::index::{self, Options};
use reproagent::store;

use crate::common::*;

/// `function f0() {` ... 5,000 deep ... `}`: each id carried its whole nesting chain.
fn nested_functions_ts(depth: usize) -> String {
    let mut s = String::new();
    for i in 0..depth {
        s.push_str(&format!("function f{i}() {{\n"));
    }
    for _ in 0..depth {
        s.push_str("}\n");
    }
    s
}

/// `def fN():` ... one line per function, each calling the previous one.
fn many_functions_py(n: usize) -> String {
    let mut s = String::with_capacity(n * 24);
    s.push_str("def f0(): pass\n");
    for i in 1..n {
        s.push_str(&format!("def f{i}(): f{}()\n", i - 1));
    }
    s
}

fn graph_bytes(root: &Path) -> u64 {
    std::fs::metadata(store::db_path(root)).map(|m| m.len()).unwrap_or(0)
}

fn entity_ids(root: &Path) -> Vec<String> {
    let s = store::open(&store::db_path(root)).unwrap();
    s.export("entity").unwrap().rows.iter().map(|r| r[0].get_str().unwrap_or_default().to_string()).collect()
}

#[test]
fn nested_5000_functions_index_under_8mb_and_20k_rows() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("deep.ts"), nested_functions_ts(5000)).unwrap();
    let one = index_with(dir.path(), 1, true);
    assert_eq!(one.entities, 5001, "{one:?}");
    let rows = dump_all(dir.path());
    assert!(rows.len() < 20_000, "{} rows", rows.len());
    let bytes = graph_bytes(dir.path());
    assert!(bytes < 8 << 20, "graph.db is {bytes} bytes");
    // The keyword index too: entity bodies overlap, and are bounded per file.
    let search: u64 = std::fs::read_dir(reproagent::search::search_dir(dir.path()))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(search < 8 << 20, "the keyword index is {search} bytes");
    let ids = entity_ids(dir.path());
    let longest = ids.iter().map(String::len).max().unwrap_or(0);
    assert!(longest < 100, "the longest id is {longest} bytes: {:?}", ids.iter().max_by_key(|i| i.len()));
    // Shallow ids keep the whole chain; deep ones the outermost 4 and the innermost 3.
    assert!(ids.contains(&"deep.ts:f0.f1.f2.f3.f4.f5.f6.f7".to_string()), "{:?}", &ids[..10]);
    assert!(ids.contains(&"deep.ts:f0.f1.f2.f3...f6.f7.f8".to_string()));
    assert!(ids.contains(&"deep.ts:f0.f1.f2.f3...f4997.f4998.f4999".to_string()));
    // Ids stay unique, and the build the same whatever the thread count.
    let mut uniq = ids.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), ids.len());
    let before = dump_all(dir.path());
    index_with(dir.path(), 2, true);
    assert_eq!(before, dump_all(dir.path()));
}

#[test]
fn file_of_100k_functions_keeps_50k_entities_under_128mb_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = many_functions_py(100_000);
    assert!(src.len() > 2_000_000);
    std::fs::write(dir.path().join("many.py"), &src).unwrap();
    std::fs::write(dir.path().join("small.py"), "def g():\n    pass\n").unwrap();
    let s = index_with(dir.path(), 2, true);
    assert_eq!(s.truncated.len(), 1, "{:?}", s.truncated);
    assert_eq!(s.truncated[0].path, "many.py");
    assert!(
        s.truncated[0].reason.contains("entity budget hit: kept the first 50000 of 100001"),
        "{}",
        s.truncated[0].reason
    );
    assert!(s.line().contains("1 truncated"), "{}", s.line());
    // many.py keeps its first 50,000 entities (the module one of them), small.py its two.
    assert_eq!(s.entities, 50_002, "{s:?}");
    assert!(s.edges >= 49_000 && s.edges < 50_000, "{s:?}");
    let bytes = graph_bytes(dir.path());
    assert!(bytes < 128 << 20, "graph.db is {bytes} bytes");
}

#[test]
fn entity_budget_is_a_flag_and_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.py"), many_functions_py(30)).unwrap();
    let mut o = Options::new(dir.path());
    o.limits.max_entities = 11;
    let s = index::run(&o).unwrap();
    assert_eq!(s.entities, 11);
    assert_eq!(s.truncated.len(), 1);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .args(["index", "--max-entities", "0"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-entities must be at least 1"));
}

fn tiny_indexed_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.py"), "def f():\n    g()\n\ndef g():\n    f()\n").unwrap();
    index_with(dir.path(), 1, true);
    dir
}

fn reproagent(root: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_reproagent")).current_dir(root).args(args).output().unwrap()
}

#[test]
fn recursive_query_on_a_cycle_stops_at_its_2s_timeout_with_no_rows() {
    let repo = tiny_indexed_repo();
    // f calls g calls f: the depth grows without end.
    let script = "r[x, d] := *calls{caller: x}, d = 0\n r[y, d] := r[x, d0], *calls{caller: x, callee: y}, d = d0 + 1\n ?[count(x)] := r[x, _]";
    let started = std::time::Instant::now();
    let out = reproagent(repo.path(), &["query", script, "--timeout", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("query stopped: it ran past its time limit of 2 s"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let out = reproagent(repo.path(), &["query", "?[x] := x = 1", "--timeout", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--timeout 0: expected 1 to 3600 seconds"));
}

#[test]
fn growing_query_is_stopped_at_64mb() {
    let repo = tiny_indexed_repo();
    let s = store::open(&store::db_path(repo.path())).unwrap();
    // Each row is 10 bytes longer than the last: memory grows with the square of the rows.
    let script = "r[n, s] := n = 0, s = ''\n r[n, s] := r[m, t], n = m + 1, s = concat(t, 'xxxxxxxxxx')\n ?[count(n)] := r[n, _]";
    let bounds =
        store::bounded::QueryBounds { timeout: std::time::Duration::from_secs(120), max_memory_bytes: 64 << 20 };
    let e = s.query_bounded(script, Default::default(), &bounds).unwrap_err().to_string();
    assert!(e.contains("query stopped: it grew the process by over 64 MiB"), "{e}");
}

#[test]
fn query_nested_10000_deep_is_refused_with_its_position() {
    let repo = tiny_indexed_repo();
    let script = format!("?[x] := x = {}1{}", "(".repeat(10_000), ")".repeat(10_000));
    let out = reproagent(repo.path(), &["query", &script]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nests brackets more than 64 deep at line 1, column 77"), "{err}");
    // 60 levels still run.
    let ok = format!("?[x] := x = {}1{}", "(".repeat(60), ")".repeat(60));
    let out = reproagent(repo.path(), &["query", &ok]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Peak resident memory of a run of `reproagent ARGS` in `root`, in KiB (GNU time).
fn peak_kib(root: &Path, args: &[&str]) -> (u64, String) {
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "peak %M"])
        .arg(env!("CARGO_BIN_EXE_reproagent"))
        .args(args)
        .current_dir(root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let kib = err
        .lines()
        .filter_map(|l| l.strip_prefix("peak "))
        .next_back()
        .and_then(|k| k.trim().parse().ok())
        .unwrap_or(u64::MAX);
    (kib, String::from_utf8_lossy(&out.stdout).to_string())
}

#[test]
fn search_code_with_15000_distinct_words_stays_under_128mb_and_says_it_was_cut() {
    let repo = tiny_indexed_repo();
    let words: Vec<String> = (0..15_000).map(|i| format!("w{i}x")).collect();
    // 108 KB: the most one argument may carry is 128 KiB.
    let query = format!("f {}", words.join(" "));
    let args = serde_json::json!({ "query": query }).to_string();
    let (kib, out) = peak_kib(repo.path(), &["tool", "search_code", &args]);
    assert!(kib < 128 * 1024, "peak {kib} KiB");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["hits"][0]["id"], "a.py:f", "{v}");
    let note = v["note"].as_str().unwrap_or_default();
    assert!(note.contains("read the first 4096 of its 108891 bytes, searched its first 64 distinct words"), "{note}");
    assert!(v["query"].as_str().unwrap().len() < 300);
    // The bound in words and bytes, whatever the query.
    let long = format!("{} f", "y".repeat(70));
    let (kept, note) = reproagent::search::query_words(&long);
    assert_eq!(kept, vec!["f".to_string()]);
    assert_eq!(note.as_deref(), Some("the query was cut: left out 1 word over 64 bytes"));
    let (kept, note) = reproagent::search::query_words(&words[..64].join(" "));
    assert_eq!(kept.len(), 64);
    assert!(note.is_none());
}

/// `n` functions in `file`, each calling all of them, and `lonely` that nobody calls.
fn dense_calls_py(prefix: &str, n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        s.push_str(&format!("def {prefix}{i}():\n"));
        for j in 0..n {
            s.push_str(&format!("    {prefix}{j}()\n"));
        }
        s.push('\n');
    }
    s.push_str("def lonely():\n    pass\n");
    s
}

fn tool_json(root: &Path, tool: &str, args: serde_json::Value) -> serde_json::Value {
    let out = reproagent(root, &["tool", tool, &args.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn dense_300x300_call_graph_walks_stop_at_5000_edges_and_100k_chains_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("d.py"), dense_calls_py("f", 300)).unwrap();
    std::fs::write(dir.path().join("e.py"), dense_calls_py("g", 40)).unwrap();
    let s = index_with(dir.path(), 2, true);
    assert_eq!(s.edges, 300 * 300 + 40 * 40);
    for tool in ["callees", "callers"] {
        let v = tool_json(dir.path(), tool, serde_json::json!({"name": "d.py:f7", "depth": 5, "limit": 500}));
        assert_eq!(v["total"], 5000, "{tool}: {}", v["note"]);
        assert_eq!(v["truncated"], true);
        let note = v["note"].as_str().unwrap();
        assert!(note.contains("stopped at 5000 edges, at depth 2 of 5"), "{note}");
        // Nearest first: the edges one call away come first (the answer is also cut at
        // 20,000 characters, and says so).
        let edges = v["edges"].as_array().unwrap();
        assert!(!edges.is_empty() && edges.iter().all(|e| e["depth"] == 1), "{note}");
        assert!(note.starts_with("answer cut at 20000 characters"), "{note}");
    }
    // The walk from f0 is cut; what it found still gives chains.
    let v = tool_json(
        dir.path(),
        "call_chain",
        serde_json::json!({"from": "d.py:f0", "to": "d.py:f299", "max_depth": 8, "limit": 5}),
    );
    assert_eq!(v["chains"].as_array().unwrap().len(), 5);
    assert_eq!(v["chains"][0].as_array().unwrap().len(), 1, "the direct call first");
    assert_eq!(v["truncated"], true);
    // 40x40: the walk is whole (1,600 edges) but the simple paths to an unreachable
    // target are 39^7: the search stops at 100,000 partial chains.
    let v = tool_json(
        dir.path(),
        "call_chain",
        serde_json::json!({"from": "e.py:g0", "to": "e.py:lonely", "max_depth": 8}),
    );
    assert_eq!(v["chains"].as_array().unwrap().len(), 0);
    assert_eq!(v["truncated"], true);
    let note = v["note"].as_str().unwrap();
    assert!(note.starts_with("stopped after 100000 partial chains"), "{note}");
    // A small walk is whole and says nothing.
    let v = tool_json(dir.path(), "callees", serde_json::json!({"name": "e.py:g1", "depth": 1}));
    assert_eq!(v["total"], 40);
    assert_eq!(v["truncated"], false);
    assert!(v.get("note").is_none(), "{v}");
}

#[test]
fn utf16_sources_with_a_bom_are_indexed_not_called_binary() {
    let dir = tempfile::tempdir().unwrap();
    let py = "def from_utf16():\n    return helper()\n\ndef helper():\n    pass\n";
    let le: Vec<u8> = [0xFF, 0xFE].into_iter().chain(py.encode_utf16().flat_map(|u| u.to_le_bytes())).collect();
    std::fs::write(dir.path().join("le.py"), le).unwrap();
    let ts = "export function bigEndian(): number { return 1; }\n";
    let be: Vec<u8> = [0xFE, 0xFF].into_iter().chain(ts.encode_utf16().flat_map(|u| u.to_be_bytes())).collect();
    std::fs::write(dir.path().join("be.ts"), be).unwrap();
    // A lone surrogate: refused with the reason.
    std::fs::write(dir.path().join("bad.py"), [0xFF, 0xFE, 0x00, 0xD8, 0x41, 0x00]).unwrap();
    let s = index_with(dir.path(), 1, true);
    assert_eq!(s.skipped.len(), 1, "{:?}", s.skipped);
    assert!(s.skipped[0].reason.starts_with("UTF-16LE that does not decode"), "{:?}", s.skipped);
    let ids = entity_ids(dir.path());
    for id in ["le.py:from_utf16", "le.py:helper", "be.ts:bigEndian"] {
        assert!(ids.contains(&id.to_string()), "{id} in {ids:?}");
    }
    assert_eq!(s.edges, 1, "from_utf16 -> helper");
    let v = tool_json(dir.path(), "search_code", serde_json::json!({"query": "bigEndian"}));
    assert_eq!(v["hits"][0]["id"], "be.ts:bigEndian", "{v}");
}

/// A server on 127.0.0.1 that accepts every connection and never answers; it stops
/// accepting when dropped.
struct SilentServer {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl SilentServer {
    fn start() -> SilentServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => held.push(s),
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
            held.len()
        });
        SilentServer { port, stop, thread: Some(thread) }
    }

    /// Stop, and say how many connections were accepted.
    fn finish(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().map(|t| t.join().unwrap()).unwrap_or(0)
    }
}

fn hello() -> reproagent::model::ChatRequest {
    reproagent::model::ChatRequest::new(vec![reproagent::model::Message::user("hi")])
}

#[test]
fn a_model_server_that_never_answers_is_given_up_on_in_60s_with_the_defaults() {
    use reproagent::model::{ChatModel, HttpModel, ModelConfig, ModelError};
    let server = SilentServer::start();
    let c = ModelConfig::new(format!("http://127.0.0.1:{}/v1", server.port), "m");
    let started = std::time::Instant::now();
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, ModelError::Timeout { .. }), "{err:?}");
    assert!(took >= std::time::Duration::from_secs(55) && took < std::time::Duration::from_secs(70), "{took:?}");
    assert!(server.finish() >= 1);
}

#[test]
fn the_retry_budget_cuts_an_attempt_short_of_its_timeout() {
    use reproagent::model::{ChatModel, HttpModel, ModelConfig, ModelError};
    let server = SilentServer::start();
    let mut c = ModelConfig::new(format!("http://127.0.0.1:{}/v1", server.port), "m");
    c.timeout = std::time::Duration::from_secs(30);
    c.retry_budget = std::time::Duration::from_secs(2);
    let started = std::time::Instant::now();
    let err = HttpModel::new(c).chat(&hello()).unwrap_err();
    assert!(matches!(err, ModelError::Timeout { attempts: 1, .. }), "{err:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(server.finish(), 1);
}
