//! The agent tools on the indexed fixture `fixtures/python/shop`: each tool's output is
//! snapshot-tested (insta, under tests/all/snapshots/), and bad input gets a clear error
//! value, never a panic or an empty answer.

use std::path::Path;

use reproagent::tools::{self, Registry, ToolContext, ToolOutput};
use serde_json::{json, Value};

use crate::common::{copy_tree, fixture, index_with};

struct Shop {
    dir: tempfile::TempDir,
    ctx: ToolContext,
    reg: Registry,
}

fn shop() -> Shop {
    let dir = copy_tree(&fixture("python/shop"));
    index_with(dir.path(), 2, true);
    let ctx = ToolContext::new(dir.path()).unwrap();
    Shop { dir, ctx, reg: tools::all() }
}

impl Shop {
    fn call(&self, name: &str, args: Value) -> ToolOutput {
        self.reg.call(&self.ctx, name, args)
    }

    /// A successful call, as pretty JSON with the temp root redacted.
    fn ok(&self, name: &str, args: Value) -> String {
        let out = self.call(name, args.clone());
        assert!(!out.is_error, "{name} {args} failed: {}", out.value);
        redact(self.dir.path(), &out.value)
    }

    /// A failing call, as pretty JSON with the temp root redacted.
    fn err(&self, name: &str, args: Value) -> String {
        let out = self.call(name, args.clone());
        assert!(out.is_error, "{name} {args} should fail: {}", out.value);
        assert!(out.value["error"].is_string(), "{}", out.value);
        redact(self.dir.path(), &out.value)
    }
}

fn redact(root: &Path, v: &Value) -> String {
    let text = serde_json::to_string_pretty(v).unwrap();
    let canon = root.canonicalize().unwrap();
    text.replace(&canon.display().to_string(), "[REPO]").replace(&root.display().to_string(), "[REPO]")
}

#[test]
fn fs_tools_on_shop() {
    let s = shop();
    insta::assert_snapshot!("ls_root", s.ok("ls", json!({})));
    insta::assert_snapshot!("ls_depth2_page", s.ok("ls", json!({"path": "core", "depth": 2, "limit": 3})));
    insta::assert_snapshot!("find_tests", s.ok("find", json!({"pattern": "test_*.py"})));
    insta::assert_snapshot!("find_glob_dir", s.ok("find", json!({"pattern": "core/**/*.py"})));
    insta::assert_snapshot!("grep_apply", s.ok("grep", json!({"pattern": r"def apply\(", "glob": "*.py"})));
    insta::assert_snapshot!("grep_context", s.ok("grep", json!({"pattern": "class FixedOff", "context": 2})));
    insta::assert_snapshot!(
        "grep_page",
        s.ok("grep", json!({"pattern": "import", "path": "core", "limit": 2, "offset": 1}))
    );
    insta::assert_snapshot!(
        "grep_case_insensitive",
        s.ok("grep", json!({"pattern": "BASE CLASS", "case_insensitive": true}))
    );
    insta::assert_snapshot!(
        "read_file_range",
        s.ok("read_file", json!({"path": "core/pricing.py", "start_line": 40, "end_line": 57}))
    );
}

#[test]
fn graph_tools_on_shop() {
    let s = shop();
    insta::assert_snapshot!("search_code", s.ok("search_code", json!({"query": "discount apply", "limit": 3})));
    insta::assert_snapshot!(
        "search_code_kind",
        s.ok("search_code", json!({"query": "stock", "kind": "class", "path_glob": "inventory/**"}))
    );
    insta::assert_snapshot!("search_code_none", s.ok("search_code", json!({"query": "zzqx"})));
    insta::assert_snapshot!("search_code_near", s.ok("search_code", json!({"query": "Warehose"})));
    insta::assert_snapshot!("find_entity_exact", s.ok("find_entity", json!({"name": "apply", "kind": "method"})));
    insta::assert_snapshot!("find_entity_fuzzy", s.ok("find_entity", json!({"name": "MembrDiscont"})));
    insta::assert_snapshot!("class_structure", s.ok("class_structure", json!({"name": "MemberDiscount"})));
    insta::assert_snapshot!("callers_clamp", s.ok("callers", json!({"name": "Discount.clamp", "depth": 2})));
    insta::assert_snapshot!("callees_checkout", s.ok("callees", json!({"name": "orders/service.py:checkout"})));
    insta::assert_snapshot!(
        "call_chain",
        s.ok("call_chain", json!({"from": "orders/service.py:checkout", "to": "core/pricing.py:round_money"}))
    );
    insta::assert_snapshot!("imports_pricing", s.ok("imports", json!({"path": "core/pricing.py"})));
    insta::assert_snapshot!("tests_for_fixed_off", s.ok("tests_for", json!({"name": "core/pricing.py:FixedOff"})));
    insta::assert_snapshot!(
        "tests_for_none",
        s.ok("tests_for", json!({"name": "core/pricing.py:MemberDiscount.apply"}))
    );
}

