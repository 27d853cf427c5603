//! `reproagent serve` driven as a real MCP client drives it: the binary spawned, JSON-RPC
//! over its stdin and stdout (initialize, notifications/initialized, tools/list,
//! tools/call), bad calls answered as `isError` results, and the server still serving.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{copy_tree, fixture, index_with};

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

impl Client {
    fn spawn(repo: &std::path::Path) -> Client {
        Self::spawn_with(repo, &[])
    }

    fn spawn_with(repo: &std::path::Path, extra: &[&str]) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_reproagent"))
            .args(["serve", "-C"])
            .arg(repo)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        Client { child, stdin: Some(stdin), lines, next_id: 1 }
    }

    fn send(&mut self, msg: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Send a request and wait for the response with its id (notifications are skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(60)).expect("the server answers within 60 s");
            let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    fn call(&mut self, name: &str, arguments: Value) -> Value {
        let r = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        assert!(r.get("error").is_none(), "tools/call {name} gave a protocol error: {r}");
        r["result"].clone()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON the tool put in its text content.
fn payload(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text content: {result}"));
    serde_json::from_str(text).unwrap()
}

#[test]
fn mcp_round_trip_over_stdio() {
    let dir = copy_tree(&fixture("python/shop"));
    index_with(dir.path(), 1, true);
    let mut c = Client::spawn(dir.path());

    let init = c.request(
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "reproagent-test", "version": "0"}
        }),
    );
    let res = &init["result"];
    assert_eq!(res["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(res["serverInfo"]["name"], "reproagent", "{init}");
    assert!(res["capabilities"]["tools"].is_object(), "{init}");
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let list = c.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("{list}"));
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for want in [
        "ls",
        "find",
        "grep",
        "read_file",
        "find_entity",
        "class_structure",
        "callers",
        "callees",
        "call_chain",
        "imports",
        "tests_for",
        "sequential_thinking",
        "search_code",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let grep = tools.iter().find(|t| t["name"] == "grep").unwrap();
    assert_eq!(grep["inputSchema"]["type"], "object");
    assert_eq!(grep["inputSchema"]["required"], json!(["pattern"]));

    // A good call.
    let r = c.call("grep", json!({"pattern": "class FixedOff"}));
    assert_eq!(r["isError"], false, "{r}");
    let p = payload(&r);
    assert_eq!(p["matches"][0]["path"], "core/pricing.py", "{p}");
    let r = c.call("callers", json!({"name": "core/pricing.py:round_money"}));
    assert_eq!(r["isError"], false, "{r}");
    assert!(payload(&r)["edges"].as_array().is_some_and(|e| !e.is_empty()), "{r}");

    // Bad calls: each an error result with a reason and a hint, none a dead server.
    let r = c.call("grep", json!({"pattern": "def apply("}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(payload(&r)["error"].as_str().unwrap().starts_with("bad regex"), "{r}");
    let r = c.call("no_such_tool", json!({}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(payload(&r)["error"].as_str().unwrap().contains("unknown tool"), "{r}");
    let r = c.call("callers", json!({"name": 42}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(payload(&r)["error"].as_str().unwrap().contains("`name` must be string"), "{r}");
    let r = c.call("read_file", json!({"path": "../../etc/passwd"}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(payload(&r)["error"].as_str().unwrap().contains("outside the repository"), "{r}");
    let r = c.call("find_entity", json!({"name": "MembrDiscont"}));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(payload(&r)["matched"], "fuzzy");

    // The session keeps its thought record across calls.
    c.call("sequential_thinking", json!({"thought": "a", "number": 1, "total": 2, "next_needed": true}));
    let r = c.call(
        "sequential_thinking",
        json!({"thought": "b", "number": 2, "total": 2, "next_needed": false, "revises": 1}),
    );
    assert_eq!(payload(&r)["recorded"], 2, "{r}");

    // Still serving.
    let r = c.call("read_file", json!({"path": "core/pricing.py", "start_line": 1, "end_line": 2}));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(payload(&r)["end_line"], 2);
    let again = c.request("tools/list", json!({}));
    assert!(again["result"]["tools"].is_array(), "{again}");

    // Closing stdin ends the server.
    drop(c.stdin.take());
    let mut waited = 0;
    while c.child.try_wait().unwrap().is_none() && waited < 100 {
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    assert!(c.child.try_wait().unwrap().is_some(), "the server exits when its stdin closes");
}

/// Every tool the server lists declares an output schema (an object schema), and the
/// structured content of a successful call validates against it: what an SDK client
/// checks (the official Python SDK validates `structuredContent` against `outputSchema`).
/// One call per tool, a second where an option changes the answer's shape; a tool the
/// table has no call for fails the test.
#[test]
fn every_tool_declares_an_output_schema_and_its_answers_conform() {
    let dir = copy_tree(&fixture("python/shop"));
    index_with(dir.path(), 1, true);
    let mut c = Client::spawn_with(dir.path(), &["--sandbox", "local"]);
    initialize(&mut c);
    let list = c.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("{list}")).clone();
    let money = "core/pricing.py:round_money";
    let calls: Vec<(&str, Value)> = vec![
        ("ls", json!({"depth": 2})),
        ("find", json!({"pattern": "*.py"})),
        ("grep", json!({"pattern": "def ", "context": 1, "limit": 3})),
        ("read_file", json!({"path": "core/pricing.py", "start_line": 1, "end_line": 5})),
        ("search_code", json!({"query": "discount price"})),
        ("find_entity", json!({"name": "Product"})),
        ("find_entity", json!({"name": "MembrDiscont"})),
        ("read_entity", json!({"name": "core/models.py:Product.describe"})),
        ("class_structure", json!({"name": "core/models.py:PerishableProduct"})),
        ("callers", json!({"name": money})),
        ("callers", json!({"name": money, "group": true, "exclude_tests": true})),
        ("callees", json!({"name": "cli.py"})),
        ("call_chain", json!({"from": "cli.py", "to": money})),
        ("imports", json!({"path": "core/pricing.py"})),
        ("tests_for", json!({"name": money})),
        ("tests_for", json!({"name": "core/errors.py:ShopError"})),
        ("sequential_thinking", json!({"thought": "a", "number": 1, "total": 1, "next_needed": false})),
        ("index", json!({})),
        ("run_command", json!({"command": "echo hi"})),
        ("run_python", json!({"code": "print(1)"})),
        ("run_test", json!({"file": "tests/test_orders.py"})),
    ];
    let listed: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for (name, _) in &calls {
        assert!(listed.contains(name), "{name} is not listed: {listed:?}");
    }
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        let schema = &t["outputSchema"];
        assert_eq!(schema["type"], "object", "{name} declares no object output schema: {t}");
        let validator =
            jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("{name}: a bad schema ({e}): {schema}"));
        let mine: Vec<&Value> = calls.iter().filter(|(n, _)| *n == name).map(|(_, a)| a).collect();
        assert!(!mine.is_empty(), "no sample call of {name} in this test");
        for args in mine {
            let r = c.call(name, args.clone());
            assert_eq!(r["isError"], false, "{name} {args}: {r}");
            let got = &r["structuredContent"];
            let errors: Vec<String> =
                validator.iter_errors(got).map(|e| format!("{} at {}", e, e.instance_path())).collect();
            assert!(
                errors.is_empty(),
                "{name} {args}: the answer does not conform to its outputSchema: {errors:?}\n{got}"
            );
            // The schema says something: the answer with its first required field's value
            // replaced by one of another JSON type is refused.
            let mut bad = got.clone();
            let key = schema["required"][0].as_str().unwrap_or_else(|| panic!("{name}: no required field: {schema}"));
            bad[key] = if bad[key].is_string() { json!(12345) } else { json!("not this") };
            assert!(!validator.is_valid(&bad), "{name}: the schema accepts {key} = {}", bad[key]);
        }
    }
}

fn initialize(c: &mut Client) {
    let init = c.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    assert!(init["result"].is_object(), "{init}");
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
}

#[test]
fn mcp_runtime_tools_in_a_local_sandbox() {
    let dir = copy_tree(&fixture("python/shop"));
    index_with(dir.path(), 1, true);
    let mut c = Client::spawn_with(dir.path(), &["--sandbox", "local"]);
    initialize(&mut c);
    let list = c.request("tools/list", json!({}));
    let names: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    for want in ["run_command", "run_python", "run_test", "grep"] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
    // Runs in the sandbox's copy: a file written there does not appear in the user's tree.
    let r = c.call("run_command", json!({"command": "ls core && echo made > made.txt", "timeout_secs": 60}));
    assert_eq!(r["isError"], false, "{r}");
    let p = payload(&r);
    assert_eq!(p["exit_code"], 0, "{p}");
    assert!(p["stdout"].as_str().unwrap().contains("pricing.py"), "{p}");
    assert!(!dir.path().join("made.txt").exists(), "the user's tree is never written");
    let r = c.call("run_python", json!({"code": "from core.pricing import round_money\nprint(round_money(2.345))"}));
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(payload(&r)["stdout"].as_str().unwrap().trim(), "2.35", "{r}");
    // A dangerous command is refused with its reason, and the server keeps serving.
    let r = c.call("run_command", json!({"command": "rm -rf /"}));
    assert_eq!(r["isError"], true, "{r}");
    assert!(payload(&r)["error"].as_str().unwrap().contains("refused"), "{r}");
    let r = c.call("run_command", json!({"command": "echo still"}));
    assert_eq!(payload(&r)["stdout"].as_str().unwrap().trim(), "still", "{r}");
}

#[test]
fn mcp_without_an_index_still_serves() {
    let dir = copy_tree(&fixture("python/shop"));
    let mut c = Client::spawn(dir.path());
    let init = c.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    assert!(init["result"].is_object(), "{init}");
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let r = c.call("callers", json!({"name": "round_money"}));
    assert_eq!(r["isError"], true, "{r}");
    let p = payload(&r);
    assert!(p["error"].as_str().unwrap().starts_with("no index at"), "{p}");
    assert!(p["hint"].as_str().unwrap().contains("reproagent index"), "{p}");
    let r = c.call("ls", json!({}));
    assert_eq!(r["isError"], false, "{r}");
}

/// An agent that writes a file keeps its session: the answer says which files are stale,
/// the `index` tool updates the index through the server, and the next answer knows the
/// new code and reports nothing stale.
#[test]
fn mcp_reports_stale_files_then_reindexes_through_the_server() {
    let dir = copy_tree(&fixture("python/shop"));
    index_with(dir.path(), 1, true);
    let mut c = Client::spawn(dir.path());
    initialize(&mut c);
    let r = c.call("callers", json!({"name": "round_money"}));
    assert_eq!(r["isError"], false, "{r}");
    assert!(payload(&r).get("stale").is_none(), "{r}");

    std::fs::write(
        dir.path().join("core/discount_report.py"),
        "from core.pricing import round_money\n\n\ndef report(x):\n    return round_money(x)\n",
    )
    .unwrap();
    let r = c.call("callers", json!({"name": "round_money"}));
    assert_eq!(r["isError"], false, "a stale index still answers: {r}");
    let p = payload(&r);
    assert_eq!(p["stale"]["files"], json!(["core/discount_report.py (new)"]), "{p}");
    assert!(p["stale"]["note"].as_str().unwrap().contains("`index` tool"), "{p}");
    assert!(!p["edges"].to_string().contains("discount_report"), "not indexed yet: {p}");

    let r = c.call("index", json!({}));
    assert_eq!(r["isError"], false, "{r}");
    let p = payload(&r);
    assert_eq!((p["mode"].as_str(), p["parsed"].as_u64()), (Some("incremental"), Some(1)), "{p}");

    let r = c.call("callers", json!({"name": "round_money"}));
    let p = payload(&r);
    assert!(p.get("stale").is_none(), "{p}");
    assert!(p["edges"].to_string().contains("core/discount_report.py:report"), "{p}");
    let r = c.call("search_code", json!({"query": "discount report"}));
    assert!(payload(&r)["hits"].to_string().contains("discount_report"), "{r}");
}

/// A client's `notifications/cancelled` stops the work: a call-chain search over a dense
/// call graph, which runs for seconds to its own bounds, stops at once and the server's
/// log (stderr, `RUST_LOG=info`) says it was cancelled. Nothing but JSON-RPC on stdout.
#[test]
fn a_cancelled_call_stops_its_work() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    let mut src = String::new();
    for i in 0..n {
        src.push_str(&format!("def f{i}():\n"));
        for j in 0..n {
            if j != i {
                src.push_str(&format!("    f{j}()\n"));
            }
        }
    }
    std::fs::write(dir.path().join("dense.py"), src).unwrap();
    index_with(dir.path(), 2, true);
    let mut child = Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .args(["serve", "-C"])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = lines_of(child.stderr.take().unwrap());
    let lines = lines_of(child.stdout.take().unwrap());
    let mut c = Client { stdin: child.stdin.take(), lines, child, next_id: 1 };
    initialize(&mut c);
    // Uncancelled, the search runs to its bound of 100,000 partial chains or 10 s.
    let id = c.next_id;
    c.next_id += 1;
    c.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "call_chain", "arguments": {"from": "dense.py:f0", "to": "dense.py:f1", "max_depth": 8, "limit": 50}}}));
    // Cancel (again every 20 ms, in case the request was not dispatched yet) until the
    // call's log line comes.
    let started = std::time::Instant::now();
    let line = loop {
        c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "test"}}));
        match log.recv_timeout(Duration::from_millis(20)) {
            Ok(l) if l.contains("call_chain") => break l,
            _ => assert!(started.elapsed() < Duration::from_secs(60), "the server never logged the call"),
        }
    };
    // The search saw the flag and stopped short of its bound (its own note says so).
    let note = line.split_once(" chars: ").map(|(_, n)| n).unwrap_or("");
    assert!(line.contains("call_chain cancelled in") && note.contains("cancelled"), "{line}");
    // The server still serves, and its stdout carried nothing but JSON-RPC.
    let r = c.call("ls", json!({}));
    assert_eq!(r["isError"], false, "{r}");
}

/// The lines a child writes to a pipe, as they come.
fn lines_of(pipe: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}
