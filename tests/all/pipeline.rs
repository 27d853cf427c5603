//! The model-driven pipeline (`reproduce --model NAME`) end to end: a scripted
//! OpenAI-compatible server on 127.0.0.1 plays the model, through the real index, tools
//! and local sandbox, on the fixture bugs. No test talks to any other address.

use std::path::Path;
use std::time::Duration;

use reproagent::model::{ChatModel, HttpModel, ModelConfig, Recorder, Replayer};
use reproagent::reproduce::agent::{Limits, ToolProtocol};
use reproagent::reproduce::{pipeline, Outcome, Probe, Status};
use reproagent::sandbox::Choice;
use serde_json::{json, Value};

use crate::common::*;
use crate::reproduce::{apply_fix, run_in};
use crate::support::scripted_server::{Reply, ScriptedServer};
use reproagent::sandbox::runners::TestStatus;

/// A model on the scripted server: few, fast retries.
fn model_at(base_url: &str) -> HttpModel {
    let mut c = ModelConfig::new(base_url, "test-model");
    c.max_retries = 2;
    c.backoff_base = Duration::from_millis(5);
    c.max_backoff = Duration::from_millis(20);
    c.timeout = Duration::from_secs(20);
    HttpModel::new(c)
}

fn run_on(root: &Path, bug: &str, model: &dyn ChatModel) -> Outcome {
    run_opts(root, bug, model, &pipeline::Options::default())
}

fn run_opts(root: &Path, bug: &str, model: &dyn ChatModel, opts: &pipeline::Options) -> Outcome {
    index_with(root, 2, false);
    let issue = fixture(&format!("bugs/{bug}/issue.md"));
    pipeline::run_with(
        &pipeline::Request {
            root: root.to_path_buf(),
            issue_file: issue.clone(),
            issue_text: std::fs::read_to_string(&issue).unwrap(),
            sandbox: Choice::Local,
            image: None,
            write: false,
            timeout_secs: 120,
            resume: None,
            env: Default::default(),
            environment: None,
        },
        model,
        opts,
    )
    .unwrap()
}

fn read_json(dir: &str, name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(Path::new(dir).join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))).unwrap()
}

pub(crate) fn loc(file: &str, entity: &str, rationale: &str) -> Reply {
    Reply::tool_call(
        "submit_localization",
        json!({"locations": [{"file": file, "entity": entity, "start_line": 1, "end_line": 20, "confidence": 0.9, "rationale": rationale}]}),
    )
}

pub(crate) fn cause(summary: &str, file: &str, function: &str) -> Reply {
    Reply::tool_call(
        "submit_root_cause",
        json!({"summary": summary, "category": "boundary-handling",
               "execution_path": [{"file": file, "line": 11, "function": function}],
               "trigger_conditions": ["the input triggers the boundary"], "confidence": 0.8}),
    )
}

pub(crate) fn plan(framework: &str, test_path: &str, kind: &str, message: Option<&str>) -> Reply {
    Reply::tool_call(
        "submit_test_plan",
        json!({"framework": framework, "test_path": test_path, "command": "the framework's own", "environment": [],
               "inputs": ["the issue's input"], "expected": {"kind": kind, "message": message}}),
    )
}

pub(crate) fn write_test(code: &str) -> Reply {
    Reply::tool_call("write_test", json!({"code": code}))
}

/// The independent review accepts.
pub(crate) fn accept() -> Reply {
    Reply::tool_call("submit_review", json!({"verdict": "accept", "findings": []}))
}

/// The fix probe proposes the fixture's own fix of py-slug.
pub(crate) fn slug_fix() -> Reply {
    Reply::tool_call(
        "propose_fix",
        json!({"edits": [{"path": "textkit/slug.py", "search": "    first = words[0]\n",
                          "replace": "    if not words:\n        return \"\"\n    first = words[0]\n"}],
               "rationale": "a blank title has no words: return the empty slug before indexing"}),
    )
}

fn chunk_fix() -> Reply {
    Reply::tool_call(
        "propose_fix",
        json!({"edits": [{"path": "src/chunk.js", "search": "i < items.length - 1;", "replace": "i < items.length;"}],
               "rationale": "the loop bound skipped a lone last element"}),
    )
}

fn percent_fix() -> Reply {
    Reply::tool_call(
        "propose_fix",
        json!({"edits": [{"path": "src/main/java/com/acme/util/Percent.java",
                          "search": "String digits = text.substring(0, text.length() - 1);",
                          "replace": "String digits = text.trim().substring(0, text.trim().length() - 1).trim();"}],
               "rationale": "trim the user's input before parsing"}),
    )
}

const PY_TEST: &str = "from textkit.slug import slugify\n\n\ndef test_blank_title_gives_empty_slug():\n    assert slugify(\"   \") == \"\"\n";

/// The Python script: two retrieval calls, the three analysis artifacts, the test, the
/// review's acceptance and the probe's fix.
fn py_script() -> Vec<Reply> {
    vec![
        Reply::tool_call("search_code", json!({"query": "slugify"})),
        Reply::tool_call("read_file", json!({"path": "textkit/slug.py"})),
        loc("textkit/slug.py", "slugify", "words[0] on an empty list (LOC-MARKER)"),
        cause("slugify indexes words[0] without checking for no words (CAUSE-MARKER)", "textkit/slug.py", "slugify"),
        plan("pytest", "tests/test_issue_blank_slug.py", "IndexError", Some("list index out of range")),
        write_test(PY_TEST),
        accept(),
        slug_fix(),
    ]
}

fn js_script() -> Vec<Reply> {
    vec![
        Reply::tool_call("read_file", json!({"path": "src/chunk.js"})),
        loc("src/chunk.js", "chunk", "the loop bound drops the tail"),
        cause("chunk stops before a last lone element", "src/chunk.js", "chunk"),
        plan("node-test", "test/chunk_issue.test.js", "AssertionError", None),
        write_test(JS_TEST),
        accept(),
        chunk_fix(),
    ]
}

fn java_script() -> Vec<Reply> {
    vec![
        Reply::tool_call("find_entity", json!({"name": "parse"})),
        loc("src/main/java/com/acme/util/Percent.java", "Percent.parse", "Integer.parseInt on untrimmed digits"),
        cause(
            "parse hands ' 7' to Integer.parseInt without trimming",
            "src/main/java/com/acme/util/Percent.java",
            "parse",
        ),
        plan(
            "junit4",
            "src/test/java/PercentIssueTest.java",
            "java.lang.NumberFormatException",
            Some("For input string: \" 7\""),
        ),
        write_test(JAVA_TEST),
        accept(),
        percent_fix(),
    ]
}

const JS_TEST: &str = "import { test } from 'node:test';\nimport assert from 'node:assert';\nimport { chunk } from '../src/chunk.js';\n\ntest('odd tail is kept', () => {\n  assert.deepStrictEqual(chunk([1, 2, 3], 2), [[1, 2], [3]]);\n});\n";

