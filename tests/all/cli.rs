//! The binary as a user meets it: query, schema and graph commands, their errors.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

fn run(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reproagent")).current_dir(root).args(args).output().unwrap()
}

fn stderr_line(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr).trim().to_string();
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    e
}

fn indexed_shop() -> tempfile::TempDir {
    let dir = copy_tree(&fixture("python/shop"));
    let o = run(dir.path(), &["index", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["files"], 15);
    assert_eq!(summary["mode"], "full");
    dir
}

#[test]
fn query_runs_read_only_datalog_with_params() {
    let dir = indexed_shop();
    let o = run(
        dir.path(),
        &[
            "query",
            "?[caller] := *calls:by_callee{callee: $id, caller}",
            "--param",
            "id=core/pricing.py:round_money",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let callers: Vec<&str> = v["rows"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap()).collect();
    assert!(callers.contains(&"core/pricing.py:format_price"), "{callers:?}");
    // The transitive example of `schema` runs as printed.
    let o = run(dir.path(), &["schema", "--json"]);
    let schema: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let calls = schema.as_array().unwrap().iter().find(|r| r["relation"] == "calls").unwrap();
    let example = calls["example"].as_str().unwrap();
    let o = run(dir.path(), &["query", example, "-p", "id=core/pricing.py:round_money"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("cli.py:main"), "2 hops up from round_money: {table}");
}

/// Every example `reproagent schema` prints runs as printed, relations and rules alike; those
/// that take an entity answer on the shop fixture (the rule `test_of` among them).
#[test]
fn every_schema_example_runs() {
    let dir = indexed_shop();
    let o = run(dir.path(), &["schema", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let schema: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let entries = schema.as_array().unwrap();
    assert!(entries.iter().any(|e| e["relation"] == "test_of" && e["rule"] == true), "{schema:#}");
    for e in entries {
        let example = e["example"].as_str().unwrap_or_else(|| panic!("no example: {e}"));
        let mut args = vec!["query", example, "--json"];
        for p in ["id=core/pricing.py:round_money", "class=core/models.py:Product"] {
            if example.contains(&format!("${}", p.split('=').next().unwrap())) {
                args.extend(["-p", p]);
            }
        }
        let o = run(dir.path(), &args);
        assert!(o.status.success(), "{}: {}", e["relation"], String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        // Those that name an entity of the shop answer with rows (the others name Django's
        // `save` and `open`, which the shop has none of).
        if args.contains(&"-p") {
            assert!(!v["rows"].as_array().unwrap().is_empty(), "{}: no rows for {example}", e["relation"]);
        }
    }
}

#[test]
fn bad_queries_say_where_and_what() {
    let dir = indexed_shop();
    let o = run(dir.path(), &["query", "?[a] :=\n  *file{path: a"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr_line(&o);
    assert!(e.starts_with("error: query: line 2, column"), "{e}");

    let o = run(dir.path(), &["query", "?[x] := *nosuch{x}"]);
    let e = stderr_line(&o);
    assert!(e.contains("'nosuch'") && e.contains("hint: `reproagent schema`"), "{e}");

    let o = run(dir.path(), &["query", "?[path, lang, hash, lines, is_test, syntax_errors] <- [['x', 'python', 'h', 1, false, 0]] :put file {path => lang, hash, lines, is_test, syntax_errors}"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr_line(&o);
    assert!(e.contains("read-only"), "{e}");
    let o = run(dir.path(), &["query", "::remove file"]);
    assert!(stderr_line(&o).contains("read-only"));
    // Nothing was written.
    let o2 = run(dir.path(), &["query", "?[count(p)] := *file{path: p}", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o2.stdout).unwrap();
    assert_eq!(v["rows"][0][0], 15);

    let o = run(dir.path(), &["query", "?[a] := a = 1", "--param", "oops"]);
    assert!(stderr_line(&o).contains("expected NAME=VALUE"));
}

#[test]
fn graph_commands_answer_with_ids_and_suggest_on_misses() {
    let dir = indexed_shop();
    let o = run(dir.path(), &["graph", "callers", "round_money", "--depth", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let edges = &out["edges"];
    let at = |d: i64| -> Vec<String> {
        edges
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["depth"] == d)
            .map(|e| e["caller"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(at(1).contains(&"core/pricing.py:format_price".to_string()));
    assert!(at(2).contains(&"cli.py:main".to_string()));

    // The CLI answers through the same typed tool as MCP and the agent: the same JSON.
    let tool = run(dir.path(), &["tool", "callers", r#"{"name":"round_money","depth":2}"#]);
    assert_eq!(out, serde_json::from_slice::<serde_json::Value>(&tool.stdout).unwrap());

    let o = run(dir.path(), &["graph", "path", "cli.py:main", "core/pricing.py:round_money", "--json"]);
    let paths: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = paths["chains"][0].as_array().unwrap();
    assert_eq!(first.len(), 2, "the shortest chain comes first: {first:?}");
    assert_eq!(first[1]["callee"], "core/pricing.py:round_money");

    let o = run(dir.path(), &["graph", "class", "SeasonalDiscount", "--json"]);
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["ancestors"][0], "core/pricing.py:PercentOff");
    assert!(c["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o["method"] == "core/promotions/seasonal.py:SeasonalDiscount.__init__"));

    let o = run(dir.path(), &["graph", "imports", "core/models.py", "--json"]);
    let i: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(i["imported_by"].as_array().unwrap().iter().any(|r| r["file"] == "core/__init__.py"));

    let o = run(dir.path(), &["graph", "callers", "Ordr"]);
    let e = stderr_line(&o);
    assert!(e.contains("no entity 'Ordr'; nearest: core/models.py:Order"), "{e}");

    let o = run(dir.path(), &["graph", "callers", "describe"]);
    let e = stderr_line(&o);
    assert!(e.contains("ambiguous") && e.contains("core/models.py:Product.describe"), "{e}");
}

#[test]
fn commands_without_an_index_say_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(dir.path(), &["graph", "find", "x"]);
    let e = stderr_line(&o);
    assert!(e.contains("no index at") && e.contains("reproagent index"), "{e}");
}
