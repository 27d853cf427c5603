//! The model-driven pipeline (`reproduce --model NAME`): four stages, each an agent loop
//! ([`super::agent`]) with its own prompt and typed artifact, the context of each passed
//! on to the next:
//!
//! 1. localization → `localization.json` ([`LocalizationArtifact`])
//! 2. root cause → `root_cause.json` ([`RootCause`])
//! 3. test plan → `test_plan.json` ([`TestPlan`])
//! 4. generation → `generation.json` ([`Generation`]): the model writes the test
//!    (`write_test`), the pipeline runs it in the sandbox with the repository's framework
//!    and reviews it: (b) logic and (c) symptom, read from the runner's structured result
//!    as the key-free mode does ([`super::keyfree::review`]); then (a) an independent
//!    review ([`super::review::review`]: its own conversation, evidence and read-only
//!    tools, a schema-checked verdict); then the fix probe ([`super::review::probe`]),
//!    which checks in a sandbox copy that a plausible fix makes the test pass. A passing,
//!    rejected or unfixable test goes back to the model with the findings, up to
//!    [`MAX_FEEDBACK_ITERATIONS`] runs.
//!
//! Every artifact is schema-checked (deserialized into its type; a bad one is sent back
//! to the model) and written as soon as it is accepted, so a run that breaks keeps what
//! it made. The evidence ledger (`ledger.json`, [`super::ledger`]) carries what each
//! stage read to the later ones. `run.json` holds the provenance: model, endpoint host,
//! sampling, every model call (tokens, cost, latency), every tool call, wall time per
//! stage; `--max-calls` and `--max-cost` stop a run cleanly with outcome `budget`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::agent::{
    self, Limits, ModelCallRecord, StageError, StageSpec, ToolProtocol, Trace, Verdict, MAX_FEEDBACK_ITERATIONS,
};
use super::ledger::Spot;
use super::review::{self as rv, Decision, ProbeReport, ReviewVerdict};
use super::*;
use crate::model::{excerpt, ChatModel, ToolSpec};
use crate::sandbox::runners::{self, Framework, TestResult};
use crate::sandbox::tools::{run_test, RunTestArgs};
use crate::sandbox::{self, Sandbox};
use crate::tools::{self, ToolContext};

const LOCALIZATION: &str = include_str!("prompts/localization.md");
const ROOT_CAUSE: &str = include_str!("prompts/root_cause.md");
const TEST_PLAN: &str = include_str!("prompts/test_plan.md");
const GENERATION: &str = include_str!("prompts/generation.md");
const REVIEW: &str = rv::REVIEW_PROMPT;
const PROBE: &str = rv::PROBE_PROMPT;

pub use super::Request;

/// What a pipeline run does past the four stages, and its limits.
#[derive(Debug, Clone)]
pub struct Options {
    /// Another model name on the same endpoint for the review (`--review-model`).
    pub review_model: Option<String>,
    /// Ask the review for JSON mode (`response_format`); off with `--no-json-mode`, and
    /// dropped by itself when the endpoint refuses it.
    pub json_mode: bool,
    /// Run the fix probe on an accepted test (`--no-probe` turns it off).
    pub probe: bool,
    /// `--max-calls`, `--max-cost`.
    pub limits: Limits,
    /// `--tool-protocol`.
    pub tool_protocol: ToolProtocol,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            review_model: None,
            json_mode: true,
            probe: true,
            limits: Limits::default(),
            tool_protocol: ToolProtocol::Auto,
        }
    }
}

/// The hash of each stage's inputs (`inputs.json`), and what `--resume` reused.
#[derive(Default)]
struct Resume {
    old_dir: Option<PathBuf>,
    old: std::collections::BTreeMap<String, String>,
    /// The previous run's evidence ledger: a reused stage's entries carry on.
    old_ledger: super::ledger::Ledger,
    inputs: std::collections::BTreeMap<String, String>,
    reused: Vec<String>,
}