const JAVA_TEST: &str = "import com.acme.util.*;\n\npublic class PercentIssueTest {\n    @org.junit.Test\n    public void parsesALeadingSpace() {\n        org.junit.Assert.assertEquals(7, Percent.parse(\" 7%\"));\n    }\n}\n";

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|ts| ts.iter().map(|t| t["function"]["name"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

/// The written test fails on the buggy tree and passes once fix.patch is applied.
fn check_fails_before_passes_after(bug: &str, o: &Outcome, framework: &str) {
    let path = o.test_path.clone().unwrap();
    let code = o.test_code.clone().unwrap();
    let buggy = copy_tree(&fixture(&format!("bugs/{bug}/repo")));
    assert_eq!(run_in(buggy.path(), &path, &code, framework), TestStatus::Failed, "{bug}: must fail before the fix");
    let fixed = copy_tree(&fixture(&format!("bugs/{bug}/repo")));
    apply_fix(fixed.path(), &fixture(&format!("bugs/{bug}/fix.patch")));
    assert_eq!(run_in(fixed.path(), &path, &code, framework), TestStatus::Passed, "{bug}: must pass after the fix");
}

#[test]
fn python_bug_is_reproduced_through_four_stages_with_context_passed_on() {
    let server = ScriptedServer::start(py_script());
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert!(o.failure.as_deref().unwrap().contains("IndexError"), "{:?}", o.failure);
    assert_eq!(server.remaining(), 0);
    for a in [
        "localization.json",
        "root_cause.json",
        "test_plan.json",
        "generation.json",
        "outcome.json",
        "run.json",
        "report.md",
    ] {
        assert!(Path::new(&o.run_dir).join(a).exists(), "{a} missing");
    }
    let generation = read_json(&o.run_dir, "generation.json");
    let reviews = generation["reviews"].as_array().unwrap();
    assert_eq!(
        reviews.iter().map(|r| r["check"].as_str().unwrap()).collect::<Vec<_>>(),
        ["aligned", "logic", "symptom"]
    );
    assert!(reviews.iter().all(|r| r["passed"] == true));
    check_fails_before_passes_after("py-slug", &o, "pytest");

    let reqs = server.requests();
    assert_eq!(reqs.len(), 8);
    // Tools offered: the retrieval tools and the stage's submit tool; runtime tools only
    // in the stages that write tests (plan and generation); sequential_thinking nowhere.
    let first = tool_names(&reqs[0].body);
    for t in ["search_code", "read_file", "grep", "find_entity", "callers", "submit_localization"] {
        assert!(first.contains(&t.to_string()), "{t} not offered: {first:?}");
    }
    assert!(!first.contains(&"run_test".to_string()));
    assert!(reqs.iter().all(|r| !tool_names(&r.body).contains(&"sequential_thinking".to_string())));
    let plan_tools = tool_names(&reqs[4].body);
    assert!(plan_tools.contains(&"run_python".to_string()), "the plan stage may run snippets: {plan_tools:?}");
    let gen = tool_names(&reqs[5].body);
    assert!(gen.contains(&"write_test".to_string()) && gen.contains(&"run_python".to_string()), "{gen:?}");
    // The prompt carries the repository's conventions: framework and where the tests are;
    // the example test itself only in the stages that write tests.
    let system = messages(&reqs[0].body)[0]["content"].as_str().unwrap().to_string();
    assert!(
        system.contains("pytest") && system.contains("tests/test_slug.py") && !system.contains("def test_initials"),
        "{system}"
    );
    for i in [4, 5] {
        let system = messages(&reqs[i].body)[0]["content"].as_str().unwrap().to_string();
        assert!(system.contains("def test_initials"), "{system}");
    }
    // The test plan and generation see the conventions of the suspect code (where its
    // tests live, how a test there runs), and the plan the one list of frameworks.
    for i in [4, 5] {
        let system = messages(&reqs[i].body)[0]["content"].as_str().unwrap().to_string();
        assert!(system.contains("tests of `textkit/slug.py` live in `tests/test_slug.py`"), "{system}");
        assert!(
            system.contains("python3 -m pytest") && system.contains("'tests/test_reproduce.py::test_name'"),
            "{system}"
        );
    }
    let plan_system = messages(&reqs[4].body)[0]["content"].as_str().unwrap().to_string();
    for f in reproagent::sandbox::runners::framework_names() {
        assert!(plan_system.contains(&format!("`{f}`")), "{f} missing from the plan prompt: {plan_system}");
    }
    let plan_tool = reqs[4].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "submit_test_plan")
        .unwrap()
        .clone();
    assert_eq!(
        plan_tool["function"]["parameters"]["properties"]["framework"]["enum"],
        json!(reproagent::sandbox::runners::framework_names()),
        "{plan_tool}"
    );
    // The tool results went back: search_code found slugify, read_file gave its code.
    let after_read = messages(&reqs[2].body);
    let tool_msgs: Vec<&Value> = after_read.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_msgs.len(), 2);
    assert!(tool_msgs[0]["content"].as_str().unwrap().contains("slugify"));
    assert!(tool_msgs[1]["content"].as_str().unwrap().contains("first = words[0]"));
    // Stage context passes on: root cause sees the locations, plan sees the cause, generation the plan.
    let user = |i: usize| messages(&reqs[i].body)[1]["content"].as_str().unwrap().to_string();
    assert!(user(3).contains("LOC-MARKER") && user(3).contains("slugify crashes on a blank title"));
    assert!(user(4).contains("LOC-MARKER") && user(4).contains("CAUSE-MARKER"));
    assert!(user(5).contains("CAUSE-MARKER") && user(5).contains("tests/test_issue_blank_slug.py"));
    // The evidence ledger: what localization read reaches the later stages, with where
    // and what was found there.
    for i in [3, 4, 5] {
        assert!(
            user(i).contains("Evidence ledger")
                && user(i).contains("[localization] `read_file`")
                && user(i).contains("textkit/slug.py:1-")
                && user(i).contains("def slugify"),
            "{}",
            user(i)
        );
    }
    let ledger = read_json(&o.run_dir, "ledger.json");
    assert_eq!(ledger["entries"].as_array().unwrap().len(), 2, "{ledger}");
    // The independent review: its own conversation and prompt, JSON mode, read-only
    // tools, and the evidence: issue, root cause, plan, test source, the full failure.
    let review = &reqs[6].body;
    assert_eq!(review["response_format"], json!({"type": "json_object"}));
    let m = messages(review);
    assert_eq!(m.len(), 2);
    assert!(m[0]["content"].as_str().unwrap().contains("independent reviewer"));
    let evidence = m[1]["content"].as_str().unwrap();
    for part in [
        "slugify crashes on a blank title",
        "CAUSE-MARKER",
        "tests/test_issue_blank_slug.py",
        "slugify(\"   \")",
        "IndexError",
        "first = words[0]",
    ] {
        assert!(evidence.contains(part), "{part} missing from the review's evidence: {evidence}");
    }
    let review_tools = tool_names(review);
    assert!(review_tools.contains(&"read_file".to_string()) && review_tools.contains(&"submit_review".to_string()));
    assert!(!review_tools.iter().any(|t| t == "write_test" || t.starts_with("run_")), "{review_tools:?}");
    // The fix probe: its own conversation, the proposal applied in a sandbox copy; the
    // user's tree is untouched, the patch kept as an unverified suggestion.
    assert!(messages(&reqs[7].body)[0]["content"].as_str().unwrap().contains("fix probe"));
    assert!(tool_names(&reqs[7].body).contains(&"propose_fix".to_string()));
    assert_eq!(o.probe, Some(Probe::Passes), "{}", o.reason);
    assert!(o.reason.contains("fix probe: passes"), "{}", o.reason);
    let probe = read_json(&o.run_dir, "probe.json");
    assert_eq!(probe[0]["verdict"], "passes");
    assert_eq!(probe[0]["trials"][0]["without_fix"], "failed");
    assert_eq!(probe[0]["trials"][0]["with_fix"], "passed");
    let patch = std::fs::read_to_string(Path::new(&o.run_dir).join("probe.patch")).unwrap();
    assert!(patch.starts_with("UNVERIFIED suggestion"), "{patch}");
    assert!(patch.contains("--- a/textkit/slug.py") && patch.contains("+    if not words:"), "{patch}");
    assert!(!std::fs::read_to_string(repo.path().join("textkit/slug.py")).unwrap().contains("if not words"));
    // The command a user types, and what the symptom check compared.
    let cmd = o.command.clone().unwrap();
    assert!(cmd.contains("python3 -m pytest") && cmd.contains("tests/test_issue_blank_slug.py"), "{cmd}");
    assert!(!cmd.contains(".reproagent-run") && !cmd.contains("rm -rf"), "{cmd}");
    assert_eq!(o.symptom_check.as_deref(), Some("type and message"));
    let report = std::fs::read_to_string(Path::new(&o.run_dir).join("report.md")).unwrap();
    for part in ["## Independent review", "## Fix probe", "## Spend", "model calls: 8", "$0.14 per instance"] {
        assert!(report.contains(part), "{part} missing from the report: {report}");
    }

    // Provenance: model, endpoint host, every call.
    let run = read_json(&o.run_dir, "run.json");
    assert_eq!(run["model"]["model"], "test-model");
    assert_eq!(run["model"]["endpoint_host"], server.addr().to_string());
    assert_eq!(run["model_calls"].as_array().unwrap().len(), 8);
    assert_eq!(run["prompt_tokens"], 80);
    let tools: Vec<&str> = run["tool_calls"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        [
            "search_code",
            "read_file",
            "submit_localization",
            "submit_root_cause",
            "submit_test_plan",
            "submit_review",
            "propose_fix",
            "write_test"
        ]
    );
    let stages: Vec<&str> = run["stages"].as_array().unwrap().iter().map(|s| s["stage"].as_str().unwrap()).collect();
    assert_eq!(stages, ["localization", "root_cause", "test_plan", "generation"]);
}

