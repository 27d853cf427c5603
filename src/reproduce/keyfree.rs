//! The key-free mode (`--model none`): the deterministic localizer, then a test built
//! from what the issue carries, checked in the sandbox. The test must fail with the
//! exception type the issue reports (and its message, when the issue gives one);
//! otherwise the outcome is `not reproduced`, with the reason.

use std::path::Path;

use super::synth::{self, Snippet};
use super::*;
use crate::lang::Lang;
use crate::localize::{self, IssueFacts};
use crate::sandbox;
use crate::sandbox::runners::{TestResult, TestStatus};
use crate::sandbox::tools::{run_test, RunTestArgs};
use crate::search::SearchIndex;
use crate::store;

pub use super::Request;

/// Exception types name the same thing with or without their module.
fn short(kind: &str) -> &str {
    kind.rsplit(['.', '$']).next().unwrap_or(kind)
}

fn norm(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace() && !matches!(c, '\'' | '"' | '`')).collect::<String>().to_lowercase()
}

/// Does a failure match the expected exception (and message)?
pub fn matches(expected: &Expected, kind: Option<&str>, message: &str) -> bool {
    let Some(kind) = kind else { return false };
    if short(kind) != short(&expected.kind) {
        return false;
    }
    match &expected.message {
        Some(m) if !m.trim().is_empty() => {
            let (a, b) = (norm(message), norm(m));
            a.contains(&b) || b.contains(&a) && !a.is_empty()
        }
        _ => true,
    }
}

/// The exception types a failure of the test's set-up (not its logic) raises.
const SETUP_ERRORS: &[&str] =
    &["SyntaxError", "IndentationError", "ImportError", "ModuleNotFoundError", "NameError", "ReferenceError"];

/// The triple review of one run: (aligned, logic, symptom), each with its finding. In
/// the key-free mode the test is the issue's own code, so it is aligned by construction;
/// the other two checks read the runner's structured result.
pub fn review(result: &TestResult, expected: &Expected) -> Vec<Review> {
    let mut out = vec![Review { check: "aligned".into(), passed: true, finding: None }];
    let first = result.failures.first();
    let logic = match result.status {
        TestStatus::Passed => Some(Finding {
            kind: "passes-today".into(),
            component: "issue".into(),
            description: "the issue's code runs without the reported error today: it may be fixed already, or need something the issue does not show".into(),
            evidence: format!("{} passed, {} failed", result.passed, result.failed),
        }),
        TestStatus::Errored => Some(Finding {
            kind: "setup-error".into(),
            component: "environment".into(),
            description: "the test could not run as a test (collection, import or compile error, or a timeout)".into(),
            evidence: result.error.clone().unwrap_or_default(),
        }),
        TestStatus::Failed => match first {
            Some(f) if f.kind.as_deref().is_some_and(|k| SETUP_ERRORS.contains(&short(k))) && !SETUP_ERRORS.contains(&short(&expected.kind)) => {
                Some(Finding {
                    kind: "setup-error".into(),
                    component: "test".into(),
                    description: "the failure comes from the test's set-up, not from the behaviour the issue reports".into(),
                    evidence: format!("{}: {}", f.kind.as_deref().unwrap_or(""), f.message),
                })
            }
            _ => None,
        },
    };
    out.push(Review { check: "logic".into(), passed: logic.is_none(), finding: logic });
    let symptom = match (result.status, first) {
        (TestStatus::Failed, Some(f)) if matches(expected, f.kind.as_deref(), &f.message) => None,
        (TestStatus::Failed, Some(f)) => Some(Finding {
            kind: "wrong-failure".into(),
            component: "test".into(),
            description: format!(
                "the test fails with {} but the issue reports {}{}",
                f.kind.as_deref().unwrap_or("an unknown error"),
                expected.kind,
                expected.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            ),
            evidence: format!("{}: {}", f.kind.as_deref().unwrap_or(""), f.message),
        }),
        _ => Some(Finding {
            kind: "no-failure".into(),
            component: "test".into(),
            description: format!("the issue reports {}, the test shows no failure", expected.kind),
            evidence: format!("status {:?}", result.status),
        }),
    };
    out.push(Review { check: "symptom".into(), passed: symptom.is_none(), finding: symptom });
    out
}