impl Resume {
    fn open(dir: Option<&Path>) -> Resume {
        let Some(dir) = dir else { return Resume::default() };
        let old = std::fs::read(dir.join("inputs.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let old_ledger = std::fs::read(dir.join("ledger.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Resume { old_dir: Some(dir.to_path_buf()), old, old_ledger, ..Resume::default() }
    }

    /// The key of a stage's inputs: the stage, its prompts, the model, the indexed tree.
    fn key(parts: &[&str]) -> String {
        let mut h = blake3::Hasher::new();
        for part in parts {
            h.update(part.as_bytes());
            h.update(&[0]);
        }
        h.finalize().to_hex().to_string()
    }

    /// The previous run's artifact of `stage`, when its inputs had this key.
    fn reuse<T: DeserializeOwned>(&mut self, stage: &str, file: &str, key: &str) -> Option<T> {
        let dir = self.old_dir.as_ref()?;
        if self.old.get(stage).map(String::as_str) != Some(key) {
            return None;
        }
        let a = serde_json::from_slice(&std::fs::read(dir.join(file)).ok()?).ok()?;
        self.reused.push(stage.to_string());
        Some(a)
    }

    /// Would `stage` be reused with inputs of this key?
    fn hit(&self, stage: &str, key: &str) -> bool {
        self.old_dir.is_some() && self.old.get(stage).map(String::as_str) == Some(key)
    }

    /// The previous run's generation and outcome, when generation's inputs had this key
    /// and it ended with a verdict (`reproduced` or `not reproduced`): an `error` (a
    /// broken sandbox, a model fault, an interrupt) says nothing about the test, so that
    /// generation runs again.
    fn reuse_generation(&mut self, key: &str) -> Option<(Generation, Outcome)> {
        let dir = self.old_dir.as_ref()?;
        if self.old.get("generation").map(String::as_str) != Some(key) {
            return None;
        }
        let g: Generation = serde_json::from_slice(&std::fs::read(dir.join("generation.json")).ok()?).ok()?;
        let o: Outcome = serde_json::from_slice(&std::fs::read(dir.join("outcome.json")).ok()?).ok()?;
        if matches!(o.status, Status::Error | Status::Budget) {
            return None;
        }
        self.reused.push("generation".into());
        Some((g, o))
    }
}

pub use super::conventions::{conventions, Conventions};

/// A stage's system prompt. The example test goes only to the stages that write tests
/// (`with_example`); the others are told where it is.
fn render(template: &str, conventions: &Conventions, with_example: bool) -> String {
    let mut text = conventions.text();
    if !with_example {
        if let (Some(i), Some(p)) = (text.find("- an existing test, `"), conventions.example_path.as_deref()) {
            text.truncate(i);
            text.push_str(&format!("- an existing test: `{p}`\n"));
        }
    }
    template.replace("{{conventions}}", &text).replace("{{frameworks}}", &runners::frameworks_text())
}

fn schema_of<T: JsonSchema>() -> Value {
    rv::schema_of::<T>()
}

/// [`user_command`], with the `python3` of the line made the interpreter the run used
/// ([`environment_python`]: the local sandbox puts it first on `PATH`; a user's shell may
/// not have it). None: unchanged.
pub fn user_command_in(internal: &str, python: Option<&Path>) -> String {
    let c = user_command(internal);
    let Some(py) = python.and_then(|p| p.to_str()) else { return c };
    let quoted = if py.chars().all(|ch| ch.is_ascii_alphanumeric() || "/._-+".contains(ch)) {
        py.to_string()
    } else {
        runners::sh_quote(py)
    };
    // `python3` as a command word: at the start, or after a space.
    let mut out = String::with_capacity(c.len() + quoted.len());
    let mut rest = c.as_str();
    while let Some(i) = rest.find("python3 ") {
        let word = i == 0 || rest[..i].ends_with(' ');
        out.push_str(&rest[..i]);
        out.push_str(if word { &quoted } else { "python3" });
        out.push(' ');
        rest = &rest[i + "python3 ".len()..];
    }
    out.push_str(rest);
    out
}

/// The interpreter a sandbox's `python3` is, when it is not the system's: a virtualenv's
/// or conda environment's, or one given by path (the local sandbox shims `python3` to
/// it). The system's Python is `python3` on any shell: None.
pub fn environment_python(sb: &dyn Sandbox) -> Option<PathBuf> {
    sb.environment().and_then(|e| {
        let p = &e.python;
        (p.prefix.is_some() || p.source != crate::sandbox::env::PythonSource::System).then(|| p.interpreter.clone())
    })
}

/// The shell line a user types to run the test in the repository: the runner's line
/// without the pipeline's own report plumbing (`rm -rf .reproagent-run && ...`,
/// `--junitxml`, JSON reporters).
pub fn user_command(internal: &str) -> String {
    let dir = runners::REPORT_DIR;
    let mut c = internal.replace(&format!("rm -rf {dir} && "), "");
    let java = c.contains("javac ");
    if !java {
        c = c.replace(&format!("mkdir -p {dir} && "), "");
    }
    for noise in [
        " -p no:cacheprovider".to_string(),
        format!(" -q -rA --junitxml={dir}/junit.xml"),
        format!(" --ci --json --outputFile={dir}/jest.json"),
        format!(" --reporter=json --outputFile={dir}/vitest.json"),
        " --test-reporter=tap".to_string(),
        format!(" --reports-dir {dir}/junit"),
    ] {
        c = c.replace(&noise, "");
    }
    c
}

/// Deserialize a submitted artifact into its type; the serde message names what is wrong.
fn parse<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

fn safe_rel(p: &str) -> bool {
    let path = Path::new(p);
    !p.trim().is_empty()
        && path.is_relative()
        && path.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
}

fn check_localization(a: &LocalizationArtifact) -> Result<(), String> {
    if a.locations.is_empty() {
        return Err("`locations` is empty: give at least one suspicious location".into());
    }
    if let Some(l) = a.locations.iter().find(|l| !(0.0..=1.0).contains(&l.confidence)) {
        return Err(format!("confidence {} of {} is outside 0..1", l.confidence, l.file));
    }
    Ok(())
}

fn check_root_cause(c: &RootCause) -> Result<(), String> {
    if c.summary.trim().is_empty() {
        return Err("`summary` is empty".into());
    }
    if !(0.0..=1.0).contains(&c.confidence) {
        return Err(format!("confidence {} is outside 0..1", c.confidence));
    }
    Ok(())
}

fn check_plan(p: &TestPlan) -> Result<(), String> {
    if Framework::parse_name(&p.framework).is_none() {
        return Err(format!("framework {:?} is not one of {}", p.framework, runners::framework_names().join(", ")));
    }
    if !safe_rel(&p.test_path) {
        return Err(format!(
            "test_path {:?} must be a path relative to the repository root, without `..`",
            p.test_path
        ));
    }
    if p.expected.kind.trim().is_empty() {
        return Err("`expected.kind` is empty: name the exception or assertion type the test must show today".into());
    }
    Ok(())
}

/// The arguments of `write_test`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct WriteTestArgs {
    /// The test file, relative to the repository root (default: the plan's `test_path`).
    #[serde(default)]
    pub path: Option<String>,
    /// The whole test file.
    pub code: String,
}

struct GenState {
    attempts: u32,
    executions: Vec<Execution>,
    reviews: Vec<Review>,
    /// (path, code, checks passed) of each attempt.
    tried: Vec<(String, String, usize)>,
    sandbox_error: Option<String>,
    /// Every independent review.
    verdicts: Vec<rv::ReviewRecord>,
    /// Every fix probe.
    probes: Vec<ProbeReport>,
    /// Times the probe sent a test back.
    probe_returns: u32,
}

/// The runner's result as the model sees it: what failed and how, without raw output
/// (which carries timings and sandbox paths, and would make runs unreplayable).
fn result_summary(r: &TestResult, workdir: &str) -> Value {
    let scrub = |s: &str| if workdir.is_empty() { s.to_string() } else { s.replace(workdir, "<repo>") };
    json!({
        "status": r.status,
        "passed": r.passed,
        "failed": r.failed,
        "failures": r.failures.iter().take(5).map(|f| json!({
            "name": scrub(&f.name),
            "kind": f.kind,
            "message": excerpt(&scrub(&f.message), 1500),
        })).collect::<Vec<_>>(),
        "error": r.error.as_deref().map(|e| excerpt(&scrub(e), 1500)),
    })
}

fn scrub_review(r: &mut Review, workdir: &str) {
    if let Some(f) = r.finding.as_mut() {
        if !workdir.is_empty() {
            f.evidence = f.evidence.replace(workdir, "<repo>");
            f.description = f.description.replace(workdir, "<repo>");
        }
        f.evidence = excerpt(&f.evidence, 1500);
    }
}

/// A review verdict as the triple review's check (a).
fn aligned_review(v: &ReviewVerdict) -> Review {
    let f = v.findings.iter().find(|f| f.severity != rv::Severity::Minor).or(v.findings.first());
    Review {
        check: "aligned".into(),
        passed: v.verdict == Decision::Accept,
        finding: (v.verdict == Decision::Reject).then(|| Finding {
            kind: "review-rejected".into(),
            component: f.map(|f| f.location.clone()).unwrap_or_else(|| "test".into()),
            description: f.map(|f| f.suggestion.clone()).unwrap_or_default(),
            evidence: f.map(|f| excerpt(&f.evidence, 1500)).unwrap_or_default(),
        }),
    }
}

fn outcome(run: &RunDir, status: Status, reason: impl Into<String>) -> Outcome {
    Outcome::of(run, status, reason)
}

/// `budget` for a spent budget, else `error`.
fn status_of(e: &StageError) -> Status {
    if matches!(e, StageError::Spent(_)) {
        Status::Budget
    } else {
        Status::Error
    }
}

fn stage_reason(stage: &str, e: &StageError) -> String {
    let mut s = format!("{stage} stage: {e}");
    if let Some(h) = e.hint() {
        s.push_str(&format!(" (hint: {h})"));
    }
    s
}

/// Stage outputs so far, for the report.
#[derive(Default)]
struct Made {
    loc: Option<LocalizationArtifact>,
    cause: Option<RootCause>,
    plan: Option<TestPlan>,
    generation: Option<Generation>,
    verdicts: Vec<rv::ReviewRecord>,
    probes: Vec<ProbeReport>,
}

/// Run the pipeline end to end with `model` and the default [`Options`] (review in JSON
/// mode, fix probe on, no budget, tool protocol detected).
pub fn run(req: &Request, model: &dyn ChatModel) -> Result<Outcome, ReproduceError> {
    run_with(req, model, &Options::default())
}

/// Run the pipeline end to end with `model`. Artifacts go to the run directory as they
/// are accepted; a stage that fails ends the run with an `error` outcome that says why
/// (`budget` when the run's budget ran out), and what was made so far stays.
pub fn run_with(req: &Request, model: &dyn ChatModel, opts: &Options) -> Result<Outcome, ReproduceError> {
    let mut run = RunDir::create(&req.root)?;
    let started = Instant::now();
    let facts = crate::localize::read_issue(&req.issue_text);
    let title = if facts.title.is_empty() { "the issue".to_string() } else { facts.title.clone() };
    let mut trace = Trace { limits: opts.limits, protocol: opts.tool_protocol, ..Trace::default() };
    let mut made = Made::default();
    let mut sandbox_reason = String::new();
    let mut environment = None;

    let mut resume = Resume::open(req.resume.as_deref());
    let result =
        stages(req, model, opts, &mut run, &mut trace, &mut made, (&mut sandbox_reason, &mut environment), &mut resume);

    let mut o = match result {
        Ok(o) => o,
        Err(o) => *o,
    };
    let o = {
        if let (Status::Reproduced, true, Some(g)) = (o.status, req.write, made.generation.as_ref()) {
            if !safe_rel(&g.test_path) {
                o.reason.push_str(&format!("; not written: {} leaves the repository", g.test_path));
            } else {
                // Never over an existing file, never through a symlink (dangling or leading out).
                match crate::confine::write_inside(&req.root, &g.test_path, g.test_code.as_bytes(), false) {
                    Ok(_) => o.written = true,
                    Err(crate::confine::WriteError::Io(p, e)) => {
                        return Err(std::io::Error::new(e.kind(), format!("writing {p}: {e}")).into())
                    }
                    Err(e) => o.reason.push_str(&format!("; not written: {e}")),
                }
            }
        }
        o
    };
    let sum = |f: fn(&ModelCallRecord) -> u64| trace.model_calls.iter().map(f).sum::<u64>();
    let record = RunRecord {
        run_id: run.id.clone(),
        issue_file: req.issue_file.display().to_string(),
        mode: "pipeline".into(),
        model: model.describe(),
        sandbox: sandbox_reason,
        environment,
        reproagent_version: env!("CARGO_PKG_VERSION").into(),
        stages: run.stages.clone(),
        wall_seconds: started.elapsed().as_secs_f64(),
        prompt_tokens: sum(|c| c.prompt_tokens),
        completion_tokens: sum(|c| c.completion_tokens),
        cost_usd: trace.model_calls.iter().filter(|c| c.error.is_none()).map(|c| c.cost_usd).sum::<Option<f64>>(),
        model_calls: trace.model_calls.clone(),
        tool_calls: trace.tool_calls.clone(),
        resumed_from: req.resume.as_ref().map(|p| p.display().to_string()),
        reused: resume.reused.clone(),
        review_model: opts.review_model.clone(),
        tool_protocol: Some(trace.protocol),
        notes: trace.notes.clone(),
        ledger_entries: trace.ledger.entries.len(),
        repeated_reads: trace.ledger.repeats(),
        answered_from_ledger: trace.ledger.answered(),
        max_calls: opts.limits.max_calls,
        max_cost_usd: opts.limits.max_cost_usd,
    };
    run.write("outcome.json", &o)?;
    run.write("run.json", &record)?;
    run.write("ledger.json", &trace.ledger)?;
    let mut md =
        report(&title, &o, made.loc.as_ref(), made.cause.as_ref(), made.plan.as_ref(), made.generation.as_ref());
    md.push_str(&review_section(&made));
    md.push_str(&spend_section(&record, opts));
    run.write_text("report.md", md)?;
    Ok(o)
}

/// The report's sections on the independent review and the fix probe.
fn review_section(made: &Made) -> String {
    let mut md = String::new();
    if !made.verdicts.is_empty() {
        md.push_str("\n## Independent review\n\n");
        for r in &made.verdicts {
            let v = &r.verdict;
            md.push_str(&format!(
                "- attempt {}: {}\n",
                r.attempt,
                if v.verdict == Decision::Accept { "accept" } else { "reject" }
            ));
            for f in &v.findings {
                md.push_str(&format!(
                    "  - {:?} at `{}`: {} (evidence: {})\n",
                    f.severity,
                    f.location,
                    f.suggestion,
                    excerpt(&f.evidence, 200)
                ));
            }
        }
    }
    if !made.probes.is_empty() {
        md.push_str("\n## Fix probe\n\n");
        for p in &made.probes {
            md.push_str(&format!("- attempt {}: **{}**: {}\n", p.attempt, p.verdict.as_str(), p.reason));
        }
        if made.probes.last().is_some_and(|p| !p.trials.is_empty()) {
            md.push_str(
                "\nThe last proposed fix is in `probe.patch`: an UNVERIFIED suggestion, not a reviewed patch.\n",
            );
        }
    }
    md
}

/// The report's spend section: calls, tokens and cost against the limits.
fn spend_section(r: &RunRecord, opts: &Options) -> String {
    let calls = r.model_calls.len();
    let limit = |l: Option<String>| l.map(|l| format!(" (limit {l})")).unwrap_or_default();
    let cost = match r.cost_usd {
        Some(c) => format!("${c:.4}"),
        None => "unknown (a model without a price in the table)".into(),
    };
    let mut md = format!(
        "\n## Spend\n\n- model calls: {calls}{}\n- tokens: {} prompt, {} completion\n- cost: {cost}{}; the paper's reference figure is $0.14 per instance\n",
        limit(opts.limits.max_calls.map(|m| m.to_string())),
        r.prompt_tokens,
        r.completion_tokens,
        limit(opts.limits.max_cost_usd.map(|m| format!("${m:.2}"))),
    );
    let mut by_stage: Vec<(String, usize)> = Vec::new();
    for c in &r.model_calls {
        match by_stage.iter_mut().find(|(s, _)| *s == c.stage) {
            Some(e) => e.1 += 1,
            None => by_stage.push((c.stage.clone(), 1)),
        }
    }
    if !by_stage.is_empty() {
        md.push_str(&format!(
            "- calls by stage: {}\n",
            by_stage.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ")
        ));
    }
    if r.ledger_entries > 0 {
        md.push_str(&format!(
            "- evidence ledger: {} entries; calls a later stage repeated: {}; answered from the ledger without running the tool again: {}\n",
            r.ledger_entries, r.repeated_reads, r.answered_from_ledger
        ));
    }
    for n in &r.notes {
        md.push_str(&format!("- note: {n}\n"));
    }
    md
}

/// The outcome when the run directory cannot be written.
fn io(run: &RunDir, e: ReproduceError) -> Box<Outcome> {
    stop(run, Status::Error, format!("writing the run directory failed: {e}"))
}

/// An outcome that ends the run early.
fn stop(run: &RunDir, status: Status, reason: impl Into<String>) -> Box<Outcome> {
    Box::new(outcome(run, status, reason))
}

/// The key of a stage's inputs: the stage, its prompts, the model, the indexed tree.
fn stage_key(spec: &StageSpec, key_of: (&str, &str)) -> String {
    Resume::key(&[spec.name, &spec.system, &spec.user, key_of.0, key_of.1])
}

/// Stages 1 to 3 alike: the artifact of a resumed run when the stage's inputs are
/// unchanged (its ledger entries carried on), else the agent loop until it submits an
/// artifact that parses and passes `check`; then the inputs' key, the artifact and the
/// ledger are written and the stage is closed. `key_of` is (model name, tree digest),
/// part of the inputs' key.
#[allow(clippy::too_many_arguments)]
fn analysis_stage<T: Serialize + DeserializeOwned>(
    label: &str,
    spec: &StageSpec,
    model: &dyn ChatModel,
    ctx: &ToolContext,
    trace: &mut Trace,
    run: &mut RunDir,
    resume: &mut Resume,
    key_of: (&str, &str),
    check: fn(&T) -> Result<(), String>,
) -> Result<T, Box<Outcome>> {
    run.begin(spec.name);
    let key = stage_key(spec, key_of);
    let file = format!("{}.json", spec.name);
    let artifact = match resume.reuse::<T>(spec.name, &file, &key) {
        Some(a) => {
            trace.ledger.carry(&resume.old_ledger, spec.name);
            a
        }
        None => agent::run_stage(model, ctx, spec, trace, |v, _| match parse::<T>(v) {
            Ok(a) => match check(&a) {
                Ok(()) => Verdict::Accept(a),
                Err(m) => Verdict::Invalid(m),
            },
            Err(m) => Verdict::Invalid(m),
        })
        .map_err(|e| {
            run.stage_done(spec.name);
            let _ = run.write("ledger.json", &trace.ledger);
            let mut reason = stage_reason(label, &e);
            if status_of(&e) == Status::Budget {
                reason.push_str("; the artifacts made so far are kept");
            }
            stop(run, status_of(&e), reason)
        })?,
    };
    resume.inputs.insert(spec.name.into(), key);
    run.write("inputs.json", &resume.inputs).map_err(|e| io(run, e))?;
    run.write(&file, &artifact).map_err(|e| io(run, e))?;
    run.write("ledger.json", &trace.ledger).map_err(|e| io(run, e))?;
    run.stage_done(spec.name);
    Ok(artifact)
}

/// The sandbox the plan stage and generation run in, opened once, when first needed; it
/// is closed when dropped.
struct Runtime {
    rt: tokio::runtime::Runtime,
    sb: Arc<dyn Sandbox>,
    ctx: ToolContext,
    env: Arc<crate::sandbox::env::Environment>,
    workdir: String,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.rt.block_on(self.sb.close());
    }
}