#[test]
fn tool_list_and_schemas() {
    let reg = tools::all();
    let mut names: Vec<&str> = reg.tools().map(|t| t.name()).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "tool names are unique");
    for t in reg.tools() {
        let schema = t.schema();
        assert_eq!(schema["type"], "object", "{}: {schema}", t.name());
        assert!(schema["properties"].is_object(), "{}: {schema}", t.name());
        assert!(!t.description().is_empty());
    }
    insta::assert_snapshot!("tool_list", serde_json::to_string_pretty(&reg.describe()).unwrap());
    let rt = tools::with_runtime();
    for name in ["run_command", "run_python", "run_test"] {
        assert!(rt.get(name).is_some(), "{name} in the runtime registry");
        assert!(reg.get(name).is_none(), "{name} only behind with_runtime");
    }
}

#[test]
fn runtime_tools_without_a_sandbox_say_so() {
    let s = shop();
    let out = tools::with_runtime().call(&s.ctx, "run_command", json!({"command": "ls"}));
    assert!(out.is_error);
    assert!(out.value["error"].as_str().unwrap().contains("no sandbox"), "{}", out.value);
    assert!(out.value["hint"].is_string());
}

#[test]
fn bad_input_gets_clear_errors() {
    let s = shop();
    insta::assert_snapshot!("err_unknown_tool", s.err("grpe", json!({"pattern": "x"})));
    insta::assert_snapshot!("err_wrong_type", s.err("callers", json!({"name": "checkout", "depth": "two"})));
    insta::assert_snapshot!("err_negative", s.err("grep", json!({"pattern": "x", "offset": -3})));
    insta::assert_snapshot!("err_missing_arg", s.err("grep", json!({"path": "core"})));
    insta::assert_snapshot!("err_unknown_arg", s.err("grep", json!({"patern": "x"})));
    insta::assert_snapshot!("err_not_an_object", s.err("ls", json!(["core"])));
    insta::assert_snapshot!("err_bad_regex", s.err("grep", json!({"pattern": "def apply("})));
    insta::assert_snapshot!("err_bad_glob", s.err("find", json!({"pattern": "core/[a"})));
    insta::assert_snapshot!("err_no_entity", s.err("callers", json!({"name": "aply_discont"})));
    insta::assert_snapshot!("err_ambiguous", s.err("callers", json!({"name": "apply"})));
    insta::assert_snapshot!("err_no_path", s.err("read_file", json!({"path": "core/pricng.py"})));
    insta::assert_snapshot!("err_not_a_class", s.err("class_structure", json!({"name": "orders/service.py:checkout"})));
    insta::assert_snapshot!("err_search_bad_glob", s.err("search_code", json!({"query": "x", "path_glob": "[a"})));
    insta::assert_snapshot!("err_past_end", s.err("read_file", json!({"path": "core/pricing.py", "start_line": 5000})));
}

