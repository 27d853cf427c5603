//! The bench harness end to end: the fixture suite scored by the sanity adapters, the
//! key-free mode, the model pipeline and the zero-shot baseline against a scripted model
//! on 127.0.0.1 (recorded, then replayed offline), external commands, and broken cases
//! counted apart. Tests run in the real local sandbox, one test in Docker.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use reproagent::bench::adapter::{self, Adapter};
use reproagent::bench::run::{self, BenchOptions, ModelSource};
use reproagent::bench::score::Scorer;
use reproagent::bench::{summarize, BenchRecord, CaseResult, CaseStatus};
use reproagent::model::{ChatModel, HttpModel, ModelConfig};
use reproagent::sandbox::Choice;
use serde_json::json;

use crate::common::*;
use crate::support::scripted_server::{Reply, ScriptedServer};

fn suite() -> PathBuf {
    fixture("bench")
}

fn options(suite: &Path, out: &Path, sandbox: Choice) -> BenchOptions {
    BenchOptions {
        suite: suite.to_path_buf(),
        out: out.to_path_buf(),
        jobs: 2,
        scorer: Scorer {
            sandbox,
            image: Some("reproagent-test:bookworm".into()),
            timeout_secs: 120,
            env: Default::default(),
        },
        verify: false,
        only: Vec::new(),
        model: ModelSource::None,
    }
}

fn bench(adapter: &dyn Adapter, opts: &BenchOptions) -> BenchRecord {
    run::run(adapter, opts, &|_: &CaseResult| {}).unwrap()
}

fn case<'a>(r: &'a BenchRecord, id: &str) -> &'a CaseResult {
    r.cases.iter().find(|c| c.case_id == id).unwrap_or_else(|| panic!("no case {id}"))
}