#[test]
fn javascript_bug_is_reproduced_and_the_test_passes_after_the_fix() {
    let server = ScriptedServer::start(js_script());
    let repo = copy_tree(&fixture("bugs/js-chunk/repo"));
    let o = run_on(repo.path(), "js-chunk", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    let system = messages(&server.requests()[0].body)[0]["content"].as_str().unwrap().to_string();
    assert!(system.contains("node-test") && system.contains("test/chunk.test.js"), "{system}");
    check_fails_before_passes_after("js-chunk", &o, "node-test");
    assert_eq!(o.probe, Some(Probe::Passes), "{}", o.reason);
    // The issue gives no message: the outcome says the symptom check compared the type only.
    assert_eq!(o.symptom_check.as_deref(), Some("type only (the issue gives no message)"));
    assert!(o.reason.contains("compared only the exception type"), "{}", o.reason);
    let cmd = o.command.clone().unwrap();
    assert_eq!(cmd, "node --test 'test/chunk_issue.test.js'");
}

#[test]
fn java_bug_is_reproduced_and_the_test_passes_after_the_fix() {
    let server = ScriptedServer::start(java_script());
    let repo = copy_tree(&fixture("bugs/java-percent/repo"));
    let o = run_on(repo.path(), "java-percent", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{} {}", o.reason, read_json(&o.run_dir, "generation.json"));
    assert!(o.failure.as_deref().unwrap().contains("NumberFormatException"), "{:?}", o.failure);
    check_fails_before_passes_after("java-percent", &o, "junit4");
    assert_eq!(o.probe, Some(Probe::Passes), "{}", o.reason);
    let cmd = o.command.clone().unwrap();
    assert!(cmd.contains("javac") && !cmd.contains("rm -rf"), "{cmd}");
}

#[test]
fn a_test_that_passes_today_or_fails_wrongly_is_refined_with_the_findings() {
    let mut script = py_script();
    let (last_two, head) = (script.split_off(5), script);
    let mut script = head;
    // A probe with a runtime tool first: it runs in the sandbox and its output comes back.
    script.push(Reply::tool_call(
        "run_python",
        json!({"code": "from textkit.slug import slugify\nprint(repr(slugify('a b')))"}),
    ));
    // Attempt 1 passes today; attempt 2 fails with the wrong exception; attempt 3 is right.
    script.push(write_test(
        "from textkit.slug import slugify\n\n\ndef test_words():\n    assert slugify(\"a b\") == \"a-b\"\n",
    ));
    script.push(write_test("from textkit.slug import slugify\n\n\ndef test_none():\n    slugify(None)\n"));
    script.extend(last_two);
    let server = ScriptedServer::start(script);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert!(o.reason.contains("attempt 3"), "{}", o.reason);

    let reqs = server.requests();
    let last_tool = |i: usize| {
        let m = messages(&reqs[i].body);
        m.last().unwrap()["content"].as_str().unwrap().to_string()
    };
    assert!(last_tool(6).contains("'a-b'"), "{}", last_tool(6));
    // The findings went back to the model as the write_test results.
    assert!(last_tool(7).contains("passes-today"), "{}", last_tool(7));
    assert!(last_tool(8).contains("wrong-failure") && last_tool(8).contains("AttributeError"), "{}", last_tool(8));
    let generation = read_json(&o.run_dir, "generation.json");
    assert_eq!(generation["executions"].as_array().unwrap().len(), 3);
    assert_eq!(generation["executions"][0]["result"]["status"], "passed");
    assert_eq!(generation["executions"][1]["result"]["status"], "failed");
    assert_eq!(generation["test_code"], PY_TEST);
    let kinds: Vec<&str> =
        generation["reviews"].as_array().unwrap().iter().filter_map(|r| r["finding"]["type"].as_str()).collect();
    assert!(kinds.contains(&"passes-today") && kinds.contains(&"wrong-failure"), "{kinds:?}");
}

#[test]
fn a_model_that_never_stops_calling_tools_ends_at_the_budget_of_50_calls() {
    let script: Vec<Reply> = (0..60).map(|_| Reply::tool_call("search_code", json!({"query": "slugify"}))).collect();
    let server = ScriptedServer::start(script);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("localization stage") && o.reason.contains("budget of 50 model calls"), "{}", o.reason);
    assert_eq!(server.requests().len(), 50);
    let run = read_json(&o.run_dir, "run.json");
    assert_eq!(run["model_calls"].as_array().unwrap().len(), 50);
    assert_eq!(run["tool_calls"].as_array().unwrap().len(), 50);
    assert!(std::fs::read_to_string(Path::new(&o.run_dir).join("report.md")).unwrap().contains("budget of 50"));
}

#[test]
fn malformed_calls_get_an_error_back_and_two_in_a_row_end_the_stage() {
    // One unknown tool, then a good call (the count resets), then an invalid artifact
    // (told what is wrong), then two calls whose arguments are not JSON.
    let server = ScriptedServer::start(vec![
        Reply::tool_call("search_kode", json!({"query": "slugify"})),
        Reply::tool_call("search_code", json!({"query": "slugify"})),
        Reply::tool_call("submit_localization", json!({"locations": "textkit/slug.py"})),
        Reply::raw_tool_call("read_file", "{path: textkit/slug.py"),
        Reply::raw_tool_call("read_file", "not json"),
    ]);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("malformed tool calls 2 times in a row"), "{}", o.reason);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    let last = |i: usize| messages(&reqs[i].body).last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(last(1).contains("unknown tool 'search_kode'") && last(1).contains("search_code"), "{}", last(1));
    assert!(last(3).contains("invalid artifact") && last(3).contains("invalid type"), "{}", last(3));
    assert!(last(4).contains("not valid JSON"), "{}", last(4));

    // Two invalid artifacts in a row (one by the submit tool, one as JSON in a plain
    // answer) end the stage too, with the schema's complaint.
    let server = ScriptedServer::start(vec![
        Reply::tool_call("submit_localization", json!({"locations": []})),
        Reply::text("Here it is: {\"locations\": [{\"file\": \"textkit/slug.py\"}]}"),
    ]);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Error);
    assert_eq!(server.requests().len(), 2);
    assert!(
        o.reason.contains("invalid artifacts 2 times in a row") && o.reason.contains("missing field"),
        "{}",
        o.reason
    );
    let m = messages(&server.requests()[1].body);
    assert!(m.last().unwrap()["content"].as_str().unwrap().contains("`locations` is empty"));

    // Prose with neither a tool call nor an artifact, twice.
    let server =
        ScriptedServer::start(vec![Reply::text("I think the bug is in slugify."), Reply::text("Still thinking.")]);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("answers without a tool call or an artifact 2 times in a row"), "{}", o.reason);
    let m = messages(&server.requests()[1].body);
    assert!(m.last().unwrap()["content"].as_str().unwrap().contains("call `submit_localization`"));
}

