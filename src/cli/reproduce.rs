//! `reproagent reproduce --issue FILE`: a test that fails today for the reason the issue
//! gives.

use std::path::PathBuf;

use clap::Args;

use crate::model::{resolve_from_process, ChatModel, HttpModel, ModelError, Recorder, Replayer};
use crate::reproduce::{keyfree, pipeline, Outcome, Request, Status};
use crate::sandbox::Choice;

/// Turn an issue into a failing test, with the analysis behind it. Artifacts and a
/// Markdown report go to REPO/.reproagent/runs/<run-id>/.
#[derive(Args, Debug)]
pub struct ReproduceArgs {
    /// The issue, as Markdown or plain text.
    #[arg(long)]
    pub issue: PathBuf,
    /// The repository root (indexed with `reproagent index`).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
    /// `none`: key-free mode (the issue's own code and traceback, checked in the sandbox).
    /// Any other name runs the four-stage model pipeline with that model.
    #[arg(long, default_value = "none")]
    pub model: String,
    #[command(flatten)]
    pub flags: super::ModelFlags,
    /// Record every model call to this cassette (JSONL).
    #[arg(long, conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Replay the model calls from this cassette: no network.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// A previous run (its id, or its directory): reuse the stages whose inputs (issue,
    /// prompts, model, indexed tree, earlier artifacts) have not changed; generation too,
    /// when the earlier run ended with a verdict.
    #[arg(long)]
    pub resume: Option<String>,
    /// Where tests run: docker when the engine answers and an image is ready, else local.
    #[arg(long, value_enum, default_value = "auto")]
    pub sandbox: SandboxChoice,
    /// Docker image (default: the one `sandbox prepare` recorded for the repository).
    #[arg(long)]
    pub image: Option<String>,
    #[command(flatten)]
    pub env: super::EnvFlags,
    /// Put the test into the repository at the planned path when it reproduces the issue.
    #[arg(long)]
    pub write: bool,
    /// Seconds a test run may take.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub timeout: u64,
    #[command(flatten)]
    pub pipeline: super::PipelineFlags,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum SandboxChoice {
    Auto,
    Docker,
    Local,
}

pub fn run(args: ReproduceArgs) -> anyhow::Result<i32> {
    // First, before any thread exists: Ctrl-C and SIGTERM then clean up the sandbox and
    // give the run its outcome, whatever the run is doing (a model call blocks).
    crate::sandbox::interrupt::install().map_err(|e| anyhow::anyhow!("installing the Ctrl-C handler: {e}"))?;
    let result = run_request(&args);
    // An interrupt being handled exits 130 itself; do not race it with our own code.
    crate::sandbox::interrupt::wait_if_interrupted();
    result
}

fn run_request(args: &ReproduceArgs) -> anyhow::Result<i32> {
    let text = std::fs::read_to_string(&args.issue).map_err(|e| {
        super::with_hint(format!("{}: {e}", args.issue.display()), Some("give the path of the issue text"))
    })?;
    let sandbox = match args.sandbox {
        SandboxChoice::Auto => Choice::Auto,
        SandboxChoice::Docker => Choice::Docker,
        SandboxChoice::Local => Choice::Local,
    };
    if !args.repo.is_dir() {
        return Err(super::with_hint(
            format!("{} is not a directory", args.repo.display()),
            Some("pass the repository root with -C"),
        ));
    }
    // Both modes start from the index: without one, stop before anything is said or made.
    let db = crate::store::db_path(&args.repo);
    if !db.is_file() {
        return Err(super::with_hint(
            format!("no index at {}", db.display()),
            Some("run `reproagent index` in the repository first"),
        ));
    }
    // Once per run, said before it starts; a bad --python stops here.
    let environment = args.env.resolve(&args.repo)?;
    let req = Request {
        root: args.repo.clone(),
        issue_file: args.issue.clone(),
        issue_text: text,
        sandbox,
        image: args.image.clone(),
        write: args.write,
        timeout_secs: args.timeout,
        resume: if args.model == "none" { None } else { resume_dir(args)? },
        env: args.env.options(),
        environment: Some(environment),
    };
    if args.model != "none" {
        let model = build_model(args)?;
        let opts = args.pipeline.options(&args.repo)?;
        let outcome =
            pipeline::run_with(&req, model.as_ref(), &opts).map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
        return show(args, &outcome);
    }
    let outcome = keyfree::run(&req).map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
    show(args, &outcome)
}

/// `--resume RUN`: a run directory, or a run id under REPO/.reproagent/runs/.
fn resume_dir(args: &ReproduceArgs) -> anyhow::Result<Option<PathBuf>> {
    let Some(r) = &args.resume else { return Ok(None) };
    let direct = PathBuf::from(r);
    let dir =
        if direct.join("outcome.json").exists() { direct } else { args.repo.join(".reproagent").join("runs").join(r) };
    if !dir.join("outcome.json").exists() {
        return Err(super::with_hint(
            format!("--resume {r}: no run there"),
            Some("give a run id from REPO/.reproagent/runs/ or a run directory"),
        ));
    }
    Ok(Some(dir))
}

/// The model: a cassette replay (no network), or the configured endpoint, recorded when asked.
fn build_model(args: &ReproduceArgs) -> anyhow::Result<Box<dyn ChatModel>> {
    let model_err = |e: ModelError| super::with_hint(e.to_string(), e.hint().as_deref());
    if let Some(path) = &args.replay {
        return Ok(Box::new(Replayer::open(path).map_err(model_err)?));
    }
    let config = resolve_from_process(&args.flags.overrides(&args.model), &args.repo).map_err(model_err)?;
    args.pipeline.check_price(&config)?;
    let http = HttpModel::new(config);
    Ok(match &args.record {
        Some(path) => Box::new(Recorder::create(path, http).map_err(model_err)?),
        None => Box::new(http),
    })
}

fn show(args: &ReproduceArgs, outcome: &Outcome) -> anyhow::Result<i32> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(outcome)?);
    } else {
        println!("{}: {}", outcome.status.as_str(), outcome.reason);
        if let (Some(path), Some(code)) = (&outcome.test_path, &outcome.test_code) {
            println!("\n--- {path}{} ---\n{code}", if outcome.written { " (written)" } else { "" });
        }
        if let Some(cmd) = &outcome.command {
            println!("run it with: {cmd}");
        }
        if let Some(p) = outcome.probe {
            println!("fix probe: {}", p.as_str());
        }
        println!("report: {}/report.md", outcome.run_dir);
    }
    // Exit 0 when reproduced, 2 when not, 1 for errors, 3 when the budget ran out:
    // scripts can branch on it.
    Ok(match outcome.status {
        Status::Reproduced => 0,
        Status::NotReproduced => 2,
        Status::Error => 1,
        Status::Budget => 3,
    })
}