#[test]
fn the_suite_has_a_dozen_cases_in_three_languages() {
    let cases = reproagent::bench::case::load_suite(&suite()).unwrap();
    assert!(cases.len() >= 12, "{} cases", cases.len());
    let mut langs: Vec<String> = cases.iter().map(|(_, c)| c.as_ref().unwrap().language.clone()).collect();
    langs.sort();
    langs.dedup();
    assert_eq!(langs, vec!["java", "python", "typescript"]);
    for (dir, c) in &cases {
        let c = c.as_ref().unwrap();
        assert!(c.gold_patch.is_some() && c.gold_test_patch.is_some(), "{}", dir.display());
        c.check().unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
}

/// The gold test scores exactly 100% and a test that always passes exactly 0%: the
/// harness verifies its own suite.
#[test]
fn sanity_adapters_score_exactly_100_and_0_percent() {
    let out = tempfile::tempdir().unwrap();
    let gold = bench(&adapter::Gold, &options(&suite(), &out.path().join("gold"), Choice::Local));
    let s = summarize(&gold);
    assert_eq!(
        s.total.invalid + s.total.adapter_errors,
        0,
        "{:#?}",
        gold.cases.iter().filter(|c| c.status != CaseStatus::Scored).collect::<Vec<_>>()
    );
    assert_eq!((s.total.fail_to_pass, s.total.judged()), (gold.cases.len(), gold.cases.len()));
    for (lang, t) in &s.per_language {
        assert_eq!(t.fail_to_pass, t.judged(), "{lang}");
        assert!(t.judged() >= 4, "{lang}: {} cases", t.judged());
    }
    let c = case(&gold, "py-duration-ms");
    assert_eq!(c.before.as_ref().unwrap().status, "failed");
    assert_eq!(c.after.as_ref().unwrap().status, "passed");
    assert_eq!(c.test_files, vec!["tests/test_duration.py".to_string()]);
    // The record is enough to recompute the summary.
    let back = run::load_record(&out.path().join("gold")).unwrap();
    assert_eq!(summarize(&back), s);
    assert!(out.path().join("gold/cases/py-duration-ms/before.json").exists());

    let mut o = options(&suite(), &out.path().join("empty"), Choice::Local);
    o.verify = true;
    let empty = bench(&adapter::Empty, &o);
    let s = summarize(&empty);
    assert_eq!(s.total.invalid + s.total.adapter_errors, 0, "{:#?}", empty.cases);
    assert_eq!(s.total.judged(), empty.cases.len());
    assert_eq!((s.total.fail_to_pass, s.total.fail_before), (0, 0));
    assert!(empty.cases.iter().all(|c| c.after.as_ref().is_some_and(|a| a.status == "passed")));
}

/// The same scoring in the Docker sandbox, one case per language.
#[test]
fn gold_scores_in_docker_too() {
    // `sandbox clean` (another test) removes every sandbox container: not while we run.
    let _engine = crate::sandbox::ENGINE.blocking_read();
    let out = tempfile::tempdir().unwrap();
    let mut o = options(&suite(), out.path(), Choice::Docker);
    o.only = vec!["py-money-split".into(), "js-camel-case".into(), "java-wrap-exact-width".into()];
    let r = bench(&adapter::Gold, &o);
    assert_eq!(r.cases.len(), 3);
    for c in &r.cases {
        assert!(c.fail_to_pass, "{}: {:?} {:?} {:?}", c.case_id, c.reason, c.before, c.after);
    }
    assert!(r.sandbox.starts_with("docker"), "{}", r.sandbox);
}

/// The key-free mode reproduces the cases whose issue carries code and a traceback, and
/// writes no test for those that only describe the symptom.
#[test]
fn keyfree_adapter_is_scored_per_case() {
    let out = tempfile::tempdir().unwrap();
    let mut o = options(&suite(), out.path(), Choice::Local);
    o.only = vec![
        "py-config-bool-default".into(),
        "py-median-even".into(),
        "js-query-flag".into(),
        "java-csv-blank-line".into(),
    ];
    let r = bench(&adapter::KeyFree, &o);
    for id in ["py-config-bool-default", "js-query-flag", "java-csv-blank-line"] {
        let c = case(&r, id);
        assert!(c.fail_to_pass, "{id}: {:?} {:?} {:?}", c.reason, c.before, c.after);
        assert_eq!(c.claimed.as_deref(), Some("reproduced"));
        assert_eq!(c.matches_issue, Some(true), "{id}: {:?}", c.before);
    }
    let words = case(&r, "py-median-even");
    assert_eq!(words.status, CaseStatus::Scored);
    assert!(!words.fail_to_pass && words.test_patch.is_none());
    assert!(words.reason.as_deref().unwrap().contains("no test"), "{:?}", words.reason);
    assert!(out.path().join("cases/py-config-bool-default/reproduce/outcome.json").exists());
}

fn model_at(base_url: &str) -> Arc<dyn ChatModel> {
    let mut c = ModelConfig::new(base_url, "test-model");
    c.max_retries = 1;
    c.backoff_base = Duration::from_millis(5);
    c.timeout = Duration::from_secs(20);
    Arc::new(HttpModel::new(c))
}

const MEDIAN_TEST: &str = "from numkit.stats import median\n\n\ndef test_even_count_is_the_mean_of_the_middle_pair():\n    assert median([1, 2, 3, 4]) == 2.5\n";

/// The scripted model's run on py-median-even: a search, the three analysis artifacts,
/// the test, the review's acceptance and the probe's fix (7 calls).
fn median_script() -> Vec<Reply> {
    vec![
        Reply::tool_call("search_code", json!({"query": "median"})),
        Reply::tool_call(
            "submit_localization",
            json!({"locations": [{"file": "numkit/stats.py", "entity": "median", "start_line": 1, "end_line": 20, "confidence": 0.9, "rationale": "picks one middle value"}]}),
        )
        .usage(1000, 100),
        Reply::tool_call(
            "submit_root_cause",
            json!({"summary": "median takes the upper middle value for an even count", "category": "wrong-result",
                   "execution_path": [{"file": "numkit/stats.py", "line": 10, "function": "median"}],
                   "trigger_conditions": ["an even number of values"], "confidence": 0.8}),
        ),
        Reply::tool_call(
            "submit_test_plan",
            json!({"framework": "pytest", "test_path": "tests/test_issue_median.py", "command": "pytest", "environment": [],
                   "inputs": ["[1, 2, 3, 4]"], "expected": {"kind": "AssertionError", "message": null}}),
        ),
        Reply::tool_call("write_test", json!({"code": MEDIAN_TEST})),
        Reply::tool_call("submit_review", json!({"verdict": "accept", "findings": []})),
        // The fix probe: the mean of the middle pair for an even count.
        Reply::tool_call(
            "propose_fix",
            json!({"edits": [{"path": "numkit/stats.py", "search": "    return ordered[mid]\n",
                              "replace": "    if len(ordered) % 2 == 1:\n        return ordered[mid]\n    return (ordered[mid - 1] + ordered[mid]) / 2\n"}],
                   "rationale": "average the middle pair"}),
        ),
    ]
}

/// The four-stage pipeline against a scripted model, scored end to end; then the same
/// run replayed from its cassette with no server at all.
#[test]
fn pipeline_adapter_is_scored_end_to_end_and_replays_offline() {
    let server = ScriptedServer::start(median_script());
    let out = tempfile::tempdir().unwrap();
    let mut o = options(&suite(), &out.path().join("live"), Choice::Local);
    o.only = vec!["py-median-even".into()];
    o.model = ModelSource::Live(model_at(&server.base_url()));
    let live_model = o.model.clone();
    let ModelSource::Live(m) = &live_model else { unreachable!() };
    let pipeline = adapter::Pipeline { model: m.describe(), options: Default::default() };
    let r = bench(&pipeline, &o);
    let c = case(&r, "py-median-even");
    assert_eq!(c.status, CaseStatus::Scored, "{:?}", c.reason);
    assert!(c.fail_to_pass, "{:?} {:?}", c.before, c.after);
    assert_eq!(c.claimed.as_deref(), Some("reproduced"));
    assert_eq!(c.model_calls, 7);
    // The probe's verdict is recorded per case, and the report says it agreed with the
    // gold fail-to-pass.
    assert_eq!(c.probe.as_deref(), Some("passes"));
    assert!(out.path().join("live/cases/py-median-even/reproduce/probe.patch").exists());
    let md = reproagent::bench::report::markdown(std::slice::from_ref(&r));
    assert!(md.contains("## Fix probe against the gold fail-to-pass") && md.contains("| 1/1 (100%) |"), "{md}");
    assert!(c.prompt_tokens >= 1000);
    assert_eq!(c.test_files, vec!["tests/test_issue_median.py".to_string()]);
    assert!(c.test_patch.as_deref().unwrap().contains("+++ b/tests/test_issue_median.py"));
    assert_eq!(r.adapter.name, "pipeline");
    assert_eq!(r.adapter.model.as_deref(), Some("test-model"));
    assert!(out.path().join("live/cases/py-median-even/cassette.jsonl").exists());
    assert!(out.path().join("live/cases/py-median-even/reproduce/generation.json").exists());
    assert_eq!(server.remaining(), 0);
    drop(server);

    // Offline: the cassette answers, the server is gone.
    let mut o2 = options(&suite(), &out.path().join("replay"), Choice::Local);
    o2.only = vec!["py-median-even".into()];
    o2.model = ModelSource::Replay(out.path().join("live"));
    let r2 = bench(&pipeline, &o2);
    let c2 = case(&r2, "py-median-even");
    assert!(c2.fail_to_pass, "{:?}", c2.reason);
    assert_eq!((c2.model_calls, &c2.test_patch), (7, &c.test_patch));
    assert_eq!(c2.probe.as_deref(), Some("passes"));
}

/// The zero-shot baseline: one call, with the code BM25 ranks highest for the issue.
#[test]
fn zero_shot_adapter_makes_one_call_with_bm25_context() {
    let answer = format!("PATH: tests/test_issue_median.py\n\n```python\n{MEDIAN_TEST}```\n");
    let server = ScriptedServer::start(vec![Reply::text(&answer).usage(2000, 80)]);
    let out = tempfile::tempdir().unwrap();
    let mut o = options(&suite(), out.path(), Choice::Local);
    o.only = vec!["py-median-even".into()];
    let m = model_at(&server.base_url());
    let zs = adapter::ZeroShot { model: m.describe(), hits: 5 };
    o.model = ModelSource::Live(m);
    let r = bench(&zs, &o);
    let c = case(&r, "py-median-even");
    assert!(c.fail_to_pass, "{:?} {:?}", c.reason, c.before);
    assert_eq!(c.model_calls, 1);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let body = reqs[0].body.to_string();
    assert!(body.contains("def median"), "the context holds the function the issue is about");
    assert!(body.contains("upper middle value"), "the issue is in the prompt");
    assert!(body.contains("tests/test_stats.py"), "an existing test is given as the example");
}

/// An external program: one that writes the test into the checkout, one that prints a
/// diff, one that fails, one that hangs.
#[test]
fn external_command_adapter_reads_the_case_and_writes_a_test() {
    let out = tempfile::tempdir().unwrap();
    let mut o = options(&suite(), &out.path().join("writes"), Choice::Local);
    o.only = vec!["py-money-split".into(), "js-camel-case".into()];
    let writes = adapter::External {
        command: r#"git apply -p1 "$(dirname "$REPROAGENT_CASE")/test.patch" && test -f "$REPROAGENT_ISSUE" && test -d "$REPROAGENT_OUT""#.into(),
        timeout: Duration::from_secs(60),
    };
    let r = bench(&writes, &o);
    assert!(r.cases.iter().all(|c| c.fail_to_pass), "{:#?}", r.cases);
    assert_eq!(r.adapter.command.as_deref(), Some(writes.command.as_str()));

    o.out = out.path().join("prints");
    let prints = adapter::External {
        command: r#"cat "$(dirname "$REPROAGENT_CASE")/test.patch""#.into(),
        timeout: Duration::from_secs(60),
    };
    let r = bench(&prints, &o);
    assert!(r.cases.iter().all(|c| c.fail_to_pass), "{:#?}", r.cases);

    o.out = out.path().join("fails");
    o.only = vec!["py-money-split".into()];
    let fails = adapter::External { command: "echo no idea >&2; exit 3".into(), timeout: Duration::from_secs(60) };
    let c = bench(&fails, &o).cases.remove(0);
    assert_eq!(c.status, CaseStatus::AdapterError);
    assert!(
        c.reason.as_deref().unwrap().contains("exited with 3") && c.reason.as_deref().unwrap().contains("no idea"),
        "{:?}",
        c.reason
    );

    o.out = out.path().join("hangs");
    let hangs = adapter::External { command: "sleep 30".into(), timeout: Duration::from_secs(1) };
    let started = std::time::Instant::now();
    let c = bench(&hangs, &o).cases.remove(0);
    assert_eq!(c.status, CaseStatus::AdapterError);
    assert!(c.reason.as_deref().unwrap().contains("timeout"), "{:?}", c.reason);
    assert!(started.elapsed() < Duration::from_secs(20));
}

fn write_case(dir: &Path, from: &str, edit: impl FnOnce(&Path, &mut serde_json::Value)) {
    copy_into(&fixture(&format!("bench/{from}")), &std::fs::create_dir_all(dir).map(|_| dir.to_path_buf()).unwrap());
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("case.json")).unwrap()).unwrap();
    edit(dir, &mut v);
    std::fs::write(dir.join("case.json"), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// Broken cases are reported with their reason and counted apart, never as a failure
/// of the reproducer.
#[test]
fn broken_cases_are_counted_apart_with_their_reason() {
    let s = tempfile::tempdir().unwrap();
    let root = s.path();
    write_case(&root.join("good"), "py-money-split", |_, v| v["id"] = json!("good"));
    write_case(&root.join("bad-patch"), "py-median-even", |d, v| {
        v["id"] = json!("bad-patch");
        let p = std::fs::read_to_string(d.join("gold.patch")).unwrap().replace("-", "~");
        std::fs::write(d.join("gold.patch"), p).unwrap();
    });
    write_case(&root.join("no-repo"), "py-median-even", |_, v| {
        v["id"] = json!("no-repo");
        v["repo"] = json!("missing-dir");
    });
    write_case(&root.join("cannot-run"), "py-median-even", |d, v| {
        v["id"] = json!("cannot-run");
        std::fs::write(d.join("repo/conftest.py"), "raise RuntimeError('the environment is broken')\n").unwrap();
    });
    write_case(&root.join("bad-json"), "py-median-even", |_, v| {
        v["language"] = json!("cobol");
    });
    let out = tempfile::tempdir().unwrap();
    let mut o = options(root, out.path(), Choice::Local);
    o.verify = true;
    let r = bench(&adapter::KeyFree, &o);
    assert_eq!(r.cases.len(), 5);
    let reason = |id: &str| case(&r, id).reason.clone().unwrap_or_default();
    assert_eq!(case(&r, "good").status, CaseStatus::Scored);
    for (id, want) in [
        ("bad-patch", "gold_patch does not apply"),
        ("no-repo", "does not exist"),
        ("cannot-run", "errored before and after the gold patch"),
        ("bad-json", "`language`"),
    ] {
        assert_eq!(case(&r, id).status, CaseStatus::Invalid, "{id}: {}", reason(id));
        assert!(reason(id).contains(want), "{id}: {}", reason(id));
    }
    let t = summarize(&r).total;
    assert_eq!((t.invalid, t.judged()), (4, 1));
}

/// A case whose GOLD test cannot run at all (it errors before and after the gold patch:
/// here a dependency that is not installed) is invalid, with the file, the kind of error
/// and its first lines: for the gold adapter with and without verification, so the gold
/// adapter scores 100% of the judged cases. A gold test that errors before the fix only
/// (it imports what the fix adds) is a sound fail-to-pass case. Another reproducer's test
/// that errors both ways is that reproducer's failure, not an invalid case.
#[test]
fn a_gold_test_that_cannot_run_makes_the_case_invalid() {
    let s = tempfile::tempdir().unwrap();
    let root = s.path();
    let missing = "import numkit_plugins_not_installed\n\n\ndef test_plugin():\n    assert numkit_plugins_not_installed.VERSION\n";
    write_case(&root.join("missing-dep"), "py-median-even", |d, v| {
        v["id"] = json!("missing-dep");
        let p = reproagent::bench::case::diff_for_files(
            &d.join("repo"),
            &[("tests/test_plugin.py".into(), missing.into())],
        );
        std::fs::write(d.join("test.patch"), p).unwrap();
    });
    // The fix adds numkit/extra.py; its test imports it, so it cannot even load before.
    write_case(&root.join("new-api"), "py-median-even", |d, v| {
        v["id"] = json!("new-api");
        let repo = d.join("repo");
        let add = reproagent::bench::case::diff_for_files(
            &repo,
            &[("numkit/extra.py".into(), "def twice(x):\n    return 2 * x\n".into())],
        );
        let gold = std::fs::read_to_string(d.join("gold.patch")).unwrap();
        std::fs::write(d.join("gold.patch"), format!("{gold}{add}")).unwrap();
        let test = "from numkit.extra import twice\n\n\ndef test_twice():\n    assert twice(2) == 4\n";
        std::fs::write(
            d.join("test.patch"),
            reproagent::bench::case::diff_for_files(&repo, &[("tests/test_extra.py".into(), test.into())]),
        )
        .unwrap();
    });
    let out = tempfile::tempdir().unwrap();
    for verify in [false, true] {
        let mut o = options(root, &out.path().join(format!("gold-{verify}")), Choice::Local);
        o.verify = verify;
        let r = bench(&adapter::Gold, &o);
        let bad = case(&r, "missing-dep");
        let why = bad.reason.clone().unwrap_or_default();
        eprintln!("verify={verify}: {why}");
        assert_eq!(bad.status, CaseStatus::Invalid, "verify={verify}: {why}");
        for want in [
            "the gold test cannot run",
            "tests/test_plugin.py errored before and after the gold patch",
            "(missing dependency)",
            "No module named 'numkit_plugins_not_installed'",
        ] {
            assert!(why.contains(want), "verify={verify}: {want:?} not in {why}");
        }
        assert_eq!(bad.before.as_ref().unwrap().status, "errored");
        let good = case(&r, "new-api");
        assert_eq!(good.status, CaseStatus::Scored, "verify={verify}: {:?}", good.reason);
        assert!(good.fail_to_pass, "verify={verify}: {:?} {:?}", good.before, good.after);
        assert_eq!(good.before.as_ref().unwrap().status, "errored");
        let t = summarize(&r).total;
        assert_eq!((t.invalid, t.judged(), t.fail_to_pass), (1, 1, 1), "verify={verify}");
    }

    // Verifying before another adapter: the same verdicts.
    let mut o = options(root, &out.path().join("empty"), Choice::Local);
    o.verify = true;
    let r = bench(&adapter::Empty, &o);
    assert_eq!(case(&r, "missing-dep").status, CaseStatus::Invalid);
    assert_eq!(case(&r, "new-api").status, CaseStatus::Scored, "{:?}", case(&r, "new-api").reason);

    // --no-verify, and a reproducer whose own test errors both ways: its failure.
    let mut o = options(root, &out.path().join("broken-candidate"), Choice::Local);
    o.only = vec!["new-api".into()];
    let writes = adapter::External {
        command: format!("mkdir -p tests && printf '%s' '{missing}' > tests/test_mine.py"),
        timeout: Duration::from_secs(60),
    };
    let c = bench(&writes, &o).cases.remove(0);
    assert_eq!(c.status, CaseStatus::Scored, "{:?}", c.reason);
    assert!(!c.fail_to_pass);
    let why = c.reason.unwrap_or_default();
    eprintln!("candidate: {why}");
    assert!(
        why.contains(
            "the test cannot run: tests/test_mine.py errored before and after the gold patch (missing dependency)"
        ),
        "{why}"
    );
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reproagent")).args(args).output().unwrap()
}

#[test]
fn cli_runs_validates_and_reports() {
    let out = tempfile::tempdir().unwrap();
    let run_dir = out.path().join("run");
    let suite = suite();
    let o = cli(&[
        "bench",
        "run",
        "--adapter",
        "gold",
        "--suite",
        suite.to_str().unwrap(),
        "--sandbox",
        "local",
        "--case",
        "py-path-dotdot",
        "--case",
        "js-lru-get-recency",
        "--out",
        run_dir.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["summary"]["total"]["fail_to_pass"], 2);

    let o = cli(&["bench", "validate", suite.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));

    let rep = out.path().join("report");
    let o = cli(&["bench", "report", run_dir.to_str().unwrap(), "--out", rep.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(rep.join("report.md")).unwrap().contains("gold"));
    // The page is well-formed and holds its three charts (no browser needed).
    let html = std::fs::read_to_string(rep.join("report.html")).unwrap();
    let opts = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(&html, opts).unwrap();
    for id in ["chart-adapter", "chart-language", "chart-cost"] {
        let svg = doc.descendants().find(|n| n.tag_name().name() == "svg" && n.attribute("id") == Some(id));
        let svg = svg.unwrap_or_else(|| panic!("no svg #{id}"));
        assert!(svg.descendants().any(|n| matches!(n.tag_name().name(), "rect" | "circle")), "{id} draws nothing");
    }

    // Bad input: one line, with a hint.
    let o = cli(&["bench", "run", "--adapter", "pipeline", "--suite", suite.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("needs a model") && err.contains("hint:"), "{err}");
    let o = cli(&["bench", "run", "--adapter", "gold", "--suite", "/nonexistent/suite"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("does not exist"), "{err}");
    let o = cli(&["bench", "report", "/nonexistent/run"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).lines().count() == 1);
}

/// `bench run --adapter pipeline` through the CLI takes the pipeline's flags (review
/// model, budget, no probe) and records each case's probe verdict; `bench report` on the
/// run shows how often the probe agreed with the gold fail-to-pass.
#[test]
fn cli_bench_runs_the_pipeline_with_its_flags_and_reports_the_probe_against_the_gold() {
    let out = tempfile::tempdir().unwrap();
    let suite = suite();
    let run = |server: &ScriptedServer, dir: &Path, extra: &[&str]| {
        let base = server.base_url();
        let mut args = vec![
            "bench",
            "run",
            "--adapter",
            "pipeline",
            "--model",
            "test-model",
            "--base-url",
            &base,
            "--suite",
            suite.to_str().unwrap(),
            "--sandbox",
            "local",
            "--case",
            "py-median-even",
            "--no-verify",
            "--out",
            dir.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        cli(&args)
    };
    let server = ScriptedServer::start(median_script());
    let live = out.path().join("live");
    let o = run(&server, &live, &["--review-model", "reviewer", "--max-calls", "7"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let models: Vec<String> = server.requests().iter().map(|r| r.body["model"].as_str().unwrap().to_string()).collect();
    assert_eq!(models.len(), 7);
    assert_eq!(models[5], "reviewer", "{models:?}");
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(live.join("run.json")).unwrap()).unwrap();
    let case = &record["cases"][0];
    assert_eq!((case["probe"].as_str(), case["fail_to_pass"].as_bool()), (Some("passes"), Some(true)), "{case}");
    let rep = out.path().join("report");
    let o = cli(&["bench", "report", live.to_str().unwrap(), "--out", rep.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(md.contains("## Fix probe against the gold fail-to-pass") && md.contains("| 1/1 (100%) |"), "{md}");

    // The per-case budget stops the case cleanly; --no-probe makes no probe call.
    let server = ScriptedServer::start(median_script());
    let spent = out.path().join("spent");
    let o = run(&server, &spent, &["--max-calls", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(server.requests().len(), 2);
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(spent.join("run.json")).unwrap()).unwrap();
    assert_eq!(record["cases"][0]["claimed"], "budget", "{}", record["cases"][0]);
    let server = ScriptedServer::start(median_script().into_iter().take(6).collect());
    let o = run(&server, &out.path().join("unprobed"), &["--no-probe"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!((server.requests().len(), server.remaining()), (6, 0));

    // The pipeline's flags on another adapter: refused, with a hint.
    let o = cli(&["bench", "run", "--adapter", "gold", "--suite", suite.to_str().unwrap(), "--no-probe"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("takes none of the pipeline's flags"), "{err}");
}

/// Ctrl-C while a case's repository (a tar archive) is being unpacked: the handler waits
/// for the unpack, then deletes the case's tree and the staging dir beside it. Before,
/// the staging dir was not registered and stayed in the temp dir.
#[test]
fn an_interrupt_while_a_case_unpacks_leaves_nothing_in_the_temp_dir() {
    let cases = tempfile::tempdir().unwrap();
    let case = cases.path().join("big");
    write_case(&case, "py-median-even", |d, v| {
        v["id"] = json!("big");
        v["repo"] = json!("repo.tar");
        // The fixture's repository and 10,000 small files: an unpack that takes a while.
        let mut tar = tar::Builder::new(std::fs::File::create(d.join("repo.tar")).unwrap());
        tar.append_dir_all("repo", d.join("repo")).unwrap();
        for i in 0..10_000 {
            let body = format!("X = {i}\n");
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, format!("repo/data/d{}/m{i}.py", i % 100), body.as_bytes()).unwrap();
        }
        tar.finish().unwrap();
    });
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_reproagent"))
        .args(["bench", "localize"])
        .arg(cases.path())
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let entries = || -> Vec<String> {
        std::fs::read_dir(tmp.path())
            .map(|r| r.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    // The staging dir: the one entry beside the case's tree (`reproagent-loc-*`).
    let started = std::time::Instant::now();
    while !entries().iter().any(|n| !n.starts_with("reproagent-loc-")) {
        assert!(started.elapsed() < Duration::from_secs(60), "no staging dir appeared: {:?}", entries());
        assert!(child.try_wait().unwrap().is_none(), "the bench ended before the unpack was seen");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(entries(), Vec::<String>::new(), "left in the temp dir after the interrupt");
}
