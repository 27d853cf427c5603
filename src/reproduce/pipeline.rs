//! The model-driven pipeline (`reproduce --model NAME`): four stages, each an agent loop
//! ([`super::agent`]) with its own prompt and typed artifact, the context of each passed
//! on to the next:
//!
//! 1. localization → `localization.json` ([`LocalizationArtifact`])
//! 2. root cause → `root_cause.json` ([`RootCause`])
//! 3. test plan → `test_plan.json` ([`TestPlan`])
//! 4. generation → `generation.json` ([`Generation`]): the model writes the test
//!    (`write_test`), the pipeline runs it in the sandbox with the repository's framework
//!    and applies the triple review: (a) aligned with the issue, asked of the model;
//!    (b) logic and (c) symptom, read from the runner's structured result as the key-free
//!    mode does ([`super::keyfree::review`]). A passing or rejected test goes back to the
//!    model with the findings, up to [`MAX_FEEDBACK_ITERATIONS`] runs.
//!
//! Every artifact is schema-checked (deserialized into its type; a bad one is sent back
//! to the model) and written as soon as it is accepted, so a run that breaks keeps what
//! it made. `run.json` holds the provenance: model, endpoint host, sampling, every
//! model call (tokens, cost, latency), every tool call, wall time per stage.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::agent::{
    self, ModelCallRecord, StageError, StageSpec, ToolCallRecord, Trace, Verdict, MAX_FEEDBACK_ITERATIONS,
    MAX_MODEL_CALLS,
};
use super::*;
use crate::model::{excerpt, ChatModel, ChatRequest, Message, ModelInfo, ToolSpec};
use crate::sandbox::runners::{self, Framework, TestResult};
use crate::sandbox::tools::{run_test, RunTestArgs};
use crate::sandbox::{self, Sandbox};
use crate::tools::{self, ToolContext};

const LOCALIZATION: &str = include_str!("prompts/localization.md");
const ROOT_CAUSE: &str = include_str!("prompts/root_cause.md");
const TEST_PLAN: &str = include_str!("prompts/test_plan.md");
const GENERATION: &str = include_str!("prompts/generation.md");
const REVIEW: &str = include_str!("prompts/review.md");

pub use super::Request;

/// The run record of a pipeline run: provenance, every call, timings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PipelineRecord {
    pub run_id: String,
    pub issue_file: String,
    pub mode: String,
    pub model: ModelInfo,
    pub sandbox: String,
    /// The environment tests ran in, and why it was chosen.
    #[serde(default)]
    pub environment: Option<crate::sandbox::env::Environment>,
    pub reproagent_version: String,
    pub stages: Vec<StageTime>,
    pub wall_seconds: f64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `None` when some call's price is unknown (a local model, say).
    pub cost_usd: Option<f64>,
    pub model_calls: Vec<ModelCallRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
    /// `--resume`: the run reused from, and the stages whose artifacts it reused.
    #[serde(default)]
    pub resumed_from: Option<String>,
    #[serde(default)]
    pub reused: Vec<String>,
}

/// The hash of each stage's inputs (`inputs.json`), and what `--resume` reused.
#[derive(Default)]
struct Resume {
    old_dir: Option<PathBuf>,
    old: std::collections::BTreeMap<String, String>,
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
        Resume { old_dir: Some(dir.to_path_buf()), old, ..Resume::default() }
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
        if o.status == Status::Error {
            return None;
        }
        self.reused.push("generation".into());
        Some((g, o))
    }
}

pub use super::conventions::{conventions, Conventions};

fn render(template: &str, conventions: &Conventions) -> String {
    template.replace("{{conventions}}", &conventions.text()).replace("{{frameworks}}", &runners::frameworks_text())
}

fn schema_of<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({"type": "object"}));
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    v
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

/// The model's alignment verdict.
#[derive(Debug, Clone, Deserialize)]
struct Alignment {
    aligned: bool,
    #[serde(default)]
    description: String,
    #[serde(default)]
    evidence: String,
}

