//! `reproduce`: from an issue to a test that fails today for the reason the issue gives.
//!
//! Every run writes its stage artifacts to `.reproagent/runs/<run-id>/` as JSON
//! (localization, root cause, test plan, generation, outcome, the run record) with a
//! Markdown report beside them. This module holds those artifact types, the run
//! directory and the outcome; [`keyfree`] is the mode that needs no model.

pub mod agent;
mod body;
pub mod conventions;
pub(crate) mod form;
pub mod keyfree;
pub mod ledger;
mod multifile;
pub mod pipeline;
pub mod review;
mod synth;

use std::path::{Path, PathBuf};
use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::sandbox::runners::TestResult;

#[derive(Debug, Error)]
pub enum ReproduceError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Localize(#[from] crate::localize::LocalizeError),
    #[error("sandbox: {0}")]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error("environment: {0}")]
    Env(#[from] crate::sandbox::env::EnvError),
    #[error("run directory: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

impl ReproduceError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ReproduceError::Store(e) => e.hint(),
            ReproduceError::Localize(e) => e.hint(),
            ReproduceError::Sandbox(_) => Some("`reproagent sandbox exec -- true` checks the sandbox on its own"),
            ReproduceError::Env(e) => e.hint(),
            _ => None,
        }
    }
}

/// What to reproduce, and how: the same for the key-free mode and the model pipeline.
#[derive(Debug, Clone)]
pub struct Request {
    pub root: PathBuf,
    pub issue_file: PathBuf,
    pub issue_text: String,
    pub sandbox: crate::sandbox::Choice,
    /// Docker image (default: the one `sandbox prepare` recorded).
    pub image: Option<String>,
    /// Put the test into the repository when it reproduces the issue.
    pub write: bool,
    pub timeout_secs: u64,
    /// A previous run's directory: its artifacts are reused where their inputs have not
    /// changed, generation's only after a verdict (model pipeline only; the key-free mode
    /// is cheap to re-run).
    pub resume: Option<PathBuf>,
    /// `--python`, and Docker's `--workdir` and `--activate`.
    pub env: crate::sandbox::env::EnvOptions,
    /// The environment, when the caller resolved it (the CLI does, to say it before the
    /// run); else the run resolves it from `env`.
    pub environment: Option<std::sync::Arc<crate::sandbox::env::Environment>>,
}

impl Request {
    /// The run's environment: the one given, else resolved now (once per run).
    pub fn environment(&self) -> Result<std::sync::Arc<crate::sandbox::env::Environment>, ReproduceError> {
        match &self.environment {
            Some(e) => Ok(e.clone()),
            None => Ok(std::sync::Arc::new(crate::sandbox::env::resolve(&self.root, &self.env)?)),
        }
    }

    /// The sandbox's configuration: the image, the environment, Docker's placement.
    pub fn sandbox_config(
        &self,
        environment: std::sync::Arc<crate::sandbox::env::Environment>,
    ) -> crate::sandbox::SandboxConfig {
        let image = self
            .image
            .clone()
            .or_else(|| crate::sandbox::image::recorded_image(&self.root))
            .unwrap_or_else(|| "reproagent-env:none".into());
        crate::sandbox::SandboxConfig::new(&self.root, image).with_env(Some(environment), &self.env)
    }
}

/// Stage 1: where the fault may be.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LocalizationArtifact {
    pub locations: Vec<Location>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Location {
    pub file: String,
    pub entity: Option<String>,
    pub start_line: i64,
    pub end_line: i64,
    /// 0..1, relative to the strongest suspect.
    pub confidence: f64,
    pub rationale: String,
}

/// Stage 2: why it fails.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RootCause {
    pub summary: String,
    /// e.g. `crash`, `wrong-result`, `unexpected-exception`.
    pub category: String,
    /// From the entry point to the failure.
    pub execution_path: Vec<PathStep>,
    pub trigger_conditions: Vec<String>,
    pub confidence: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PathStep {
    pub file: String,
    pub line: u32,
    pub function: String,
}