#[test]
fn endpoint_faults_end_with_a_clear_outcome_and_keep_the_artifacts() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));

    // Nothing listens: unreachable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let o = run_on(repo.path(), "py-slug", &model_at(&format!("http://127.0.0.1:{port}/v1")));
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("cannot reach the model endpoint") && o.reason.contains("hint:"), "{}", o.reason);
    assert!(Path::new(&o.run_dir).join("run.json").exists() && Path::new(&o.run_dir).join("report.md").exists());

    // 401: the key is refused.
    let server = ScriptedServer::start(vec![Reply::status(401)]);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("refused the API key") && o.reason.contains("OPENAI_API_KEY"), "{}", o.reason);

    // A 429 storm in the second stage: localization stays.
    let server = ScriptedServer::start(vec![
        loc("textkit/slug.py", "slugify", "words[0]"),
        Reply::status(429).retry_after_ms(1),
        Reply::status(429).retry_after_ms(1),
        Reply::status(429).retry_after_ms(1),
    ]);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("root cause stage") && o.reason.contains("rate limited"), "{}", o.reason);
    assert!(Path::new(&o.run_dir).join("localization.json").exists());
    assert!(!Path::new(&o.run_dir).join("root_cause.json").exists());
    let run = read_json(&o.run_dir, "run.json");
    assert!(run["model_calls"][1]["error"].as_str().unwrap().contains("429"), "{run}");

    // Garbage replies in generation: the plan stays.
    let mut script: Vec<Reply> = py_script().into_iter().take(5).collect();
    script.extend((0..3).map(|_| Reply::garbage("<html>not a completion</html>")));
    let server = ScriptedServer::start(script);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Error);
    assert!(o.reason.contains("generation stage") && o.reason.contains("not a chat completion"), "{}", o.reason);
    assert!(Path::new(&o.run_dir).join("test_plan.json").exists());
}

#[test]
fn a_recorded_run_replays_offline_to_the_same_artifacts() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let cassette = repo.path().join("run.cassette.jsonl");
    let recorded = {
        let server = ScriptedServer::start(py_script());
        let model = Recorder::create(&cassette, model_at(&server.base_url())).unwrap();
        run_on(repo.path(), "py-slug", &model)
    };
    assert_eq!(recorded.status, Status::Reproduced, "{}", recorded.reason);
    // The server is gone: the replay touches no network.
    let replayed = run_on(repo.path(), "py-slug", &Replayer::open(&cassette).unwrap());
    assert_eq!(replayed.status, Status::Reproduced, "{}", replayed.reason);
    assert_ne!(recorded.run_dir, replayed.run_dir);
    for a in ["localization.json", "root_cause.json", "test_plan.json"] {
        assert_eq!(read_json(&recorded.run_dir, a), read_json(&replayed.run_dir, a), "{a}");
    }
    let strip = |mut g: Value| {
        for e in g["executions"].as_array_mut().unwrap() {
            e["result"]["output"] = Value::Null;
        }
        g
    };
    assert_eq!(
        strip(read_json(&recorded.run_dir, "generation.json")),
        strip(read_json(&replayed.run_dir, "generation.json"))
    );
    assert_eq!(recorded.reason, replayed.reason);
    let calls = |d: &str| {
        let mut v = read_json(d, "run.json")["model_calls"].clone();
        for c in v.as_array_mut().unwrap() {
            c["latency_ms"] = Value::Null;
        }
        v
    };
    assert_eq!(calls(&recorded.run_dir), calls(&replayed.run_dir));
}

#[test]
fn generation_stops_at_20_feedback_iterations_with_the_best_attempt_kept() {
    let passes = "from textkit.slug import slugify\n\n\ndef test_words():\n    assert slugify(\"a b\") == \"a-b\"\n";
    let wrong = "from textkit.slug import slugify\n\n\ndef test_none():\n    slugify(None)\n";
    let mut script: Vec<Reply> = py_script().into_iter().take(4).collect();
    // An invalid plan first (an unknown framework): told why, then a valid one.
    script.push(plan("pytestt", "tests/test_issue_blank_slug.py", "IndexError", None));
    script.push(plan("pytest", "tests/test_issue_blank_slug.py", "IndexError", Some("list index out of range")));
    for i in 0..25 {
        script.push(write_test(if i == 2 { wrong } else { passes }));
    }
    let server = ScriptedServer::start(script);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::NotReproduced, "{}", o.reason);
    assert!(o.reason.contains("no test passed the review in 20 feedback iterations"), "{}", o.reason);
    assert!(o.reason.contains("best attempt (1 of 3 checks passed)"), "{}", o.reason);
    assert_eq!(o.test_code.as_deref(), Some(wrong));
    let reqs = server.requests();
    let plan_error = messages(&reqs[5].body).last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(plan_error.contains("framework \\\"pytestt\\\" is not one of"), "{plan_error}");
    // 4 analysis calls, 2 plans, 20 tests: no call after the iteration budget.
    assert_eq!(reqs.len(), 26);
    let generation = read_json(&o.run_dir, "generation.json");
    assert_eq!(generation["executions"].as_array().unwrap().len(), 20);
    assert_eq!(generation["test_code"], wrong);
}