fn not_reproduced(run: &RunDir, reason: impl Into<String>) -> Outcome {
    Outcome::of(run, Status::NotReproduced, reason)
}

fn repo_langs(root: &Path) -> Vec<Lang> {
    let (files, _) = crate::index::walk(root, false);
    let mut out: Vec<Lang> = Vec::new();
    for f in files {
        if !out.contains(&f.lang) {
            out.push(f.lang);
        }
    }
    out
}

/// The expected failure: the last exception the issue shows; else, for a snippet with
/// its own `assert`, an assertion error.
fn expected_failure(facts: &IssueFacts, snippet: &Snippet) -> Option<Expected> {
    if let Some(e) = facts.exceptions.last() {
        return Some(Expected { kind: e.kind.clone(), message: (!e.message.is_empty()).then(|| e.message.clone()) });
    }
    let asserts = snippet.code.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with("assert ")
            || t.starts_with("assert.")
            || t.contains("assertEquals(")
            || t.starts_with("self.assert")
    });
    asserts.then(|| Expected {
        kind: match snippet.lang {
            Lang::Java => "java.lang.AssertionError".into(),
            _ => "AssertionError".into(),
        },
        message: None,
    })
}

/// The test stage 3 builds, with what it must fail with and what it was built from.
struct Built {
    test: synth::TestFile,
    expected: Expected,
    inputs: Vec<String>,
    lang: Lang,
}

/// The line the probe prints before the modules it found.
const PROBE_MARK: &str = "reproagent-modules:";

/// Which of `candidates` (a free name and the attributes the snippet reads from it)
/// import in the sandbox's Python and have every one of those attributes or submodules.
/// Run where the test runs, so it is the environment's answer (a virtualenv, a Docker
/// image), not the host's. A probe that fails finds nothing.
async fn probe_modules(sb: &dyn sandbox::Sandbox, candidates: &[(String, Vec<String>)]) -> Vec<String> {
    let script = format!(
        "import importlib, importlib.util, sys\nfound = []\nfor arg in sys.argv[1:]:\n    name, _, attrs = arg.partition(':')\n    try:\n        if importlib.util.find_spec(name) is None:\n            continue\n        m = importlib.import_module(name)\n    except BaseException:\n        continue\n    def has(a):\n        if hasattr(m, a):\n            return True\n        try:\n            return importlib.util.find_spec(name + '.' + a) is not None\n        except BaseException:\n            return False\n    if all(has(a) for a in attrs.split(',') if a):\n        found.append(name)\nprint()\nprint('{PROBE_MARK}', ' '.join(found))\n"
    );
    let mut argv = vec!["python3".to_string(), "-c".to_string(), script];
    argv.extend(candidates.iter().map(|(n, attrs)| format!("{n}:{}", attrs.join(","))));
    let req =
        sandbox::ExecRequest::new(argv).timeout(std::time::Duration::from_secs(60)).env("PYTHONDONTWRITEBYTECODE", "1");
    let Ok(out) = sb.exec(&req).await else { return Vec::new() };
    let Some(line) = out.stdout.lines().rev().find_map(|l| l.strip_prefix(PROBE_MARK)) else { return Vec::new() };
    let asked: Vec<&str> = candidates.iter().map(|(n, _)| n.as_str()).collect();
    line.split_whitespace().filter(|n| asked.contains(n)).map(str::to_string).collect()
}

/// A tool call's arguments as the record keeps them.
fn json_args(path: &str) -> String {
    serde_json::json!({ "path": path }).to_string()
}