/// Stage 3: how to show it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TestPlan {
    /// The repository's framework: a name of `sandbox::runners::FRAMEWORKS`.
    #[schemars(schema_with = "crate::sandbox::runners::framework_schema")]
    pub framework: String,
    /// Where the test goes, relative to the repository root.
    pub test_path: String,
    /// How to run it.
    pub command: String,
    pub environment: Vec<String>,
    /// The inputs the test builds (the issue's own code).
    pub inputs: Vec<String>,
    pub expected: Expected,
}

/// The failure the test must show today.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Expected {
    /// Exception or assertion type, as the issue reports it.
    pub kind: String,
    /// Its message, when the issue gives one.
    pub message: Option<String>,
}

/// Stage 4: the test, every run of it, every review.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Generation {
    pub test_path: String,
    pub test_code: String,
    pub executions: Vec<Execution>,
    pub reviews: Vec<Review>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Execution {
    pub attempt: u32,
    pub result: TestResult,
}

/// One check of the triple review: `aligned` (the test is about the issue), `logic` (the
/// failure comes from the test's logic, not a syntax, import or setup error), `symptom`
/// (the failure matches what the issue reports).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Review {
    pub check: String,
    pub passed: bool,
    pub finding: Option<Finding>,
}

/// A structured finding that drives the next refinement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// e.g. `wrong-exception`, `setup-error`, `passes-today`, `not-aligned`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The part at fault: `test`, `environment`, `issue`.
    pub component: String,
    pub description: String,
    pub evidence: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Reproduced,
    NotReproduced,
    Error,
    /// The run's budget (`--max-calls`, `--max-cost`) ran out: it stopped cleanly with
    /// the artifacts made so far.
    Budget,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::NotReproduced => "not reproduced",
            Status::Error => "error",
            Status::Budget => "budget",
        }
    }
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    pub reason: String,
    pub run_id: String,
    pub run_dir: String,
    /// The test (when one was written), where it goes and how to run it.
    pub test_path: Option<String>,
    pub test_code: Option<String>,
    pub command: Option<String>,
    /// The failure the test shows today.
    pub failure: Option<String>,
    /// Set when `--write` put the test into the repository.
    pub written: bool,
    /// The fix probe's verdict on the accepted test (model pipeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
    /// What the symptom check compared: `type and message`, or `type only` when the
    /// issue gives no message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symptom_check: Option<String>,
}

/// The fix probe's verdict: a fix the model proposed made the test pass (and the test
/// still fails without it), no proposed fix did, or none was proposed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    Passes,
    Fails,
    NoFix,
}

impl Probe {
    pub fn as_str(self) -> &'static str {
        match self {
            Probe::Passes => "passes",
            Probe::Fails => "fails",
            Probe::NoFix => "no fix proposed",
        }
    }
}

impl Outcome {
    /// An outcome of `run` with a status and its reason, before any test is known.
    pub fn of(run: &RunDir, status: Status, reason: impl Into<String>) -> Outcome {
        Outcome {
            status,
            reason: reason.into(),
            run_id: run.id.clone(),
            run_dir: run.path.display().to_string(),
            test_path: None,
            test_code: None,
            command: None,
            failure: None,
            written: false,
            probe: None,
            symptom_check: None,
        }
    }
}

/// The run record (`run.json`) of both modes: provenance, every model and tool call,
/// timings. The key-free mode has model `none`, no model calls and no cost.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub issue_file: String,
    pub mode: String,
    pub model: crate::model::ModelInfo,
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
    pub model_calls: Vec<agent::ModelCallRecord>,
    pub tool_calls: Vec<agent::ToolCallRecord>,
    /// `--resume`: the run reused from, and the stages whose artifacts it reused.
    #[serde(default)]
    pub resumed_from: Option<String>,
    #[serde(default)]
    pub reused: Vec<String>,
    /// The review's model, when not the run's.
    #[serde(default)]
    pub review_model: Option<String>,
    /// The tool protocol the run ended with (`native` or `text`; `auto` when no call showed).
    #[serde(default)]
    pub tool_protocol: Option<agent::ToolProtocol>,
    /// Fallbacks taken on the way (JSON mode or tools refused).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Entries in the evidence ledger, and the calls that repeated one an earlier stage
    /// had made (`ledger.json` says which).
    #[serde(default)]
    pub ledger_entries: usize,
    #[serde(default)]
    pub repeated_reads: usize,
    /// Retrievals answered from the ledger (the same call on the same tree, made before)
    /// instead of running the tool again.
    #[serde(default)]
    pub answered_from_ledger: usize,
    /// The limits the run had.
    #[serde(default)]
    pub max_calls: Option<u32>,
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageTime {
    pub stage: String,
    pub seconds: f64,
}