fn open_runtime(
    req: &Request,
    run: &RunDir,
    (sandbox_reason, environment): (&mut String, &mut Option<crate::sandbox::env::Environment>),
) -> Result<Runtime, Box<Outcome>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| stop(run, Status::Error, format!("the async runtime: {e}")))?;
    let env = req.environment().map_err(|e| stop(run, Status::Error, e.to_string()))?;
    *environment = Some((*env).clone());
    let opened = rt
        .block_on(sandbox::open(req.sandbox, req.sandbox_config(env.clone())))
        .map_err(|e| stop(run, Status::Error, format!("the sandbox failed to open: {e}")))?;
    *sandbox_reason = opened.reason.clone();
    let sb: Arc<dyn Sandbox> = Arc::from(opened.sandbox);
    let workdir = sb.workdir().to_string();
    let built = ToolContext::new(&req.root).map(|c| {
        c.with_runtime(tools::runtime::RuntimeContext {
            sandbox: sb.clone(),
            handle: rt.handle().clone(),
            repo: req.root.clone(),
        })
    });
    match built {
        Ok(ctx) => Ok(Runtime { rt, sb, ctx, env, workdir }),
        Err(e) => {
            let _ = rt.block_on(sb.close());
            Err(stop(run, Status::Error, format!("the tool layer: {e}")))
        }
    }
}