fn cli(root: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .current_dir(root)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("REPROAGENT_MODEL")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_cli_runs_the_pipeline_records_a_cassette_and_replays_it_offline() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    index_with(repo.path(), 2, false);
    let issue = fixture("bugs/py-slug/issue.md");
    let out = tempfile::tempdir().unwrap();
    let cassette = out.path().join("slug.jsonl");
    let (issue, cassette_s) = (issue.to_str().unwrap(), cassette.to_str().unwrap());
    let server = ScriptedServer::start(py_script());
    let base = server.base_url();
    let o = cli(
        repo.path(),
        &[
            "reproduce",
            "--issue",
            issue,
            "--model",
            "test-model",
            "--base-url",
            &base,
            "--temperature",
            "0.2",
            "--seed",
            "7",
            "--sandbox",
            "local",
            "--record",
            cassette_s,
            "--json",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let first: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(first["status"], "reproduced");
    // The sampling flags reached the endpoint.
    assert_eq!(server.requests()[0].body["temperature"], 0.2);
    assert_eq!(server.requests()[0].body["seed"], 7);
    // --repo defaults to `.`: the run directory is relative to it.
    let run_dir = repo.path().join(first["run_dir"].as_str().unwrap());
    let run = read_json(run_dir.to_str().unwrap(), "run.json");
    assert_eq!(run["model"]["sampling"]["seed"], 7);
    drop(server);

    // A cassette that runs out (the header and the three localization calls): a clear error, exit 1.
    let short = out.path().join("short.jsonl");
    let text = std::fs::read_to_string(&cassette).unwrap();
    std::fs::write(&short, text.lines().take(4).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let o = cli(
        repo.path(),
        &[
            "reproduce",
            "--issue",
            issue,
            "--model",
            "test-model",
            "--sandbox",
            "local",
            "--replay",
            short.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("error: root cause stage") && stdout.contains("not in the cassette"), "{stdout}");

    // Replay, with --write: the same outcome, and the test lands in the repository.
    let o = cli(
        repo.path(),
        &[
            "reproduce",
            "--issue",
            issue,
            "--model",
            "test-model",
            "--sandbox",
            "local",
            "--replay",
            cassette_s,
            "--write",
            "--json",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let second: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(second["status"], "reproduced");
    assert_eq!(second["written"], true);
    assert_eq!(std::fs::read_to_string(repo.path().join("tests/test_issue_blank_slug.py")).unwrap(), PY_TEST);
}

#[test]
fn resume_reuses_the_stages_whose_inputs_did_not_change() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let server = ScriptedServer::start(py_script());
    let first = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(first.status, Status::Reproduced, "{}", first.reason);
    let issue = fixture("bugs/py-slug/issue.md");
    let text = std::fs::read_to_string(&issue).unwrap();
    let resume_with = |text: &str, timeout_secs: u64, script: Vec<Reply>| {
        let server = ScriptedServer::start(script);
        let o = pipeline::run(
            &pipeline::Request {
                root: repo.path().to_path_buf(),
                issue_file: issue.clone(),
                issue_text: text.to_string(),
                sandbox: Choice::Local,
                image: None,
                write: false,
                timeout_secs,
                resume: Some(Path::new(&first.run_dir).to_path_buf()),
                env: Default::default(),
                environment: None,
            },
            &model_at(&server.base_url()),
        )
        .unwrap();
        (o, server.requests())
    };
    let resume = |text: &str, script: Vec<Reply>| resume_with(text, 120, script);

    // Same issue, same tree, same model: every stage is reused, generation included; no
    // model call, no sandbox.
    let (o, reqs) = resume(&text, Vec::new());
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!(reqs.len(), 0, "a resumed run with nothing changed called the model");
    assert_eq!((o.test_code.as_deref(), o.failure.as_deref()), (first.test_code.as_deref(), first.failure.as_deref()));
    assert_ne!(o.run_dir, first.run_dir);
    let run = read_json(&o.run_dir, "run.json");
    assert_eq!(run["reused"], json!(["localization", "root_cause", "test_plan", "generation"]));
    assert_eq!(run["model_calls"], json!([]));
    for a in ["localization.json", "root_cause.json", "test_plan.json", "generation.json", "inputs.json"] {
        assert_eq!(read_json(&first.run_dir, a), read_json(&o.run_dir, a), "{a}");
    }
    assert_eq!(read_json(&o.run_dir, "outcome.json")["run_id"], read_json(&o.run_dir, "run.json")["run_id"]);

    // Where the test runs is part of generation's inputs: with another timeout the
    // analysis is reused but the test is written and run again.
    let (o, reqs) = resume_with(&text, 90, py_script().split_off(5));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!(reqs.len(), 3);
    assert_eq!(read_json(&o.run_dir, "run.json")["reused"], json!(["localization", "root_cause", "test_plan"]));

    // A generation that ended in an error (a broken sandbox, an interrupt) says nothing
    // about the test: it runs again, and only it calls the model.
    let outcome_path = Path::new(&first.run_dir).join("outcome.json");
    let mut errored = read_json(&first.run_dir, "outcome.json");
    errored["status"] = json!("error");
    std::fs::write(&outcome_path, serde_json::to_vec_pretty(&errored).unwrap()).unwrap();
    let (o, reqs) = resume(&text, py_script().split_off(5));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!(reqs.len(), 3);
    assert!(tool_names(&reqs[0].body).contains(&"write_test".to_string()));
    assert_eq!(read_json(&o.run_dir, "run.json")["reused"], json!(["localization", "root_cause", "test_plan"]));

    // A changed issue changes every stage's inputs: everything runs again.
    let (o, reqs) = resume(&format!("{text}\nSeen on version 2.1.\n"), py_script());
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!(reqs.len(), 8);
    assert_eq!(read_json(&o.run_dir, "run.json")["reused"], json!([]));
    assert_ne!(read_json(&first.run_dir, "inputs.json"), read_json(&o.run_dir, "inputs.json"));
}

/// A test that fails today for the reported reason but asserts a value no fix gives.
const PY_NONE_TEST: &str =
    "from textkit.slug import slugify\n\n\ndef test_blank_title():\n    assert slugify(\"   \") is None\n";

#[test]
fn the_review_rejects_with_findings_then_accepts_the_corrected_test() {
    let mut script: Vec<Reply> = py_script().into_iter().take(5).collect();
    script.push(write_test(PY_NONE_TEST));
    // The review checks a claim in the code with a read-only tool, then rejects.
    script.push(Reply::tool_call("grep", json!({"pattern": "return", "path": "textkit/slug.py"})));
    script.push(Reply::tool_call(
        "submit_review",
        json!({"verdict": "reject", "findings": [{
            "evidence": "assert slugify(\"   \") is None",
            "location": "tests/test_issue_blank_slug.py:5",
            "severity": "critical",
            "suggestion": "REVIEW-SUGGESTION: the issue expects an empty slug, not None"}]}),
    ));
    script.extend([write_test(PY_TEST), accept(), slug_fix()]);
    let server = ScriptedServer::start(script);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let opts = pipeline::Options { review_model: Some("review-model".into()), ..Default::default() };
    let o = run_opts(repo.path(), "py-slug", &model_at(&server.base_url()), &opts);
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert!(o.reason.contains("attempt 2"), "{}", o.reason);
    assert_eq!(o.test_code.as_deref(), Some(PY_TEST));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 11);
    // The review ran on --review-model, every other stage on the run's model.
    let models: Vec<&str> = reqs.iter().map(|r| r.body["model"].as_str().unwrap()).collect();
    assert_eq!(
        models,
        [
            "test-model",
            "test-model",
            "test-model",
            "test-model",
            "test-model",
            "test-model",
            "review-model",
            "review-model",
            "test-model",
            "review-model",
            "test-model"
        ]
    );
    // The grep's result came back to the review; the rejection's findings, in RepoMAS's
    // shape, went back to generation as the write_test result.
    let last = |i: usize| messages(&reqs[i].body).last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(last(7).contains("return"), "{}", last(7));
    let back = last(8);
    for part in [
        "REVIEW-SUGGESTION",
        "\"severity\":\"critical\"",
        "\"location\":\"tests/test_issue_blank_slug.py:5\"",
        "\"evidence\"",
    ] {
        assert!(back.contains(part), "{part} missing: {back}");
    }
    let verdicts = read_json(&o.run_dir, "review.json");
    assert_eq!(verdicts.as_array().unwrap().len(), 2);
    assert_eq!((verdicts[0]["attempt"].as_u64(), verdicts[0]["verdict"].as_str()), (Some(1), Some("reject")));
    assert_eq!(verdicts[0]["findings"][0]["severity"], "critical");
    assert_eq!((verdicts[1]["attempt"].as_u64(), verdicts[1]["verdict"].as_str()), (Some(2), Some("accept")));
    let generation = read_json(&o.run_dir, "generation.json");
    let kinds: Vec<&str> =
        generation["reviews"].as_array().unwrap().iter().filter_map(|r| r["finding"]["type"].as_str()).collect();
    assert_eq!(kinds, ["review-rejected"]);
    let run = read_json(&o.run_dir, "run.json");
    assert_eq!(run["review_model"], "review-model");

    // A verdict that breaks the schema is sent back to the review, told why.
    let mut script: Vec<Reply> = py_script().into_iter().take(6).collect();
    script.push(Reply::tool_call("submit_review", json!({"verdict": "reject", "findings": []})));
    script.extend([accept(), slug_fix()]);
    let server = ScriptedServer::start(script);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    let reqs = server.requests();
    let told = messages(&reqs[7].body).last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(told.contains("at least one finding"), "{told}");
}

#[test]
fn a_test_no_fix_can_make_pass_goes_back_to_generation_and_is_regenerated() {
    let mut script: Vec<Reply> = py_script().into_iter().take(5).collect();
    // The review lets the wrong test through; the probe's fix does not make it pass, and
    // the probe concludes that no plausible fix can.
    script.extend([write_test(PY_NONE_TEST), accept(), slug_fix()]);
    script.push(Reply::tool_call(
        "propose_fix",
        json!({"test_cannot_pass": "the test asserts None, but the issue expects an empty slug"}),
    ));
    script.extend([write_test(PY_TEST), accept(), slug_fix()]);
    let server = ScriptedServer::start(script);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!(o.test_code.as_deref(), Some(PY_TEST));
    assert_eq!(o.probe, Some(Probe::Passes));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 12);
    let last = |i: usize| messages(&reqs[i].body).last().unwrap()["content"].as_str().unwrap().to_string();
    // The probe was told that the test still fails with its fix.
    assert!(last(8).contains("still fails") && last(8).contains("AssertionError"), "{}", last(8));
    // Generation was told that no plausible fix makes its test pass.
    let back = last(9);
    assert!(back.contains("No plausible fix") && back.contains("asserts None"), "{back}");
    let probes = read_json(&o.run_dir, "probe.json");
    assert_eq!(probes.as_array().unwrap().len(), 2);
    assert_eq!(probes[0]["verdict"], "fails");
    assert_eq!(probes[0]["trials"][0]["without_fix"], "failed");
    assert_eq!(probes[0]["trials"][0]["with_fix"], "failed");
    assert_eq!(probes[1]["verdict"], "passes");
    // The user's tree never saw a fix.
    assert!(!std::fs::read_to_string(repo.path().join("textkit/slug.py")).unwrap().contains("if not words"));

    // Without the model's say-so: each of the two fixes the probe may apply leaves the
    // test failing, so the probe concludes it cannot pass, and the test goes back.
    let mut script: Vec<Reply> = py_script().into_iter().take(5).collect();
    script.extend([write_test(PY_NONE_TEST), accept(), slug_fix(), slug_fix()]);
    script.extend([write_test(PY_TEST), accept(), slug_fix()]);
    let server = ScriptedServer::start(script);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!((o.status, o.probe), (Status::Reproduced, Some(Probe::Passes)), "{}", o.reason);
    assert_eq!(o.test_code.as_deref(), Some(PY_TEST));
    let probes = read_json(&o.run_dir, "probe.json");
    assert_eq!(probes[0]["verdict"], "fails");
    assert_eq!(probes[0]["trials"].as_array().unwrap().len(), 2);
    assert!(probes[0]["reason"].as_str().unwrap().contains("with each of 2 proposed fixes the test still fails"));

    // A test the probe sends back twice and that comes back the same a third time stands,
    // with the probe's verdict in the outcome.
    let mut script: Vec<Reply> = py_script().into_iter().take(5).collect();
    for _ in 0..3 {
        script.extend([
            write_test(PY_NONE_TEST),
            accept(),
            Reply::tool_call("propose_fix", json!({"test_cannot_pass": "it asserts None"})),
        ]);
    }
    let server = ScriptedServer::start(script);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!((o.status, o.probe), (Status::Reproduced, Some(Probe::Fails)), "{}", o.reason);
    assert!(o.reason.contains("attempt 3") && o.reason.contains("fix probe: fails"), "{}", o.reason);
    assert_eq!(server.remaining(), 0);

    // No fix proposed: recorded as such, the test stands.
    let mut script: Vec<Reply> = py_script().into_iter().take(7).collect();
    script.push(Reply::tool_call("propose_fix", json!({"edits": [], "rationale": "cannot tell"})));
    let server = ScriptedServer::start(script);
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!(o.probe, Some(Probe::NoFix));
    assert_eq!(read_json(&o.run_dir, "outcome.json")["probe"], "no_fix");

    // --no-probe: no probe call at all.
    let server = ScriptedServer::start(py_script().into_iter().take(7).collect());
    let opts = pipeline::Options { probe: false, ..Default::default() };
    let o = run_opts(repo.path(), "py-slug", &model_at(&server.base_url()), &opts);
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!((o.probe, server.requests().len()), (None, 7));
}

/// Stage memory: what the plan stage found by running a snippet reaches generation, and a
/// read a later stage repeats is counted (run.json, report.md) rather than noted twice.
#[test]
fn the_plans_snippet_run_reaches_generation_and_repeated_reads_are_counted() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let mut script = py_script();
    // Root cause reads the file localization read; the plan runs the issue's call.
    script.insert(3, Reply::tool_call("read_file", json!({"path": "textkit/slug.py"})));
    script.insert(
        5,
        Reply::tool_call("run_python", json!({"code": "from textkit.slug import slugify\nslugify('   ')\n"})),
    );
    let server = ScriptedServer::start(script);
    let opts = pipeline::Options { probe: false, ..Default::default() };
    let o = run_opts(repo.path(), "py-slug", &model_at(&server.base_url()), &opts);
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 9);
    // The plan stage was offered the sandbox and its run went back to it.
    assert!(tool_names(&reqs[5].body).contains(&"run_python".to_string()));
    let ran = messages(&reqs[6].body);
    let out = ran.iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap();
    assert!(out.contains("IndexError"), "{out}");
    // Generation starts from the ledger: the plan's run, with the exception it showed.
    let gen_user = messages(&reqs[7].body)[1]["content"].as_str().unwrap().to_string();
    assert!(gen_user.contains("[test_plan] `run_python`"), "{gen_user}");
    // What the run found, for a stage that writes a test: the exception, and where in
    // the repository it was raised (the sandbox's copy path made a repository path).
    assert!(
        gen_user.contains(
            "exit 1; raised IndexError: list index out of range; at textkit/slug.py:11 in slugify `first = words[0]`"
        ),
        "{gen_user}"
    );
    // The repeated read: one entry, counted once as a repeat.
    let ledger = read_json(&o.run_dir, "ledger.json");
    let entries = ledger["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{ledger}");
    assert_eq!(entries[1]["asked_again_by"], json!(["root_cause"]), "{ledger}");
    let record = read_json(&o.run_dir, "run.json");
    assert_eq!((record["ledger_entries"].as_u64(), record["repeated_reads"].as_u64()), (Some(3), Some(1)));
    let report = std::fs::read_to_string(Path::new(&o.run_dir).join("report.md")).unwrap();
    assert!(report.contains("evidence ledger: 3 entries; calls a later stage repeated: 1"), "{report}");
}

/// Stage memory: a read a later stage repeats on the same tree is answered from the
/// ledger, the tool not run again; on a changed tree it is read afresh. The lines a
/// stage's conclusion cites reach the later stages quoted.
#[test]
fn a_repeated_read_is_answered_from_the_ledger_on_the_same_tree_and_read_afresh_on_a_changed_one() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let slug = repo.path().join("textkit/slug.py");
    let read = || Reply::tool_call("read_file", json!({"path": "textkit/slug.py"}));
    let search = || Reply::tool_call("search_code", json!({"query": "slugify"}));
    let script = vec![
        read(),
        search(),
        Reply::tool_call(
            "submit_localization",
            json!({"locations": [{"file": "textkit/slug.py", "entity": "slugify", "start_line": 8, "end_line": 12,
                                  "confidence": 0.9, "rationale": "words[0] on an empty list"}]}),
        ),
        // Root cause reads and searches what localization did: the same tree, answered
        // from the ledger.
        read(),
        search(),
        // The tree changes under the run; the same read and search are then made afresh.
        read().before({
            let slug = slug.clone();
            move || {
                let mut text = std::fs::read_to_string(&slug).unwrap();
                text.push_str("# EDITED-WHILE-THE-RUN-READ-IT\n");
                std::fs::write(&slug, text).unwrap();
            }
        }),
        search(),
        cause("slugify indexes words[0] without checking for no words", "textkit/slug.py", "slugify"),
        plan("pytest", "tests/test_issue_blank_slug.py", "IndexError", Some("list index out of range")),
        write_test(PY_TEST),
        accept(),
    ];
    let server = ScriptedServer::start(script);
    let opts = pipeline::Options { probe: false, ..Default::default() };
    let o = run_opts(repo.path(), "py-slug", &model_at(&server.base_url()), &opts);
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 11);
    let last = |i: usize| messages(&reqs[i].body).last().unwrap()["content"].as_str().unwrap().to_string();
    // The repeats got localization's results as they were, said to come from the ledger.
    let from_ledger = last(4);
    assert!(
        from_ledger.contains(
            "answered from the evidence ledger (entry E1): the localization stage made this call on the same tree"
        ),
        "{from_ledger}"
    );
    assert!(from_ledger.contains("first = words[0]") && !from_ledger.contains("EDITED"), "{from_ledger}");
    let searched = last(5);
    assert!(
        searched.contains("answered from the evidence ledger (entry E2)")
            && searched.contains("textkit/slug.py:slugify"),
        "{searched}"
    );
    // After the change: a fresh read with the edit, and a fresh search (the index no
    // longer describes the tree, and its answer says so).
    let fresh = last(6);
    assert!(fresh.contains("EDITED-WHILE-THE-RUN-READ-IT") && !fresh.contains("evidence ledger"), "{fresh}");
    let fresh = last(7);
    assert!(fresh.contains("\"stale\"") && !fresh.contains("evidence ledger"), "{fresh}");
    let run = read_json(&o.run_dir, "run.json");
    let from_ledger = |tool: &str| -> Vec<bool> {
        run["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["name"] == tool)
            .map(|t| t["from_ledger"].as_bool().unwrap_or(false))
            .collect()
    };
    assert_eq!(from_ledger("read_file"), [false, true, false]);
    assert_eq!(from_ledger("search_code"), [false, true, false]);
    assert_eq!((run["repeated_reads"].as_u64(), run["answered_from_ledger"].as_u64()), (Some(2), Some(2)));
    let ledger = read_json(&o.run_dir, "ledger.json");
    let entries = ledger["entries"].as_array().unwrap();
    let stages: Vec<&str> = entries.iter().map(|e| e["stage"].as_str().unwrap()).collect();
    assert_eq!(stages, ["localization", "localization", "root_cause", "root_cause"], "{ledger}");
    assert_eq!(entries[0]["asked_again_by"], json!(["root_cause"]));
    assert_eq!(entries[0]["answered_from_ledger"], 1);
    assert_ne!(entries[0]["tree"], entries[2]["tree"], "{ledger}");
    assert_ne!(entries[1]["tree"], entries[3]["tree"], "{ledger}");
    // The lines localization flagged, quoted for root cause and every stage after.
    let user = |i: usize| messages(&reqs[i].body)[1]["content"].as_str().unwrap().to_string();
    for i in [3, 8, 9] {
        let u = user(i);
        assert!(
            u.contains("- E1 [localization] `read_file` {\"path\":\"textkit/slug.py\"} at textkit/slug.py:1-16: lines 1-16 of 16; defines `def slugify(title, max_words=8)` at 8, `def initials(name)` at 15"),
            "{u}"
        );
        assert!(u.contains("  - cited: textkit/slug.py:11: first = words[0] (localization)"), "{u}");
    }
    let report = std::fs::read_to_string(Path::new(&o.run_dir).join("report.md")).unwrap();
    assert!(report.contains("answered from the ledger without running the tool again: 2"), "{report}");
}