/// A run's directory and what it has written so far.
///
/// While it lives it is registered with [`crate::sandbox::interrupt`]: a Ctrl-C writes
/// an `error` outcome naming the stage in progress ([`RunDir::begin`]) when the run has
/// written none, and keeps every artifact written so far. Artifacts are written through
/// the interrupt's write gate, so an interrupted run's outcome is the handler's alone.
pub struct RunDir {
    pub id: String,
    pub path: PathBuf,
    started: Instant,
    pub stages: Vec<StageTime>,
    /// The repository root whose `.reproagent/` holds the run.
    root: PathBuf,
    interrupt: crate::sandbox::interrupt::Registration,
}

impl RunDir {
    /// A new run under `root/.reproagent/runs/<id>/`. The directory is made by the first
    /// write, so a run that stops before it writes anything (no index, an unreadable
    /// tree) leaves no empty directory behind.
    pub fn create(root: &Path) -> Result<RunDir, ReproduceError> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        // Sortable by time, unique by a hash of the session id (pid, nanoseconds, counter).
        let salt = blake3::hash(crate::sandbox::new_session_id().as_bytes()).to_hex();
        let id = format!("{}-{}", now.as_secs(), &salt[..8]);
        let path = crate::store::state_dir(root).join("runs").join(&id);
        let (r, p, i) = (root.to_path_buf(), path.clone(), id.clone());
        let interrupt = crate::sandbox::interrupt::register_run(
            "setup",
            Box::new(move |reason| match make_run_dir(&r, &p) {
                Ok(()) => write_interrupted(&p, &i, reason),
                Err(e) => format!("error: {reason}; the run directory {} could not be made: {e}", p.display()),
            }),
        );
        Ok(RunDir { id, path, started: Instant::now(), stages: Vec::new(), root: root.to_path_buf(), interrupt })
    }

    /// Say which stage runs now: an interrupt names it in the outcome.
    pub fn begin(&self, stage: &str) {
        self.interrupt.set_stage(stage);
    }

    /// Write one artifact as pretty JSON.
    pub fn write<T: Serialize>(&self, name: &str, value: &T) -> Result<(), ReproduceError> {
        let bytes = serde_json::to_vec_pretty(value)?;
        self.write_text(name, &bytes)
    }

    /// Write one file of the run (the report, the test) as it is.
    pub fn write_text(&self, name: &str, contents: impl AsRef<[u8]>) -> Result<(), ReproduceError> {
        let _gate = crate::sandbox::interrupt::write_gate();
        make_run_dir(&self.root, &self.path)?;
        std::fs::write(self.path.join(name), contents)?;
        Ok(())
    }

    /// Close a stage: record its wall time since the previous one.
    pub fn stage_done(&mut self, stage: &str) {
        let total: f64 = self.stages.iter().map(|s| s.seconds).sum();
        let now = self.started.elapsed().as_secs_f64();
        self.stages.push(StageTime { stage: stage.to_string(), seconds: now - total });
    }
}

/// Make a run's directory (and `.reproagent/` with its `.gitignore`) if it is not there.
fn make_run_dir(root: &Path, path: &Path) -> std::io::Result<()> {
    if !path.is_dir() {
        crate::store::ensure_state_dir(root)?;
        std::fs::create_dir_all(path)?;
    }
    Ok(())
}