/// Run the key-free mode end to end. Artifacts go to the run directory as they are made.
pub fn run(req: &Request) -> Result<Outcome, ReproduceError> {
    let mut run = RunDir::create(&req.root)?;
    let facts = localize::read_issue(&req.issue_text);
    let title = if facts.title.is_empty() { "the issue".to_string() } else { facts.title.clone() };
    let started = std::time::Instant::now();
    let mut record = RunRecord {
        run_id: run.id.clone(),
        issue_file: req.issue_file.display().to_string(),
        mode: "keyfree".into(),
        model: crate::model::ModelInfo {
            model: "none".into(),
            endpoint_host: String::new(),
            sampling: Default::default(),
        },
        sandbox: String::new(),
        environment: None,
        reproagent_version: env!("CARGO_PKG_VERSION").into(),
        stages: Vec::new(),
        wall_seconds: 0.0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cost_usd: Some(0.0),
        model_calls: Vec::new(),
        tool_calls: Vec::new(),
        resumed_from: None,
        reused: Vec::new(),
        review_model: None,
        tool_protocol: None,
        notes: Vec::new(),
        ledger_entries: 0,
        repeated_reads: 0,
        answered_from_ledger: 0,
        max_calls: None,
        max_cost_usd: None,
    };
    let tool_call = |stage: &str, name: &str, arguments: String, t: std::time::Instant| agent::ToolCallRecord {
        stage: stage.into(),
        name: name.into(),
        arguments,
        is_error: false,
        millis: t.elapsed().as_millis() as u64,
        from_ledger: false,
    };
    let finish = |run: &mut RunDir,
                  record: &mut RunRecord,
                  outcome: Outcome,
                  loc: Option<&LocalizationArtifact>,
                  cause: Option<&RootCause>,
                  plan: Option<&TestPlan>,
                  generation: Option<&Generation>|
     -> Result<Outcome, ReproduceError> {
        record.stages = run.stages.clone();
        record.wall_seconds = started.elapsed().as_secs_f64();
        run.write("outcome.json", &outcome)?;
        run.write("run.json", record)?;
        run.write_text("report.md", report(&title, &outcome, loc, cause, plan, generation))?;
        Ok(outcome)
    };

    // Bad input first: nothing to read, or not an issue at all.
    let words = req.issue_text.split_whitespace().filter(|w| w.chars().any(char::is_alphabetic)).count();
    if words < 3 {
        let o = not_reproduced(&run, "the text does not read as an issue report: fewer than three words");
        return finish(&mut run, &mut record, Outcome { status: Status::Error, ..o }, None, None, None, None);
    }
    let langs = repo_langs(&req.root);
    let issue_langs = synth::issue_langs(&facts);
    if !issue_langs.is_empty() && !issue_langs.iter().any(|l| langs.contains(l)) {
        let names = |v: &[Lang]| v.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ");
        let o = not_reproduced(
            &run,
            format!(
                "the issue's code is {} but the repository has {}",
                names(&issue_langs),
                if langs.is_empty() { "no source files".into() } else { names(&langs) }
            ),
        );
        return finish(&mut run, &mut record, o, None, None, None, None);
    }

    // Stage 1: localization.
    run.begin("localization");
    let graph = store::open(&store::db_path(&req.root))?;
    let search = SearchIndex::open(&req.root)
        .ok()
        .filter(|s| s.check_fresh(graph.meta("tree_digest").ok().flatten().as_deref()).is_ok());
    let localize_started = std::time::Instant::now();
    let loc = localize::localize(&graph, search.as_ref(), &req.issue_text, 10)?;
    let top = loc.entities.first().map(|e| e.score).or(loc.files.first().map(|f| f.score)).unwrap_or(1.0).max(1e-9);
    let locations: Vec<Location> = loc
        .entities
        .iter()
        .map(|e| Location {
            file: e.file.clone(),
            entity: e.entity.clone(),
            start_line: e.start_line,
            end_line: e.end_line,
            confidence: (e.score / top).min(1.0),
            rationale: e.reason.clone(),
        })
        .collect();
    let loc_art = LocalizationArtifact { locations };
    run.write("localization.json", &loc_art)?;
    record.tool_calls.push(tool_call("localization", "localize", String::new(), localize_started));
    run.stage_done("localization");

    // Stage 2: root cause, from the traceback when there is one.
    run.begin("root_cause");
    let mut frames: Vec<PathStep> = facts
        .frames
        .iter()
        .map(|f| PathStep { file: f.path.clone(), line: f.line, function: f.function.clone() })
        .collect();
    if !facts.innermost_last {
        frames.reverse();
    }
    let exc = facts.exceptions.last();
    let cause = RootCause {
        summary: match (exc, loc_art.locations.first()) {
            (Some(e), Some(l)) => format!(
                "{}{} raised in {}",
                e.kind,
                if e.message.is_empty() { String::new() } else { format!(" ({})", e.message) },
                l.entity.as_deref().unwrap_or(&l.file)
            ),
            (Some(e), None) => format!("{}: {}", e.kind, e.message),
            (None, Some(l)) => {
                format!("the behaviour the issue describes, most likely in {}", l.entity.as_deref().unwrap_or(&l.file))
            }
            (None, None) => "unknown: the issue names no code of the repository".into(),
        },
        category: if exc.is_some() { "unexpected-exception".into() } else { "wrong-result".into() },
        execution_path: frames,
        trigger_conditions: facts
            .code_blocks
            .iter()
            .map(|(_, b)| b.trim().to_string())
            .filter(|b| !b.is_empty())
            .take(3)
            .collect(),
        confidence: if facts.frames.is_empty() { 0.3 } else { 0.7 },
    };
    run.write("root_cause.json", &cause)?;
    run.stage_done("root_cause");

    // Stage 3: the plan, from the issue's code.
    run.begin("test_plan");
    let stem = req.issue_file.file_stem().and_then(|s| s.to_str()).unwrap_or("issue");
    // The test goes where the tests of the suspect code live, in their form.
    let suspects: Vec<String> = loc_art.locations.iter().map(|l| l.file.clone()).collect();
    let conv = super::conventions::conventions(&req.root, &suspects);
    let multi = if langs.contains(&Lang::Python) {
        super::multifile::plan(&req.issue_text, &super::multifile::project_commands(&req.root))
    } else {
        Ok(None)
    };
    // The test from a snippet of the issue, given the names found importable in the
    // environment (none before the sandbox is open; see `probe_modules`).
    let from_snippet = |snippet: &Snippet, modules: &[String]| -> Result<Built, String> {
        // The snippet's body: missing names, set-up order, the assertion the prose implies
        // (or the error it wants back); or the reason no honest test can be built from it.
        let (snippet, decided) =
            super::body::prepare(snippet, &facts, &req.issue_text, Some(&graph), &req.root, modules)?;
        let expected = decided.or_else(|| expected_failure(&facts, &snippet)).ok_or_else(|| {
            "the issue shows code but neither the error it gives nor an assertion: no failure to check the test against"
                .to_string()
        })?;
        let test =
            synth::build(&req.root, &conv, &snippet, stem, &title, Some((&expected.kind, expected.message.as_deref())));
        Ok(Built { test, expected, inputs: vec![snippet.code.clone()], lang: snippet.lang })
    };
    let mut found_snippet = None;
    let built = match multi {
        Err(why) => Err(why),
        // An example in several files: written out and run as the issue runs it.
        Ok(Some(p)) => {
            let fixture = super::multifile::pytester_fixture(&req.root);
            let test = super::multifile::build(&req.root, &conv, &p, fixture, stem, &title);
            let inputs = p.files.iter().map(|f| format!("# {}\n{}", f.name, f.text)).collect();
            Ok(Built { test, expected: p.expected, inputs, lang: Lang::Python })
        }
        Ok(None) => match synth::find_snippet(&facts, &req.issue_text, &langs) {
            None => Err(if facts.exceptions.is_empty() {
                "the issue carries neither runnable code nor an error to expect: key-free mode has nothing to build a test from (a model can: --model NAME)"
            } else {
                "the issue reports an error but shows no code that triggers it: key-free mode has nothing to run (a model can: --model NAME)"
            }
            .to_string()),
            Some(snippet) => {
                let b = from_snippet(&snippet, &[]);
                found_snippet = Some(snippet);
                b
            }
        },
    };
    let mut built = match built {
        Ok(b) => b,
        Err(why) => {
            let o = not_reproduced(&run, why);
            return finish(&mut run, &mut record, o, Some(&loc_art), Some(&cause), None, None);
        }
    };
    // Free names still unresolved that the code uses as modules: looked up where the test
    // runs, once the sandbox is open.
    let candidates = match (&found_snippet, built.lang) {
        (Some(_), Lang::Python) => super::body::module_candidates(&built.inputs[0]),
        _ => Vec::new(),
    };
    let plan_of = |b: &Built| {
        let command = crate::sandbox::runners::command_line(
            crate::sandbox::runners::Framework::parse_name(b.test.framework)
                .unwrap_or(crate::sandbox::runners::Framework::Custom),
            &b.test.path,
            b.test.test.as_deref(),
            &b.test.code,
            None,
            &crate::sandbox::runners::Layout::of(&req.root),
        );
        TestPlan {
            framework: b.test.framework.into(),
            test_path: b.test.path.clone(),
            command,
            environment: vec![format!("the repository's {} environment", b.lang.name())],
            inputs: b.inputs.clone(),
            expected: b.expected.clone(),
        }
    };
    let mut plan = plan_of(&built);
    run.write("test_plan.json", &plan)?;
    run.write_text(built.test.path.rsplit('/').next().unwrap_or("test"), &built.test.code)?;
    run.stage_done("test_plan");

    // Stage 4: run it in the sandbox and review the result.
    run.begin("generation");
    let environment = match req.environment() {
        Ok(e) => e,
        Err(e) => {
            let o = Outcome { status: Status::Error, ..not_reproduced(&run, e.to_string()) };
            return finish(&mut run, &mut record, o, Some(&loc_art), Some(&cause), Some(&plan), None);
        }
    };
    record.environment = Some((*environment).clone());
    let config = req.sandbox_config(environment);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let opened = match rt.block_on(sandbox::open(req.sandbox, config)) {
        Ok(o) => o,
        Err(e) => {
            let o = Outcome { status: Status::Error, ..not_reproduced(&run, format!("the sandbox failed: {e}")) };
            return finish(&mut run, &mut record, o, Some(&loc_art), Some(&cause), Some(&plan), None);
        }
    };
    let (sb, why_sandbox) = (opened.sandbox, opened.reason);
    // The names the issue, the repository and convention left unresolved, looked up in the
    // environment the test runs in (the virtualenv, or the Docker image's Python): the
    // host's interpreter may not be that one.
    if let (Some(snippet), false) = (&found_snippet, candidates.is_empty()) {
        let probe_started = std::time::Instant::now();
        let names: Vec<&str> = candidates.iter().map(|(n, _)| n.as_str()).collect();
        let modules = rt.block_on(probe_modules(sb.as_ref(), &candidates));
        record.tool_calls.push(tool_call(
            "generation",
            "probe_modules",
            serde_json::json!({ "names": names }).to_string(),
            probe_started,
        ));
        if !modules.is_empty() {
            if let Ok(b) = from_snippet(snippet, &modules) {
                record.notes.push(format!(
                    "imported from the environment the test runs in: {}",
                    modules.iter().map(|m| format!("`import {m}`")).collect::<Vec<_>>().join(", ")
                ));
                built = b;
                plan = plan_of(&built);
                run.write("test_plan.json", &plan)?;
                run.write_text(built.test.path.rsplit('/').next().unwrap_or("test"), &built.test.code)?;
            }
        }
    }
    let (test, expected) = (&built.test, &built.expected);
    let command = plan.command.clone();
    let python = super::pipeline::environment_python(sb.as_ref());
    let test_started = std::time::Instant::now();
    let result = rt.block_on(async {
        let r = async {
            sb.write_file(&test.path, test.code.as_bytes()).await?;
            run_test(
                sb.as_ref(),
                &req.root,
                &RunTestArgs {
                    file: test.path.clone(),
                    test: test.test.clone(),
                    framework: Some(test.framework.into()),
                    command: None,
                    timeout_secs: req.timeout_secs,
                },
            )
            .await
        }
        .await;
        let _ = sb.close().await;
        r
    });
    let result = match result {
        Ok(x) => x,
        Err(e) => {
            let o = Outcome { status: Status::Error, ..not_reproduced(&run, format!("the sandbox failed: {e}")) };
            return finish(&mut run, &mut record, o, Some(&loc_art), Some(&cause), Some(&plan), None);
        }
    };
    record.sandbox = why_sandbox;
    record.tool_calls.push(tool_call("generation", "run_test", json_args(&test.path), test_started));
    let reviews = review(&result, expected);
    let accepted = reviews.iter().all(|r| r.passed);
    // The first line of the message: enough to name the failure in a summary.
    let failure = result
        .failures
        .first()
        .map(|f| format!("{}: {}", f.kind.as_deref().unwrap_or("?"), f.message.lines().next().unwrap_or("").trim()));
    let generation = Generation {
        test_path: test.path.clone(),
        test_code: test.code.clone(),
        executions: vec![Execution { attempt: 1, result }],
        reviews: reviews.clone(),
    };
    run.write("generation.json", &generation)?;
    run.stage_done("generation");

    let mut outcome = Outcome {
        status: if accepted { Status::Reproduced } else { Status::NotReproduced },
        reason: if accepted {
            // The issue's own error, or an assertion built from what it shows as wrong.
            let short = |k: &str| k.rsplit('.').next().unwrap_or(k).to_string();
            let reported = facts.exceptions.iter().any(|e| short(&e.kind) == short(&expected.kind));
            let how = if reported { "as the issue reports" } else { "the behaviour the issue shows as wrong" };
            format!("the test fails with {}, {how}", failure.as_deref().unwrap_or(&expected.kind))
        } else {
            reviews
                .iter()
                .filter_map(|r| r.finding.as_ref())
                .map(|f| f.description.clone())
                .next()
                .unwrap_or_else(|| "the review rejected the test".into())
        },
        run_id: run.id.clone(),
        run_dir: run.path.display().to_string(),
        test_path: Some(test.path.clone()),
        test_code: Some(test.code.clone()),
        // What a user types: the runner's line without the run's report plumbing.
        command: Some(super::pipeline::user_command_in(&command, python.as_deref())),
        failure,
        written: false,
        probe: None,
        symptom_check: None,
    };
    if accepted && req.write {
        // Never over an existing file, never through a symlink (dangling or leading out).
        match crate::confine::write_inside(&req.root, &test.path, test.code.as_bytes(), false) {
            Ok(_) => outcome.written = true,
            Err(crate::confine::WriteError::Io(p, e)) => {
                return Err(std::io::Error::new(e.kind(), format!("writing {p}: {e}")).into())
            }
            Err(e) => outcome.reason.push_str(&format!("; not written: {e}")),
        }
    }
    finish(&mut run, &mut record, outcome, Some(&loc_art), Some(&cause), Some(&plan), Some(&generation))
}