#[test]
fn the_budget_stops_a_run_cleanly_with_the_artifacts_so_far() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    // --max-calls 2: two retrieval calls, then the run stops before the third.
    let server = ScriptedServer::start(py_script());
    let opts = pipeline::Options { limits: Limits { max_calls: Some(2), max_cost_usd: None }, ..Default::default() };
    let o = run_opts(repo.path(), "py-slug", &model_at(&server.base_url()), &opts);
    assert_eq!(o.status, Status::Budget, "{}", o.reason);
    assert!(o.reason.contains("budget of 2 model calls") && o.reason.contains("artifacts made so far"), "{}", o.reason);
    assert_eq!(server.requests().len(), 2);
    let report = std::fs::read_to_string(Path::new(&o.run_dir).join("report.md")).unwrap();
    assert!(report.contains("**Outcome: budget**") && report.contains("model calls: 2 (limit 2)"), "{report}");
    assert_eq!(read_json(&o.run_dir, "outcome.json")["status"], "budget");
    assert_eq!(read_json(&o.run_dir, "ledger.json")["entries"].as_array().unwrap().len(), 2);

    // --max-cost: priced at $0.02 a call, $0.05 stops after the third call (localization
    // done and kept), before root cause.
    let server = ScriptedServer::start(py_script());
    let mut c = ModelConfig::new(server.base_url(), "test-model");
    c.prices.prices.insert("test-model".into(), reproagent::model::Price { input: 1000.0, output: 2000.0 });
    let opts = pipeline::Options { limits: Limits { max_calls: None, max_cost_usd: Some(0.05) }, ..Default::default() };
    let o = run_opts(repo.path(), "py-slug", &HttpModel::new(c), &opts);
    assert_eq!(o.status, Status::Budget, "{}", o.reason);
    assert!(o.reason.contains("root cause stage") && o.reason.contains("budget of $0.0500"), "{}", o.reason);
    assert_eq!(server.requests().len(), 3);
    assert!(Path::new(&o.run_dir).join("localization.json").exists());
    let report = std::fs::read_to_string(Path::new(&o.run_dir).join("report.md")).unwrap();
    assert!(report.contains("cost: $0.0600 (limit $0.05)"), "{report}");

    // --max-cost on calls that come back unpriced (a review model missing from the
    // price table, say): the run stops at the first, saying why, instead of never.
    let server = ScriptedServer::start(py_script());
    let mut c = ModelConfig::new(server.base_url(), "test-model");
    c.prices = reproagent::model::PriceTable::empty();
    let opts = pipeline::Options { limits: Limits { max_calls: None, max_cost_usd: Some(5.0) }, ..Default::default() };
    let o = run_opts(repo.path(), "py-slug", &HttpModel::new(c), &opts);
    assert_eq!(o.status, Status::Budget, "{}", o.reason);
    assert!(o.reason.contains("cannot be kept") && o.reason.contains("localization stage's call 1"), "{}", o.reason);
    assert_eq!(server.requests().len(), 1);
}