/// The outcome of an interrupted run, unless it has one: `error` with the reason, the
/// run's artifacts left as they are, and a report that says so and lists them.
fn write_interrupted(path: &Path, run_id: &str, reason: &str) -> String {
    if path.join("outcome.json").exists() {
        return format!("run {}: its outcome was already written", path.display());
    }
    let mut kept: Vec<String> = std::fs::read_dir(path)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    kept.sort();
    let outcome = Outcome {
        status: Status::Error,
        reason: reason.to_string(),
        run_id: run_id.to_string(),
        run_dir: path.display().to_string(),
        test_path: None,
        test_code: None,
        command: None,
        failure: None,
        written: false,
        probe: None,
        symptom_check: None,
    };
    if let Ok(bytes) = serde_json::to_vec_pretty(&outcome) {
        let _ = std::fs::write(path.join("outcome.json"), bytes);
    }
    let kept = if kept.is_empty() { "nothing yet".to_string() } else { kept.join(", ") };
    let line = format!("**Outcome: error** — {reason}; the artifacts written so far are kept: {kept}\n");
    let report = path.join("report.md");
    let text = match std::fs::read_to_string(&report) {
        Ok(old) => format!("{old}\n{line}"),
        Err(_) => format!("# Reproduction: run {run_id}\n\n{line}"),
    };
    let _ = std::fs::write(report, text);
    format!("error: {reason}; outcome and report in {}", path.display())
}

/// The Markdown report of a run, from its artifacts.
pub fn report(
    title: &str,
    outcome: &Outcome,
    loc: Option<&LocalizationArtifact>,
    cause: Option<&RootCause>,
    plan: Option<&TestPlan>,
    generation: Option<&Generation>,
) -> String {
    let mut md =
        format!("# Reproduction: {title}\n\n**Outcome: {}** — {}\n\n", outcome.status.as_str(), outcome.reason);
    if let (Some(path), Some(cmd)) = (&outcome.test_path, &outcome.command) {
        md.push_str(&format!("Test: `{path}`, run with `{cmd}`\n\n"));
    }
    if let Some(f) = &outcome.failure {
        md.push_str(&format!("Failure today: `{f}`\n\n"));
    }
    if let Some(l) = loc {
        md.push_str("## Localization\n\n");
        for (i, x) in l.locations.iter().take(10).enumerate() {
            md.push_str(&format!(
                "{}. `{}` {} (confidence {:.2}): {}\n",
                i + 1,
                x.file,
                x.entity.as_deref().map(|e| format!("`{e}`")).unwrap_or_default(),
                x.confidence,
                x.rationale
            ));
        }
        md.push('\n');
    }
    if let Some(c) = cause {
        md.push_str(&format!(
            "## Root cause\n\n{} (category: {}, confidence {:.2})\n\n",
            c.summary, c.category, c.confidence
        ));
        for s in &c.execution_path {
            md.push_str(&format!("- `{}:{}` in `{}`\n", s.file, s.line, s.function));
        }
        md.push('\n');
    }
    if let Some(p) = plan {
        md.push_str(&format!(
            "## Test plan\n\nFramework {}, test at `{}`, expected failure `{}{}`\n\n",
            p.framework,
            p.test_path,
            p.expected.kind,
            p.expected.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
        ));
    }
    if let Some(g) = generation {
        md.push_str(&format!("## Generated test\n\n```\n{}```\n\n## Runs and reviews\n\n", g.test_code));
        for e in &g.executions {
            md.push_str(&format!(
                "- run {}: {:?}, {} passed, {} failed",
                e.attempt, e.result.status, e.result.passed, e.result.failed
            ));
            if let Some(f) = e.result.failures.first() {
                md.push_str(&format!(" — {}: {}", f.kind.as_deref().unwrap_or("?"), f.message));
            }
            md.push('\n');
        }
        for r in &g.reviews {
            md.push_str(&format!("- review `{}`: {}", r.check, if r.passed { "passed" } else { "rejected" }));
            if let Some(f) = &r.finding {
                md.push_str(&format!(" — {} in {}: {} (evidence: {})", f.kind, f.component, f.description, f.evidence));
            }
            md.push('\n');
        }
    }
    md
}