#[test]
fn paths_outside_the_repository_are_refused() {
    let s = shop();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP-SECRET-LINE\n").unwrap();
    let root = s.dir.path();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("core/secret_link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("outdir")).unwrap();
    std::os::unix::fs::symlink(root.join("core/pricing.py"), root.join("pricing_link.py")).unwrap();
    let abs_outside = outside.path().join("secret.txt").display().to_string();
    let abs_inside = root.join("core/pricing.py").display().to_string();

    for (tool, args) in [
        ("read_file", json!({"path": "../secret.txt"})),
        ("read_file", json!({"path": "core/../../x"})),
        ("read_file", json!({"path": abs_outside})),
        ("read_file", json!({"path": "/etc/passwd"})),
        ("read_file", json!({"path": "core/secret_link.txt"})),
        ("read_file", json!({"path": "outdir/secret.txt"})),
        ("ls", json!({"path": "outdir"})),
        ("ls", json!({"path": ".."})),
        ("grep", json!({"pattern": "x", "path": "outdir"})),
        ("find", json!({"pattern": "*", "path": "/"})),
        ("imports", json!({"path": "../shop/core/pricing.py"})),
    ] {
        let out = s.call(tool, args.clone());
        assert!(out.is_error, "{tool} {args}: {}", out.value);
        assert!(
            out.value["error"].as_str().unwrap().contains("outside the repository"),
            "{tool} {args}: {}",
            out.value
        );
    }
    // Walks do not follow symlinks out: the secret is never found.
    let out = s.call("grep", json!({"pattern": "TOP-SECRET"}));
    assert!(!out.is_error, "{}", out.value);
    assert_eq!(out.value["total"], 0, "{}", out.value);
    let out = s.call("find", json!({"pattern": "*secret*"}));
    assert_eq!(out.value["files"], json!([]), "{}", out.value);
    // A symlink that stays inside is fine, and so is an absolute path inside.
    let out = s.call("read_file", json!({"path": "pricing_link.py", "start_line": 1, "end_line": 1}));
    assert!(!out.is_error, "{}", out.value);
    let out = s.call("read_file", json!({"path": abs_inside, "start_line": 1, "end_line": 1}));
    assert!(!out.is_error, "{}", out.value);
    assert_eq!(out.value["path"], "core/pricing.py");
}

#[test]
fn missing_and_stale_index_say_how_to_fix() {
    let dir = copy_tree(&fixture("python/shop"));
    let reg = tools::all();
    let ctx = ToolContext::new(dir.path()).unwrap();
    // File tools need no index.
    assert!(!reg.call(&ctx, "ls", json!({})).is_error);
    let out = reg.call(&ctx, "find_entity", json!({"name": "Order"}));
    assert!(out.is_error);
    assert!(out.value["error"].as_str().unwrap().starts_with("no index at"), "{}", out.value);
    assert!(out.value["hint"].as_str().unwrap().contains("reproagent index"), "{}", out.value);

    index_with(dir.path(), 1, true);
    let out = reg.call(&ctx, "find_entity", json!({"name": "Order"}));
    assert!(!out.is_error, "{}", out.value);

    // Edit one file, add another: the answer still comes, and says which files changed.
    let pricing = dir.path().join("core/pricing.py");
    let mut text = std::fs::read_to_string(&pricing).unwrap();
    text.push_str("\ndef added():\n    return 1\n");
    std::fs::write(&pricing, text).unwrap();
    std::fs::write(dir.path().join("core/extra.py"), "X = 1\n").unwrap();
    let out = reg.call(&ctx, "callers", json!({"name": "round_money"}));
    assert!(!out.is_error, "{}", out.value);
    assert_eq!(
        out.value["stale"]["files"],
        json!(["core/pricing.py (modified)", "core/extra.py (new)"]),
        "{}",
        out.value
    );
    assert_eq!(out.value["stale"]["total"], 2);
    // File tools read the tree itself: nothing stale to say.
    assert!(reg.call(&ctx, "ls", json!({})).value.get("stale").is_none());

    // Re-indexing (replacing graph.db) is picked up by the same context.
    // A file that index skips (over its 2 MiB budget) does not make the index stale.
    let big = format!("# {}\n", "x".repeat(3 << 20));
    std::fs::write(dir.path().join("core/huge.py"), big).unwrap();
    index_with(dir.path(), 1, false);
    let out = reg.call(&ctx, "find_entity", json!({"name": "added"}));
    assert!(!out.is_error, "{}", out.value);
    assert_eq!(out.value["entities"][0]["id"], "core/pricing.py:added");
    let out = reg.call(&ctx, "callers", json!({"name": "round_money"}));
    assert!(!out.is_error && out.value.get("stale").is_none(), "a skipped file is not a change: {}", out.value);
}

/// The files a graph tool's answer reports as changed since the index (`[]` when none).
fn stale_files(reg: &Registry, ctx: &ToolContext) -> Value {
    let out = reg.call(ctx, "callers", json!({"name": "round_money"}));
    assert!(!out.is_error, "{}", out.value);
    out.value.get("stale").map(|s| s["files"].clone()).unwrap_or(json!([]))
}

#[test]
fn the_freshness_watch_sees_each_change_at_the_next_call() {
    let dir = copy_tree(&fixture("python/shop"));
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/readme.txt"), "notes\n").unwrap();
    index_with(&root, 1, true);
    let (reg, ctx) = (tools::all(), ToolContext::new(&root).unwrap());
    let stale = || stale_files(&reg, &ctx);
    assert_eq!(stale(), json!([]));
    assert_eq!(stale(), json!([]), "asked again, nothing changed");

    // A source file in a directory that held none: seen at once, not after a timed re-walk.
    std::fs::write(root.join("docs/conf.py"), "X = 1\n").unwrap();
    assert_eq!(stale(), json!(["docs/conf.py (new)"]));
    std::fs::remove_file(root.join("docs/conf.py")).unwrap();
    assert_eq!(stale(), json!([]));

    // New directories, two deep, made after the watch was set up.
    std::fs::create_dir_all(root.join("core/sub/deeper")).unwrap();
    std::fs::write(root.join("core/sub/deeper/m.py"), "Y = 2\n").unwrap();
    assert_eq!(stale(), json!(["core/sub/deeper/m.py (new)"]));
    std::fs::write(root.join("core/sub/deeper/m.py"), "Y = 3\n").unwrap();
    assert_eq!(stale(), json!(["core/sub/deeper/m.py (new)"]));
    std::fs::remove_dir_all(root.join("core/sub")).unwrap();
    assert_eq!(stale(), json!([]));

    // An edit that keeps the size and puts the mtime back is still a change.
    let pricing = root.join("core/pricing.py");
    let before = std::fs::read(&pricing).unwrap();
    let mtime = std::fs::metadata(&pricing).unwrap().modified().unwrap();
    let mut edited = before.clone();
    let i = edited.iter().position(|b| b.is_ascii_lowercase()).unwrap();
    edited[i] = if edited[i] == b'z' { b'y' } else { b'z' };
    std::fs::write(&pricing, &edited).unwrap();
    std::fs::File::options().write(true).open(&pricing).unwrap().set_modified(mtime).unwrap();
    assert_eq!(stale(), json!(["core/pricing.py (modified)"]));

    // A rename away is a deletion and a new file; back, and the old content: fresh again.
    std::fs::rename(&pricing, root.join("core/pricing2.py")).unwrap();
    assert_eq!(stale(), json!(["core/pricing.py (deleted)", "core/pricing2.py (new)"]));
    std::fs::rename(root.join("core/pricing2.py"), &pricing).unwrap();
    std::fs::write(&pricing, &before).unwrap();
    assert_eq!(stale(), json!([]));
}

/// A directory watch sees writes made through a path in that directory only: not one
/// through a hard link elsewhere, nor one another NFS client or the Windows side of a
/// WSL mount makes. Even under a watch, every file is `stat`ed again after 5 seconds.
#[cfg(target_os = "linux")]
#[test]
fn a_change_the_watch_cannot_see_is_found_by_the_next_full_look() {
    let dir = copy_tree(&fixture("python/shop"));
    let root = dir.path().canonicalize().unwrap();
    index_with(&root, 1, true);
    let (reg, ctx) = (tools::all(), ToolContext::new(&root).unwrap());
    let stale = || stale_files(&reg, &ctx);
    assert_eq!(stale(), json!([]));
    let elsewhere = tempfile::tempdir_in(root.parent().unwrap()).unwrap();
    let link = elsewhere.path().join("pricing.py");
    std::fs::hard_link(root.join("core/pricing.py"), &link).unwrap();
    assert_eq!(stale(), json!([]));
    let mut text = std::fs::read_to_string(&link).unwrap();
    text.push_str("\n# edited through a link outside the tree\n");
    std::fs::write(&link, text).unwrap();
    assert_eq!(stale(), json!([]), "the watch saw nothing (if this fails, it sees more than it did)");
    std::thread::sleep(std::time::Duration::from_millis(5300));
    assert_eq!(stale(), json!(["core/pricing.py (modified)"]));
}

#[test]
fn long_outputs_are_bounded_and_paged() {
    let s = shop();
    let body: String = (1..=1200).map(|i| format!("value_{i} = {i}  # marker\n")).collect();
    std::fs::write(s.dir.path().join("big.txt"), body).unwrap();

    let first = s.call("read_file", json!({"path": "big.txt"})).value;
    assert_eq!(first["start_line"], 1);
    assert_eq!(first["end_line"], 200);
    assert_eq!(first["total_lines"], 1200);
    assert_eq!(first["truncated"], true);
    assert!(first["note"].as_str().unwrap().contains("start_line=201"), "{first}");
    let next = s.call("read_file", json!({"path": "big.txt", "start_line": 201})).value;
    assert!(next["content"].as_str().unwrap().starts_with(" 201 | value_201 = 201"), "{}", next["content"]);
    let capped = s.call("read_file", json!({"path": "big.txt", "start_line": 1, "end_line": 1200})).value;
    assert_eq!(capped["end_line"], 500, "at most 500 lines a call");
    assert_eq!(capped["truncated"], true);
    let tail = s.call("read_file", json!({"path": "big.txt", "start_line": 1101})).value;
    assert_eq!(tail["end_line"], 1200);
    assert_eq!(tail["truncated"], false);
    assert!(tail.get("note").is_none());

    // grep: pages in order, no overlap, together all the matches.
    let p1 = s.call("grep", json!({"pattern": "marker", "path": "big.txt"})).value;
    assert_eq!(p1["total"], 1200);
    assert_eq!(p1["shown"], 50);
    assert_eq!(p1["truncated"], true);
    assert!(p1["note"].as_str().unwrap().contains("showing matches 1-50 of 1200; pass offset=50"), "{}", p1["note"]);
    let p2 = s.call("grep", json!({"pattern": "marker", "path": "big.txt", "offset": 50, "limit": 500})).value;
    assert_eq!(p2["shown"], 500, "limit is capped at 500");
    assert_eq!(p2["matches"][0]["line"], 51);
    let last = s.call("grep", json!({"pattern": "marker", "path": "big.txt", "offset": 1190})).value;
    assert_eq!(last["shown"], 10);
    assert_eq!(last["truncated"], false);

    // A long line is cut, and says so.
    std::fs::write(s.dir.path().join("wide.txt"), format!("{}needle\n", "x".repeat(1000))).unwrap();
    let wide = s.call("grep", json!({"pattern": "needle", "path": "wide.txt"})).value;
    assert!(wide["matches"][0]["text"].as_str().unwrap().ends_with("[line cut]"), "{wide}");

    // ls pages too.
    let ls = s.call("ls", json!({"path": "core", "depth": 2, "limit": 2})).value;
    assert_eq!(ls["truncated"], true);
    assert!(ls["note"].as_str().unwrap().contains("offset=2"), "{ls}");
}

#[test]
fn sequential_thinking_keeps_the_record_per_session() {
    let s = shop();
    let t = |args: Value| s.call("sequential_thinking", args);
    let a = t(
        json!({"thought": "The issue says totals are wrong for members.", "number": 1, "total": 3, "next_needed": true}),
    );
    assert!(!a.is_error, "{}", a.value);
    let b = t(
        json!({"thought": "MemberDiscount.apply adds the bonus twice?", "number": 2, "total": 3, "next_needed": true, "branch": "double-bonus"}),
    );
    let c = t(
        json!({"thought": "Actually the rounding is applied before the discount.", "number": 3, "total": 4, "next_needed": true, "revises": 1}),
    );
    insta::assert_snapshot!("thinking_3", serde_json::to_string_pretty(&c.value).unwrap());
    assert!(!b.is_error && !c.is_error);
    // Revising a thought that was never recorded, or a later one, is refused.
    let bad = t(json!({"thought": "x", "number": 4, "total": 4, "next_needed": false, "revises": 9}));
    assert!(bad.is_error, "{}", bad.value);
    let bad = t(json!({"thought": "x", "number": 0, "total": 4, "next_needed": false}));
    assert!(bad.is_error, "{}", bad.value);
    assert_eq!(s.ctx.thoughts().len(), 3);
    // A new session starts empty.
    let other = ToolContext::new(s.dir.path()).unwrap();
    let d = s.reg.call(
        &other,
        "sequential_thinking",
        json!({"thought": "fresh", "number": 1, "total": 1, "next_needed": false}),
    );
    assert_eq!(d.value["recorded"], 1);
}

#[test]
fn tool_command_lists_runs_and_fails_cleanly() {
    let s = shop();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
            .args(args)
            .arg("-C")
            .arg(s.dir.path())
            .output()
            .unwrap()
    };
    let list = run(&["tool", "--list"]);
    assert!(list.status.success());
    let tools: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(tools, tools::all().describe(), "the CLI lists the registry");

    let ok = run(&["tool", "find", r#"{"pattern": "*.py", "path": "orders"}"#]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let v: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["files"], json!(["orders/__init__.py", "orders/events.py", "orders/service.py"]));
    // Same output as the library call.
    assert_eq!(v, s.call("find", json!({"pattern": "*.py", "path": "orders"})).value);

    let bad = run(&["tool", "grep", r#"{"pattern": "("}"#]);
    assert_eq!(bad.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().starts_with("bad regex"), "{v}");
    assert!(String::from_utf8_lossy(&bad.stderr).starts_with("error: bad regex"));

    let not_json = run(&["tool", "ls", "{path"]);
    assert_eq!(not_json.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&not_json.stderr).contains("arguments are not JSON"));
}

/// Every answer stays under 20,000 characters by default, saying how to get the rest:
/// a class with 600 methods, and `grep` at its largest limit.
#[test]
fn every_answer_is_capped_by_characters_with_a_note() {
    let dir = copy_tree(&fixture("python/shop"));
    let methods: String = (0..600)
        .map(|i| format!("    def a_rather_long_method_name_number_{i}(self, argument):\n        return {i}\n"))
        .collect();
    std::fs::write(dir.path().join("core/wide.py"), format!("class Wide:\n{methods}")).unwrap();
    index_with(dir.path(), 1, true);
    let ctx = ToolContext::new(dir.path()).unwrap();
    let reg = tools::all();
    for (tool, args) in [
        ("class_structure", json!({"name": "Wide"})),
        ("grep", json!({"pattern": "a_rather_long", "limit": 500})),
        ("find_entity", json!({"name": "a_rather_long", "limit": 200})),
        ("read_file", json!({"path": "core/wide.py", "start_line": 1, "end_line": 500})),
    ] {
        let out = reg.call(&ctx, tool, args);
        assert!(!out.is_error, "{tool}: {}", out.value);
        let n = out.value.to_string().chars().count();
        assert!(n <= tools::MAX_OUTPUT_CHARS, "{tool}: {n} characters");
        assert_eq!(out.value["truncated"], true, "{tool}");
        assert!(
            out.value["note"].as_str().unwrap().contains("answer cut at 20000 characters"),
            "{tool}: {}",
            out.value["note"]
        );
    }
}

/// `read_entity` gives an entity's source with its decorators, by id, dotted import path
/// or name; `find_entity` answers a dotted path or an exact id at once; `callers` leaves
/// out tests and groups by caller on request.
#[test]
fn read_entity_dotted_names_and_walk_filters() {
    let dir = copy_tree(&fixture("python/shop"));
    std::fs::write(
        dir.path().join("core/decorated.py"),
        "import functools\n\n\n@functools.lru_cache(\n    maxsize=None,\n)\n@staticmethod\ndef cached_total(x):\n    return x\n",
    )
    .unwrap();
    index_with(dir.path(), 1, true);
    let ctx = ToolContext::new(dir.path()).unwrap();
    let reg = tools::all();

    let out = reg.call(&ctx, "read_entity", json!({"name": "core.models.Product.from_dict"}));
    assert!(!out.is_error, "{}", out.value);
    assert_eq!(out.value["entity"]["id"], "core/models.py:Product.from_dict");
    assert_eq!(out.value["start_line"], 45, "from the @classmethod line: {}", out.value);
    let content = out.value["content"].as_str().unwrap();
    assert!(content.starts_with(" 45 |     @classmethod\n 46 |     def from_dict(cls, data):"), "{content}");
    assert!(content.trim_end().ends_with("return cls(sku, data[\"name\"], float(data[\"price\"]))"), "{content}");

    let out = reg.call(&ctx, "read_entity", json!({"name": "cached_total"}));
    assert_eq!(out.value["start_line"], 4, "a decorator over several lines: {}", out.value);
    assert!(out.value["content"].as_str().unwrap().starts_with("4 | @functools.lru_cache(\n5 |     maxsize=None,"));
    let out = reg.call(&ctx, "read_entity", json!({"name": "core/pricing.py:round_money"}));
    assert!(out.value["content"].as_str().unwrap().starts_with(" 8 | def round_money(amount):"), "{}", out.value);

    // A dotted import path and an exact id: found at once, exactly.
    for name in ["core.pricing.round_money", "core/pricing.py:round_money"] {
        let out = reg.call(&ctx, "find_entity", json!({"name": name}));
        assert_eq!(out.value["matched"], "exact", "{name}: {}", out.value);
        assert_eq!(out.value["entities"].as_array().unwrap().len(), 1, "{name}: {}", out.value);
        assert_eq!(out.value["entities"][0]["id"], "core/pricing.py:round_money");
    }
    let out = reg.call(&ctx, "callers", json!({"name": "core.models.Product.from_dict"}));
    assert!(!out.is_error, "a dotted path names the entity for every graph tool: {}", out.value);

    // Callers of Order.add_line: from the library and from the tests.
    let all = reg.call(&ctx, "callers", json!({"name": "Order.add_line"})).value;
    let from_tests = |v: &Value| {
        v["edges"].as_array().unwrap().iter().filter(|e| e["caller"].as_str().unwrap().starts_with("tests/")).count()
    };
    assert!(from_tests(&all) > 0, "{all}");
    let lib = reg.call(&ctx, "callers", json!({"name": "Order.add_line", "exclude_tests": true})).value;
    assert_eq!(from_tests(&lib), 0, "{lib}");
    assert_eq!(lib["tests_left_out"], from_tests(&all), "{lib}");
    assert_eq!(lib["edges"].as_array().unwrap().len() + from_tests(&all), all["edges"].as_array().unwrap().len());

    let grouped = reg.call(&ctx, "callers", json!({"name": "Order.add_line", "group": true})).value;
    let rows = grouped["grouped"].as_array().unwrap();
    let callers: std::collections::BTreeSet<&str> =
        all["edges"].as_array().unwrap().iter().map(|e| e["caller"].as_str().unwrap()).collect();
    assert_eq!(rows.len(), callers.len(), "one row per caller: {grouped}");
    let calls: u64 = rows.iter().map(|r| r["calls"].as_u64().unwrap()).sum();
    assert_eq!(calls as usize, all["edges"].as_array().unwrap().len());
}

/// The in-memory name table `find_entity` scans gives what the Datalog `graph::find` and
/// `graph::nearest` give, query for query.
#[test]
fn the_name_table_answers_as_the_graph_queries_do() {
    let s = shop();
    let store = reproagent::store::open(&reproagent::store::db_path(&s.dir.path().canonicalize().unwrap())).unwrap();
    let table = reproagent::graph::NameTable::load(&store).unwrap();
    for (q, kind) in [
        ("Order", None),
        ("order", None),
        ("total", Some("method")),
        ("core/models.py:Order", None),
        ("Order.total", None),
        ("models.Order", None),
        ("e", None),
        ("e", Some("class")),
        ("zzz_nothing", None),
    ] {
        let want: Vec<String> =
            reproagent::graph::find(&store, q, kind, 500).unwrap().into_iter().map(|e| e.id).collect();
        assert_eq!(table.find_ids(q, kind, 500), want, "{q} {kind:?}");
        assert_eq!(table.nearest(q, 5), reproagent::graph::nearest(&store, q, 5).unwrap(), "{q}");
    }
}