struct GenState {
    attempts: u32,
    executions: Vec<Execution>,
    reviews: Vec<Review>,
    /// (path, code, checks passed) of each attempt.
    tried: Vec<(String, String, usize)>,
    sandbox_error: Option<String>,
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

/// Ask the model whether the test is aligned with the issue: check (a) of the review.
fn alignment_review(model: &dyn ChatModel, trace: &mut Trace, issue: &str, code: &str, failure: &Value) -> Review {
    let req = ChatRequest::new(vec![
        Message::system(REVIEW),
        Message::user(format!(
            "## Issue\n\n{issue}\n\n## Test\n\n```\n{code}\n```\n\n## Its result today\n\n{failure}\n"
        )),
    ]);
    let finding = |kind: &str, description: String, evidence: String| Finding {
        kind: kind.into(),
        component: "test".into(),
        description,
        evidence,
    };
    match trace.chat(model, "generation", &req) {
        Ok(resp) => {
            let text = resp.message.content.unwrap_or_default();
            match agent::json_in_text(&text).map(serde_json::from_value::<Alignment>) {
                Some(Ok(a)) if a.aligned => Review { check: "aligned".into(), passed: true, finding: None },
                Some(Ok(a)) => Review {
                    check: "aligned".into(),
                    passed: false,
                    finding: Some(finding(
                        "not-aligned",
                        if a.description.is_empty() {
                            "the test is not about what the issue reports".into()
                        } else {
                            a.description
                        },
                        a.evidence,
                    )),
                },
                _ => Review {
                    check: "aligned".into(),
                    passed: false,
                    finding: Some(finding(
                        "review-unanswered",
                        "the alignment review did not answer with the JSON verdict".into(),
                        excerpt(&text, 300),
                    )),
                },
            }
        }
        Err(e) => Review {
            check: "aligned".into(),
            passed: false,
            finding: Some(Finding {
                kind: "review-failed".into(),
                component: "model".into(),
                description: format!("the alignment review call failed: {e}"),
                evidence: String::new(),
            }),
        },
    }
}

fn outcome(run: &RunDir, status: Status, reason: impl Into<String>) -> Outcome {
    Outcome::of(run, status, reason)
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
}

/// Run the pipeline end to end with `model`. Artifacts go to the run directory as they
/// are accepted; a stage that fails ends the run with an `error` outcome that says why,
/// and what was made so far stays.
pub fn run(req: &Request, model: &dyn ChatModel) -> Result<Outcome, ReproduceError> {
    let mut run = RunDir::create(&req.root)?;
    let started = Instant::now();
    let facts = crate::localize::read_issue(&req.issue_text);
    let title = if facts.title.is_empty() { "the issue".to_string() } else { facts.title.clone() };
    let mut trace = Trace::default();
    let mut made = Made::default();
    let mut sandbox_reason = String::new();
    let mut environment = None;

    let mut resume = Resume::open(req.resume.as_deref());
    let result =
        stages(req, model, &mut run, &mut trace, &mut made, (&mut sandbox_reason, &mut environment), &mut resume);

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
    let record = PipelineRecord {
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
    };
    run.write("outcome.json", &o)?;
    run.write("run.json", &record)?;
    run.write_text(
        "report.md",
        report(&title, &o, made.loc.as_ref(), made.cause.as_ref(), made.plan.as_ref(), made.generation.as_ref()),
    )?;
    Ok(o)
}

/// The outcome when the run directory cannot be written.
fn io(run: &RunDir, e: ReproduceError) -> Box<Outcome> {
    stop(run, Status::Error, format!("writing the run directory failed: {e}"))
}

/// An outcome that ends the run early.
fn stop(run: &RunDir, status: Status, reason: impl Into<String>) -> Box<Outcome> {
    Box::new(outcome(run, status, reason))
}

/// Stages 1 to 3 alike: the artifact of a resumed run when the stage's inputs are
/// unchanged, else the agent loop until it submits an artifact that parses and passes
/// `check`; then the inputs' key and the artifact are written and the stage is closed.
/// `key_of` is (model name, tree digest), part of the inputs' key.
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
    let key = Resume::key(&[spec.name, &spec.system, &spec.user, key_of.0, key_of.1]);
    let file = format!("{}.json", spec.name);
    let artifact = match resume.reuse::<T>(spec.name, &file, &key) {
        Some(a) => a,
        None => agent::run_stage(model, ctx, spec, trace, |v, _| match parse::<T>(v) {
            Ok(a) => match check(&a) {
                Ok(()) => Verdict::Accept(a),
                Err(m) => Verdict::Invalid(m),
            },
            Err(m) => Verdict::Invalid(m),
        })
        .map_err(|e| {
            run.stage_done(spec.name);
            stop(run, Status::Error, stage_reason(label, &e))
        })?,
    };
    resume.inputs.insert(spec.name.into(), key);
    run.write("inputs.json", &resume.inputs).map_err(|e| io(run, e))?;
    run.write(&file, &artifact).map_err(|e| io(run, e))?;
    run.stage_done(spec.name);
    Ok(artifact)
}