/// A reply of the JSON-in-text protocol: the tool call written in the answer's text.
fn text_call(name: &str, args: Value) -> Reply {
    Reply::text(&format!("I will call a tool.\n{}", json!({"tool": name, "arguments": args})))
}

#[test]
fn the_json_in_text_protocol_runs_end_to_end() {
    // The endpoint refuses `tools`; the run switches to tools described in the prompt.
    // The review's JSON mode is refused too and dropped; its verdict is still checked.
    let mut script = vec![Reply::status_msg(400, "tools are not supported for this model")];
    script.push(text_call("read_file", json!({"path": "textkit/slug.py"})));
    script.push(text_call(
        "submit_localization",
        json!({"locations": [{"file": "textkit/slug.py", "entity": "slugify", "start_line": 1, "end_line": 20, "confidence": 0.9, "rationale": "words[0]"}]}),
    ));
    script.push(text_call(
        "submit_root_cause",
        json!({"summary": "slugify indexes words[0] without checking for no words", "category": "boundary-handling",
               "execution_path": [{"file": "textkit/slug.py", "line": 11, "function": "slugify"}],
               "trigger_conditions": ["a blank title"], "confidence": 0.8}),
    ));
    script.push(text_call(
        "submit_test_plan",
        json!({"framework": "pytest", "test_path": "tests/test_issue_blank_slug.py", "command": "pytest", "environment": [],
               "inputs": ["'   '"], "expected": {"kind": "IndexError", "message": "list index out of range"}}),
    ));
    script.push(text_call("write_test", json!({"code": PY_TEST})));
    script.push(Reply::status_msg(400, "response_format json_object is not supported"));
    script.push(Reply::text(r#"{"verdict": "accept", "findings": []}"#));
    script.push(text_call(
        "propose_fix",
        json!({"edits": [{"path": "textkit/slug.py", "search": "    first = words[0]\n",
                          "replace": "    if not words:\n        return \"\"\n    first = words[0]\n"}],
               "rationale": "return the empty slug for a blank title"}),
    ));
    let server = ScriptedServer::start(script);
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    let o = run_on(repo.path(), "py-slug", &model_at(&server.base_url()));
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert_eq!(o.probe, Some(Probe::Passes), "{}", o.reason);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 9);
    assert!(reqs[0].body.get("tools").is_some());
    for r in &reqs[1..] {
        assert!(r.body.get("tools").is_none(), "a text-protocol request offered native tools: {}", r.body);
    }
    let system = messages(&reqs[1].body)[0]["content"].as_str().unwrap().to_string();
    assert!(
        system.contains("{\"tool\": \"NAME\", \"arguments\": {...}}") && system.contains("- `read_file`:"),
        "{system}"
    );
    // The tool's result came back as a user message.
    let m = messages(&reqs[2].body);
    let back = m.last().unwrap();
    assert_eq!(back["role"], "user");
    assert!(back["content"].as_str().unwrap().starts_with("Result of `read_file`:"), "{back}");
    assert!(back["content"].as_str().unwrap().contains("first = words[0]"));
    assert!(m.iter().all(|x| x["role"] != "tool"));
    // JSON mode: asked, refused, dropped.
    assert_eq!(reqs[6].body["response_format"], json!({"type": "json_object"}));
    assert!(reqs[7].body.get("response_format").is_none());
    let run = read_json(&o.run_dir, "run.json");
    assert_eq!(run["tool_protocol"], "text");
    let notes = run["notes"].to_string();
    assert!(notes.contains("refused native tools") && notes.contains("refused JSON mode"), "{notes}");

    // --tool-protocol text from the start, and auto detecting a tool call in the text of
    // an endpoint that ignores `tools`.
    for protocol in [ToolProtocol::Text, ToolProtocol::Auto] {
        let mut script: Vec<Reply> = reqs_script_without_faults();
        script.truncate(2);
        let server = ScriptedServer::start(script);
        let opts = pipeline::Options { tool_protocol: protocol, ..Default::default() };
        let o = run_opts(repo.path(), "py-slug", &model_at(&server.base_url()), &opts);
        assert_eq!(o.status, Status::Error, "{}", o.reason);
        let reqs = server.requests();
        assert_eq!(reqs[0].body.get("tools").is_none(), protocol == ToolProtocol::Text);
        assert!(reqs[1].body.get("tools").is_none(), "{protocol:?}");
        assert!(Path::new(&o.run_dir).join("localization.json").exists(), "{protocol:?}");
    }
}

fn reqs_script_without_faults() -> Vec<Reply> {
    vec![
        text_call("read_file", json!({"path": "textkit/slug.py"})),
        text_call(
            "submit_localization",
            json!({"locations": [{"file": "textkit/slug.py", "entity": "slugify", "start_line": 1, "end_line": 20, "confidence": 0.9, "rationale": "words[0]"}]}),
        ),
    ]
}

#[test]
fn the_user_command_drops_the_pipelines_report_plumbing() {
    assert_eq!(
        pipeline::user_command("rm -rf .reproagent-run && mkdir -p .reproagent-run && python3 -m pytest -p no:cacheprovider -q -rA --junitxml=.reproagent-run/junit.xml 'tests/t.py::test_a'"),
        "python3 -m pytest 'tests/t.py::test_a'"
    );
    assert_eq!(
        pipeline::user_command("rm -rf .reproagent-run && mkdir -p .reproagent-run && node_modules/.bin/jest --ci --json --outputFile=.reproagent-run/jest.json 'test/a.test.js'"),
        "node_modules/.bin/jest 'test/a.test.js'"
    );
}

/// The committed cassettes: one full run per language (the scripts above, recorded
/// through the scripted server), replayed offline.
const CASSETTES: [(&str, &str, &str); 3] = [
    ("py-slug", "pytest", "py-slug.jsonl"),
    ("js-chunk", "node-test", "js-chunk.jsonl"),
    ("java-percent", "junit4", "java-percent.jsonl"),
];

#[test]
fn the_committed_cassettes_replay_a_full_run_per_language_offline() {
    for (bug, framework, file) in CASSETTES {
        let repo = copy_tree(&fixture(&format!("bugs/{bug}/repo")));
        let cassette = fixture(&format!("cassettes/{file}"));
        let o = run_on(repo.path(), bug, &Replayer::open(&cassette).unwrap());
        assert_eq!(o.status, Status::Reproduced, "{bug}: {}", o.reason);
        assert_eq!(o.probe, Some(Probe::Passes), "{bug}: {}", o.reason);
        check_fails_before_passes_after(bug, &o, framework);
    }
}

/// Re-record the committed cassettes (after a change to the prompts or the requests):
/// `REPROAGENT_RECORD_CASSETTES=1 cargo test --test all pipeline::record_the_committed_cassettes -- --ignored`.
#[test]
#[ignore = "a generator, not a check: it rewrites fixtures/cassettes/, which the_committed_cassettes_replay_a_full_run_per_language_offline replays in CI"]
fn record_the_committed_cassettes() {
    if std::env::var_os("REPROAGENT_RECORD_CASSETTES").is_none() {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/cassettes");
    std::fs::create_dir_all(&dir).unwrap();
    for ((bug, _, file), script) in CASSETTES.into_iter().zip([py_script(), js_script(), java_script()]) {
        let server = ScriptedServer::start(script);
        let repo = copy_tree(&fixture(&format!("bugs/{bug}/repo")));
        let model = Recorder::create(&dir.join(file), model_at(&server.base_url())).unwrap();
        let o = run_on(repo.path(), bug, &model);
        assert_eq!(o.status, Status::Reproduced, "{bug}: {}", o.reason);
        assert_eq!(server.remaining(), 0, "{bug}");
    }
}

#[test]
fn the_cli_takes_the_review_probe_budget_and_protocol_flags() {
    let repo = copy_tree(&fixture("bugs/py-slug/repo"));
    index_with(repo.path(), 2, false);
    let issue = fixture("bugs/py-slug/issue.md");
    let issue = issue.to_str().unwrap();
    let server = ScriptedServer::start(py_script());
    let base = server.base_url();
    let run = |extra: &[&str]| {
        let mut args =
            vec!["reproduce", "--issue", issue, "--model", "test-model", "--base-url", &base, "--sandbox", "local"];
        args.extend_from_slice(extra);
        cli(repo.path(), &args)
    };
    // The budget: exit 3, outcome `budget`, said on stdout.
    let o = run(&["--max-calls", "2", "--tool-protocol", "text", "--review-model", "reviewer", "--no-probe"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.starts_with("budget: ") && stdout.contains("budget of 2 model calls"), "{stdout}");
    // --tool-protocol text: no native tools were offered.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.body.get("tools").is_none()));
    // Bad values: one line with what is wrong.
    let o = run(&["--max-cost", "a lot"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not an amount of US dollars above 0"));
    let o = run(&["--tool-protocol", "smoke"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("possible values: auto, native, text"));
    // A cost limit on a model without a price is refused before the first call.
    let o = run(&["--max-cost", "1"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("model 'test-model' has no known price") && stderr.contains("[prices]"), "{stderr}");
    assert_eq!(server.requests().len(), 2);

    // The review's model from reproagent.toml; the outcome says what the probe found.
    std::fs::write(repo.path().join("reproagent.toml"), "[model]\nreview_model = \"cfg-reviewer\"\n").unwrap();
    let server = ScriptedServer::start(py_script());
    let base = server.base_url();
    let o = cli(
        repo.path(),
        &["reproduce", "--issue", issue, "--model", "test-model", "--base-url", &base, "--sandbox", "local"],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("fix probe: passes"), "{stdout}");
    let models: Vec<String> = server.requests().iter().map(|r| r.body["model"].as_str().unwrap().to_string()).collect();
    assert_eq!(models[6], "cfg-reviewer");
    assert!(models.iter().filter(|m| *m == "cfg-reviewer").count() == 1, "{models:?}");
}