/// The four stages. `Err(outcome)` ends the run early with that outcome.
#[allow(clippy::too_many_arguments)]
fn stages(
    req: &Request,
    model: &dyn ChatModel,
    opts: &Options,
    run: &mut RunDir,
    trace: &mut Trace,
    made: &mut Made,
    (sandbox_reason, environment): (&mut String, &mut Option<crate::sandbox::env::Environment>),
    resume: &mut Resume,
) -> Result<Outcome, Box<Outcome>> {
    let words = req.issue_text.split_whitespace().filter(|w| w.chars().any(char::is_alphabetic)).count();
    if words < 3 {
        return Err(stop(run, Status::Error, "the text does not read as an issue report: fewer than three words"));
    }
    // Stages 1 and 2 see the repository's conventions; the test plan and generation see
    // those of the code localization found (where its tests live, in their form), with
    // the example test, which only the stages that write tests get.
    let conv = conventions(&req.root, &[]);
    let ctx = ToolContext::new(&req.root).map_err(|e| stop(run, Status::Error, format!("the tool layer: {e}")))?;
    // `sequential_thinking` was offered to every stage and never used: the stages reason
    // in their answers instead.
    let retrieval = tools::all().without("sequential_thinking");
    let runtime_tools = tools::with_runtime().without("sequential_thinking");
    let issue = format!("## Issue report\n\n{}\n", req.issue_text.trim());
    let model_name = model.describe().model;
    let tree = crate::store::open(&crate::store::db_path(&req.root))
        .ok()
        .and_then(|s| s.meta("tree_digest").ok().flatten())
        .unwrap_or_default();
    let submit = |name: &str, what: &str, schema: Value| ToolSpec::new(name, what, schema);

    // Stage 1: localization.
    let spec = StageSpec::new(
        "localization",
        render(LOCALIZATION, &conv, false),
        issue.clone(),
        &retrieval,
        submit(
            "submit_localization",
            "Submit the ranked suspicious locations: the stage's final artifact.",
            schema_of::<LocalizationArtifact>(),
        ),
    );
    let loc: LocalizationArtifact = analysis_stage(
        "localization",
        &spec,
        model,
        &ctx,
        trace,
        run,
        resume,
        (&model_name, &tree),
        check_localization,
    )?;
    // What the later stages need of what localization read: the suspect lines themselves.
    let spots: Vec<Spot> =
        loc.locations.iter().map(|l| Spot { path: l.file.clone(), start: l.start_line, end: l.end_line }).collect();
    trace.ledger.cite("localization", &spots);
    let loc_json = serde_json::to_string_pretty(&loc).unwrap_or_default();
    let suspects: Vec<String> = loc.locations.iter().map(|l| l.file.clone()).collect();
    let suspect_conv = conventions(&req.root, &suspects);
    made.loc = Some(loc);

    // Stage 2: root cause, from the issue, the locations and the ledger.
    let spec = StageSpec::new(
        "root_cause",
        render(ROOT_CAUSE, &conv, false),
        format!(
            "{issue}\n## Suspicious locations (from localization)\n\n```json\n{loc_json}\n```\n\n{}",
            trace.ledger.render()
        ),
        &retrieval,
        submit(
            "submit_root_cause",
            "Submit the root-cause report: the stage's final artifact.",
            schema_of::<RootCause>(),
        ),
    );
    let cause: RootCause =
        analysis_stage("root cause", &spec, model, &ctx, trace, run, resume, (&model_name, &tree), check_root_cause)?;
    let spots: Vec<Spot> = cause
        .execution_path
        .iter()
        .map(|p| Spot { path: p.file.clone(), start: i64::from(p.line), end: i64::from(p.line) })
        .collect();
    trace.ledger.cite("root_cause", &spots);
    let cause_json = serde_json::to_string_pretty(&cause).unwrap_or_default();
    made.cause = Some(cause.clone());

    // Stage 3: the test plan. It may run snippets in the sandbox, opened now unless the
    // plan is reused.
    let mut runtime: Option<Runtime> = None;
    let plan_user = format!(
        "{issue}\n## Suspicious locations (from localization)\n\n```json\n{loc_json}\n```\n\n## Root cause (from root-cause analysis)\n\n```json\n{cause_json}\n```\n\n{}",
        trace.ledger.render()
    );
    let mut spec = StageSpec::new(
        "test_plan",
        render(TEST_PLAN, &suspect_conv, true),
        plan_user,
        &runtime_tools,
        submit("submit_test_plan", "Submit the test plan: the stage's final artifact.", schema_of::<TestPlan>()),
    );
    if !resume.hit("test_plan", &stage_key(&spec, (&model_name, &tree))) {
        runtime = Some(open_runtime(req, run, (&mut *sandbox_reason, &mut *environment))?);
    }
    let plan_ctx = match &runtime {
        Some(r) => &r.ctx,
        None => {
            spec.registry = &retrieval;
            &ctx
        }
    };
    let plan: TestPlan =
        analysis_stage("test plan", &spec, model, plan_ctx, trace, run, resume, (&model_name, &tree), check_plan)?;
    let plan_json = serde_json::to_string_pretty(&plan).unwrap_or_default();
    made.plan = Some(plan.clone());

    // Stage 4: generation with the reviews and the probe, in the sandbox; or, resumed
    // with the same inputs (plan and the artifacts before it, prompts, model, tree), the
    // previous run's test and verdict, with no model call and no sandbox.
    run.begin("generation");
    let gen_system = render(GENERATION, &suspect_conv, true);
    let gen_user = format!(
        "{issue}\n## Suspicious locations (from localization)\n\n```json\n{loc_json}\n```\n\n## Root cause (from root-cause analysis)\n\n```json\n{cause_json}\n```\n\n## Test plan\n\n```json\n{plan_json}\n```\n\n{}",
        trace.ledger.render()
    );
    // The environment the test ran in is part of its verdict: another Python, another run.
    let env_part = req
        .environment
        .as_ref()
        .map(|e| {
            format!(
                "{}|{}|{:?}|{:?}",
                e.python.interpreter.display(),
                e.python.version.as_deref().unwrap_or(""),
                req.env.workdir,
                req.env.activate
            )
        })
        .unwrap_or_default();
    // Where and how the test runs decides the verdict too: a run in another sandbox,
    // image or with another timeout is not the same generation.
    let image = req
        .image
        .clone()
        .or_else(|| sandbox::image::recorded_image(&req.root))
        .unwrap_or_else(|| "reproagent-env:none".into());
    let where_run = format!("sandbox={:?} image={image} timeout={}", req.sandbox, req.timeout_secs);
    let checks = format!("probe={} review_model={:?} json_mode={}", opts.probe, opts.review_model, opts.json_mode);
    let gen_key = Resume::key(&[
        "generation",
        &gen_system,
        &gen_user,
        REVIEW,
        PROBE,
        &checks,
        &model_name,
        &tree,
        &where_run,
        &env_part,
    ]);
    if let Some((generation, old)) = resume.reuse_generation(&gen_key) {
        resume.inputs.insert("generation".into(), gen_key);
        run.write("inputs.json", &resume.inputs).map_err(|e| io(run, e))?;
        run.write("generation.json", &generation).map_err(|e| io(run, e))?;
        if let Some(dir) = &resume.old_dir {
            for f in ["review.json", "probe.json", "probe.patch"] {
                if let Ok(b) = std::fs::read(dir.join(f)) {
                    run.write_text(f, b).map_err(|e| io(run, e))?;
                }
            }
        }
        run.stage_done("generation");
        made.generation = Some(generation);
        *sandbox_reason = "none: generation reused".into();
        let mut reason = old.reason;
        if let Some(i) = reason.find("; not written: ") {
            reason.truncate(i);
        }
        return Ok(Outcome {
            reason,
            run_id: run.id.clone(),
            run_dir: run.path.display().to_string(),
            written: false,
            ..old
        });
    }
    let rtm = match runtime {
        Some(r) => r,
        None => open_runtime(req, run, (&mut *sandbox_reason, &mut *environment))?,
    };
    let (rt, sb, workdir) = (&rtm.rt, rtm.sb.clone(), rtm.workdir.clone());
    let spec = StageSpec::new(
        "generation",
        gen_system,
        gen_user,
        &runtime_tools,
        ToolSpec::new(
            "write_test",
            "Write the reproduction test into the sandbox, run it with the repository's framework and review it. Returns the result and the review's findings; the stage ends when the review accepts the test.",
            schema_of::<WriteTestArgs>(),
        ),
    );
    let mut st = GenState {
        attempts: 0,
        executions: Vec::new(),
        reviews: Vec::new(),
        tried: Vec::new(),
        sandbox_error: None,
        verdicts: Vec::new(),
        probes: Vec::new(),
        probe_returns: 0,
    };
    let framework = plan.framework.clone();
    let expected = plan.expected.clone();
    let timeout = req.timeout_secs;
    let env = rtm.env.clone();
    let sandbox_config = || req.sandbox_config(env.clone());
    let probe_rt = rv::ProbeRuntime {
        rt,
        choice: req.sandbox,
        config: &sandbox_config,
        framework: &framework,
        timeout_secs: timeout,
        repo: &req.root,
    };
    let result = agent::run_stage(model, &rtm.ctx, &spec, trace, |v, trace| {
        let args: WriteTestArgs = match parse(v) {
            Ok(a) => a,
            Err(m) => return Verdict::Invalid(m),
        };
        let path = args.path.clone().filter(|p| !p.trim().is_empty()).unwrap_or_else(|| plan.test_path.clone());
        if !safe_rel(&path) {
            return Verdict::Invalid(format!("path {path:?} must be relative to the repository root, without `..`"));
        }
        if args.code.trim().is_empty() {
            return Verdict::Invalid("`code` is empty".into());
        }
        st.attempts += 1;
        let ran = rt.block_on(async {
            sb.write_file(&path, args.code.as_bytes()).await?;
            run_test(
                sb.as_ref(),
                &req.root,
                &RunTestArgs {
                    file: path.clone(),
                    test: None,
                    framework: Some(framework.clone()),
                    command: None,
                    timeout_secs: timeout,
                },
            )
            .await
        });
        let result = match ran {
            Ok(r) => r,
            Err(e) => {
                st.sandbox_error = Some(format!("the sandbox failed running the test: {e}"));
                return Verdict::Stop(format!("the sandbox failed running the test: {e}"));
            }
        };
        let summary = result_summary(&result, &workdir);
        // (b) and (c) from the runner's result, exactly as the key-free mode reads it.
        let mut reviews: Vec<Review> = keyfree::review(&result, &expected).into_iter().skip(1).collect();
        for r in reviews.iter_mut() {
            scrub_review(r, &workdir);
        }
        st.executions.push(Execution { attempt: st.attempts, result: result.clone() });
        let ev = rv::Evidence {
            issue: &req.issue_text,
            cause: &cause,
            plan: &plan,
            test_path: &path,
            test_code: &args.code,
            result: &result,
            workdir: &workdir,
        };
        let settings = rv::Settings {
            json_mode: opts.json_mode,
            review_model: opts.review_model.as_deref(),
            ledger: trace.ledger.render(),
        };
        // (a), the independent review, only for a failure that (b) and (c) accept:
        // otherwise the test goes back anyway.
        let mut verdict = None;
        if reviews.iter().all(|r| r.passed) {
            match rv::review(model, &ctx, &retrieval, trace, &settings, &ev) {
                Ok(v) => {
                    reviews.insert(0, aligned_review(&v));
                    st.verdicts.push(rv::ReviewRecord { attempt: st.attempts, verdict: v.clone() });
                    let _ = run.write("review.json", &st.verdicts);
                    verdict = Some(v);
                }
                Err(StageError::Spent(r)) => {
                    st.tried.push((path.clone(), args.code.clone(), reviews.iter().filter(|r| r.passed).count()));
                    st.reviews.extend(reviews);
                    return Verdict::Spent(r);
                }
                Err(e) => {
                    st.sandbox_error = Some(format!("the review failed: {e}"));
                    return Verdict::Stop(format!("the review failed: {e}"));
                }
            }
        }
        let passed = reviews.iter().filter(|r| r.passed).count();
        let accepted = reviews.len() == 3 && passed == 3;
        st.reviews.extend(reviews.iter().cloned());
        st.tried.push((path.clone(), args.code.clone(), passed));
        let mut findings: Vec<Value> = reviews
            .iter()
            .filter_map(|r| r.finding.as_ref())
            .filter(|f| f.kind != "review-rejected")
            .map(|f| json!(f))
            .collect();
        if let Some(v) = verdict.as_ref().filter(|v| v.verdict == Decision::Reject) {
            findings.extend(v.findings.iter().map(|f| json!(f)));
        }
        if accepted && opts.probe {
            match rv::probe(model, &ctx, &retrieval, trace, &settings, &ev, &probe_rt, st.attempts) {
                Ok(p) => {
                    let verdict = p.verdict;
                    let reason = p.reason.clone();
                    if let Some(patch) = p.patch_file() {
                        let _ = run.write_text("probe.patch", patch);
                    }
                    st.probes.push(p);
                    let _ = run.write("probe.json", &st.probes);
                    if verdict == Probe::Fails && st.probe_returns < rv::MAX_PROBE_RETURNS {
                        st.probe_returns += 1;
                        if let Some(t) = st.tried.last_mut() {
                            t.2 = 2;
                        }
                        findings.push(json!({
                            "evidence": reason,
                            "location": path,
                            "severity": "critical",
                            "suggestion": "No plausible fix makes this test pass: it may assert the buggy behaviour, or a value no fix gives. Assert the behaviour the issue expects once fixed, and keep the failure the issue reports today.",
                        }));
                    } else {
                        return Verdict::Accept((path, args.code, result));
                    }
                }
                Err(StageError::Spent(r)) => return Verdict::Spent(r),
                Err(e) => {
                    st.sandbox_error = Some(format!("the fix probe failed: {e}"));
                    return Verdict::Stop(format!("the fix probe failed: {e}"));
                }
            }
        } else if accepted {
            return Verdict::Accept((path, args.code, result));
        }
        if st.attempts >= MAX_FEEDBACK_ITERATIONS {
            let first = findings
                .first()
                .and_then(|f| f.get("description").or_else(|| f.get("suggestion")))
                .and_then(Value::as_str)
                .unwrap_or("none")
                .to_string();
            return Verdict::Stop(format!(
                "no test passed the review in {MAX_FEEDBACK_ITERATIONS} feedback iterations; the last finding: {first}"
            ));
        }
        Verdict::Feedback(agent::bounded(&json!({
            "attempt": st.attempts,
            "accepted": false,
            "result": summary,
            "findings": findings,
            "next": format!(
                "The review rejected the test. Revise it (set-up, inputs, assertions) so it fails today with {}{} for the reason the issue gives, and passes once the bug is fixed; then call write_test again.",
                expected.kind,
                expected.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            ),
        })))
    });
    let python = environment_python(rtm.sb.as_ref());
    drop(rtm);
    run.stage_done("generation");
    made.verdicts = st.verdicts.clone();
    made.probes = st.probes.clone();
    let _ = run.write("ledger.json", &trace.ledger);
    let command_for = |path: &str, code: &str| {
        user_command_in(
            &runners::command_line(
                Framework::parse_name(&plan.framework).unwrap_or(Framework::Custom),
                path,
                None,
                code,
                None,
                &runners::Layout::of(&req.root),
            ),
            python.as_deref(),
        )
    };
    let symptom_check = if plan.expected.message.as_deref().is_some_and(|m| !m.trim().is_empty()) {
        "type and message"
    } else {
        "type only (the issue gives no message)"
    };
    let ended = match result {
        Ok((path, code, result)) => {
            let generation = Generation {
                test_path: path.clone(),
                test_code: code.clone(),
                executions: st.executions,
                reviews: st.reviews,
            };
            run.write("generation.json", &generation).map_err(|e| io(run, e))?;
            let failure = result.failures.first().map(|f| {
                format!("{}: {}", f.kind.as_deref().unwrap_or("?"), f.message.lines().next().unwrap_or("").trim())
            });
            made.generation = Some(generation);
            let probe = st.probes.last().map(|p| p.verdict).filter(|_| opts.probe);
            let mut reason = format!(
                "the test fails with {}, as the issue reports; the review accepted it on attempt {}",
                failure.as_deref().unwrap_or(&plan.expected.kind),
                st.attempts
            );
            if let Some(p) = st.probes.last().filter(|_| opts.probe) {
                reason.push_str(&format!("; fix probe: {} ({})", p.verdict.as_str(), p.reason));
            }
            if plan.expected.message.as_deref().is_none_or(|m| m.trim().is_empty()) {
                reason.push_str(
                    "; the symptom check compared only the exception type: the issue gives no message to compare",
                );
            }
            Ok(Outcome {
                status: Status::Reproduced,
                reason,
                command: Some(command_for(&path, &code)),
                test_path: Some(path),
                test_code: Some(code),
                failure,
                probe,
                symptom_check: Some(symptom_check.into()),
                ..outcome(run, Status::Reproduced, "")
            })
        }
        Err(e) => {
            // The best attempt: most checks passed, the later one on a tie.
            let best = st.tried.iter().enumerate().max_by_key(|(i, t)| (t.2, *i)).map(|(_, t)| t.clone());
            if let Some((path, code, _)) = &best {
                let generation = Generation {
                    test_path: path.clone(),
                    test_code: code.clone(),
                    executions: st.executions.clone(),
                    reviews: st.reviews.clone(),
                };
                run.write("generation.json", &generation).map_err(|e| io(run, e))?;
                made.generation = Some(generation);
            }
            let broke = st.sandbox_error.is_some() || matches!(e, StageError::Model(_) | StageError::Failed(_));
            let status = if matches!(e, StageError::Spent(_)) {
                Status::Budget
            } else if broke {
                Status::Error
            } else {
                Status::NotReproduced
            };
            let mut o = outcome(run, status, stage_reason("generation", &e));
            if status == Status::Budget {
                o.reason.push_str("; the artifacts made so far are kept");
            }
            if let Some((path, code, passed)) = best {
                o.reason.push_str(&format!("; best attempt ({passed} of 3 checks passed) kept in generation.json"));
                o.command = Some(command_for(&path, &code));
                o.test_path = Some(path);
                o.test_code = Some(code);
            }
            Err(Box::new(o))
        }
    };
    // A verdict (not an error) can be reused by `--resume` while these inputs hold.
    let status = match &ended {
        Ok(o) => o.status,
        Err(o) => o.status,
    };
    if !matches!(status, Status::Error | Status::Budget) {
        resume.inputs.insert("generation".into(), gen_key);
        run.write("inputs.json", &resume.inputs).map_err(|e| io(run, e))?;
    }
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_a_user_types_names_the_environments_python() {
        let venv = Path::new("/work/app/.venv/bin/python");
        assert_eq!(
            user_command_in("cd tests && PYTHONPATH=.. python3 runtests.py --settings=test_sqlite 'a.B.c'", Some(venv)),
            "cd tests && PYTHONPATH=.. /work/app/.venv/bin/python runtests.py --settings=test_sqlite 'a.B.c'"
        );
        assert_eq!(
            user_command_in("python3 -m pytest -p no:cacheprovider 'tests/t.py::test_x'", Some(venv)),
            "/work/app/.venv/bin/python -m pytest 'tests/t.py::test_x'"
        );
        // Not the command word: left alone. A path with a space is quoted.
        assert_eq!(user_command_in("mypython3 x", Some(venv)), "mypython3 x");
        assert_eq!(
            user_command_in("python3 -m unittest t", Some(Path::new("/home/a b/v/bin/python"))),
            "'/home/a b/v/bin/python' -m unittest t"
        );
        // The system's Python (no environment given): as the runner wrote it.
        assert_eq!(user_command_in("python3 -m unittest t", None), "python3 -m unittest t");
    }
}