/// The four stages. `Err(outcome)` ends the run early with that outcome.
fn stages(
    req: &Request,
    model: &dyn ChatModel,
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
    // those of the code localization found (where its tests live, in their form).
    let conv = conventions(&req.root, &[]);
    let ctx = ToolContext::new(&req.root).map_err(|e| stop(run, Status::Error, format!("the tool layer: {e}")))?;
    let retrieval = tools::all();
    let issue = format!("## Issue report\n\n{}\n", req.issue_text.trim());
    let model_name = model.describe().model;
    let tree = crate::store::open(&crate::store::db_path(&req.root))
        .ok()
        .and_then(|s| s.meta("tree_digest").ok().flatten())
        .unwrap_or_default();

    // Stage 1: localization.
    let spec = StageSpec {
        name: "localization",
        system: render(LOCALIZATION, &conv),
        user: issue.clone(),
        registry: &retrieval,
        submit: ToolSpec::new(
            "submit_localization",
            "Submit the ranked suspicious locations: the stage's final artifact.",
            schema_of::<LocalizationArtifact>(),
        ),
        max_calls: MAX_MODEL_CALLS,
    };
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
    let loc_json = serde_json::to_string_pretty(&loc).unwrap_or_default();
    let suspects: Vec<String> = loc.locations.iter().map(|l| l.file.clone()).collect();
    let suspect_conv = conventions(&req.root, &suspects);
    made.loc = Some(loc);

    // Stage 2: root cause, from the issue and the locations.
    let spec = StageSpec {
        name: "root_cause",
        system: render(ROOT_CAUSE, &conv),
        user: format!("{issue}\n## Suspicious locations (from localization)\n\n```json\n{loc_json}\n```\n"),
        registry: &retrieval,
        submit: ToolSpec::new(
            "submit_root_cause",
            "Submit the root-cause report: the stage's final artifact.",
            schema_of::<RootCause>(),
        ),
        max_calls: MAX_MODEL_CALLS,
    };
    let cause: RootCause =
        analysis_stage("root cause", &spec, model, &ctx, trace, run, resume, (&model_name, &tree), check_root_cause)?;
    let cause_json = serde_json::to_string_pretty(&cause).unwrap_or_default();
    made.cause = Some(cause);

    // Stage 3: the test plan.
    let spec = StageSpec {
        name: "test_plan",
        system: render(TEST_PLAN, &suspect_conv),
        user: format!(
            "{issue}\n## Suspicious locations (from localization)\n\n```json\n{loc_json}\n```\n\n## Root cause (from root-cause analysis)\n\n```json\n{cause_json}\n```\n"
        ),
        registry: &retrieval,
        submit: ToolSpec::new("submit_test_plan", "Submit the test plan: the stage's final artifact.", schema_of::<TestPlan>()),
        max_calls: MAX_MODEL_CALLS,
    };
    let plan: TestPlan =
        analysis_stage("test plan", &spec, model, &ctx, trace, run, resume, (&model_name, &tree), check_plan)?;
    let plan_json = serde_json::to_string_pretty(&plan).unwrap_or_default();
    made.plan = Some(plan.clone());

    // Stage 4: generation with the triple review, in the sandbox; or, resumed with the
    // same inputs (plan and the artifacts before it, prompts, model, tree), the previous
    // run's test and verdict, with no model call and no sandbox.
    run.begin("generation");
    let gen_system = render(GENERATION, &suspect_conv);
    let gen_user = format!(
        "{issue}\n## Suspicious locations (from localization)\n\n```json\n{loc_json}\n```\n\n## Root cause (from root-cause analysis)\n\n```json\n{cause_json}\n```\n\n## Test plan\n\n```json\n{plan_json}\n```\n"
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
    let gen_key =
        Resume::key(&["generation", &gen_system, &gen_user, REVIEW, &model_name, &tree, &where_run, &env_part]);
    if let Some((generation, old)) = resume.reuse_generation(&gen_key) {
        resume.inputs.insert("generation".into(), gen_key);
        run.write("inputs.json", &resume.inputs).map_err(|e| io(run, e))?;
        run.write("generation.json", &generation).map_err(|e| io(run, e))?;
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| stop(run, Status::Error, format!("the async runtime: {e}")))?;
    let env = req.environment().map_err(|e| stop(run, Status::Error, e.to_string()))?;
    *environment = Some((*env).clone());
    let opened = rt
        .block_on(sandbox::open(req.sandbox, req.sandbox_config(env)))
        .map_err(|e| stop(run, Status::Error, format!("the sandbox failed to open: {e}")))?;
    *sandbox_reason = opened.reason.clone();
    let sb: Arc<dyn Sandbox> = Arc::from(opened.sandbox);
    let workdir = sb.workdir().to_string();
    let gen_ctx = ToolContext::new(&req.root)
        .map_err(|e| stop(run, Status::Error, format!("the tool layer: {e}")))?
        .with_runtime(tools::runtime::RuntimeContext {
            sandbox: sb.clone(),
            handle: rt.handle().clone(),
            repo: req.root.clone(),
        });
    let runtime_tools = tools::with_runtime();
    let spec = StageSpec {
        name: "generation",
        system: gen_system,
        user: gen_user,
        registry: &runtime_tools,
        submit: ToolSpec::new(
            "write_test",
            "Write the reproduction test into the sandbox, run it with the repository's framework and review it. Returns the result and the review's findings; the stage ends when the review accepts the test.",
            schema_of::<WriteTestArgs>(),
        ),
        max_calls: MAX_MODEL_CALLS,
    };
    let mut st =
        GenState { attempts: 0, executions: Vec::new(), reviews: Vec::new(), tried: Vec::new(), sandbox_error: None };
    let framework = plan.framework.clone();
    let expected = plan.expected.clone();
    let timeout = req.timeout_secs;
    let result = agent::run_stage(model, &gen_ctx, &spec, trace, |v, trace| {
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
        // (a) only for a failure that (b) and (c) accept: otherwise the test goes back anyway.
        if reviews.iter().all(|r| r.passed) {
            reviews.insert(0, alignment_review(model, trace, &req.issue_text, &args.code, &summary));
        }
        let passed = reviews.iter().filter(|r| r.passed).count();
        let accepted = reviews.len() == 3 && passed == 3;
        st.executions.push(Execution { attempt: st.attempts, result: result.clone() });
        st.reviews.extend(reviews.iter().cloned());
        st.tried.push((path.clone(), args.code.clone(), passed));
        if accepted {
            return Verdict::Accept((path, args.code, result));
        }
        let findings: Vec<&Finding> = reviews.iter().filter_map(|r| r.finding.as_ref()).collect();
        if st.attempts >= MAX_FEEDBACK_ITERATIONS {
            return Verdict::Stop(format!(
                "no test passed the review in {MAX_FEEDBACK_ITERATIONS} feedback iterations; the last finding: {}",
                findings.first().map(|f| f.description.as_str()).unwrap_or("none")
            ));
        }
        Verdict::Feedback(agent::bounded(&json!({
            "attempt": st.attempts,
            "accepted": false,
            "result": summary,
            "findings": findings,
            "next": format!(
                "The review rejected the test. Revise it (set-up, inputs, assertions) so it fails today with {}{} for the reason the issue gives, and call write_test again.",
                expected.kind,
                expected.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
            ),
        })))
    });
    let _ = rt.block_on(sb.close());
    run.stage_done("generation");
    let command_for = |path: &str, code: &str| {
        runners::command_line(
            Framework::parse_name(&plan.framework).unwrap_or(Framework::Custom),
            path,
            None,
            code,
            None,
            &runners::Layout::of(&req.root),
        )
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
            Ok(Outcome {
                status: Status::Reproduced,
                reason: format!(
                    "the test fails with {}, as the issue reports; the review accepted it on attempt {}",
                    failure.as_deref().unwrap_or(&plan.expected.kind),
                    st.attempts
                ),
                command: Some(command_for(&path, &code)),
                test_path: Some(path),
                test_code: Some(code),
                failure,
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
            let mut o =
                outcome(run, if broke { Status::Error } else { Status::NotReproduced }, stage_reason("generation", &e));
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
    if status != Status::Error {
        resume.inputs.insert("generation".into(), gen_key);
        run.write("inputs.json", &resume.inputs).map_err(|e| io(run, e))?;
    }
    ended
}
