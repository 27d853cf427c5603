//! `reproagent bench`: score reproducers on cases, the same way for every one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::bench::adapter::{self, Adapter};
use crate::bench::run::{BenchOptions, ModelSource};
use crate::bench::score::Scorer;
use crate::bench::{self, case, mine, summarize, swt, CaseResult, CaseStatus};
use crate::model::{resolve_from_process, ChatModel, HttpModel, ModelError, ModelInfo, Replayer};
use crate::sandbox::Choice;

/// The bench harness: run an adapter over a suite of cases, report, mine and convert cases.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    Run(Box<RunArgs>),
    Validate(ValidateArgs),
    Report(ReportArgs),
    Import(ImportArgs),
    Export(ExportArgs),
    Mine(MineArgs),
    Localize(LocalizeArgs),
}

/// Measure localization on cases: the rank of the gold patch's file in `reproagent
/// localize`'s ranking and in plain BM25 over the same index's files (the issue text as
/// the query), per case, then the rank-1/top-5/top-10 counts of both. Each case's buggy
/// tree is materialized and indexed in a temporary directory.
#[derive(Args, Debug)]
pub struct LocalizeArgs {
    /// A case directory (with case.json), or a directory of them.
    pub cases: PathBuf,
    /// Only these cases (repeatable).
    #[arg(long = "case")]
    pub only: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

/// Run one reproducer over a suite: each case's candidate test runs on the buggy tree
/// and after the gold patch. Writes OUT/run.json and OUT/cases/<id>/.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// A case directory (with case.json), or a directory of them.
    #[arg(long, default_value = "fixtures/bench")]
    pub suite: PathBuf,
    /// The reproducer: pipeline, keyfree, zero-shot, gold, empty, command.
    #[arg(long, value_enum)]
    pub adapter: AdapterName,
    /// For `--adapter command`: the program, run with `sh -c` in a checkout of the buggy
    /// tree (see `reproagent bench run --help` for its contract).
    #[arg(long, required_if_eq("adapter", "command"))]
    pub command: Option<String>,
    /// For pipeline and zero-shot: the model (an OpenAI-compatible endpoint's model name).
    #[arg(long)]
    pub model: Option<String>,
    #[command(flatten)]
    pub flags: super::ModelFlags,
    /// For pipeline: the review's model, JSON mode, the fix probe, the per-case budget and
    /// the tool protocol, as `reproduce` takes them.
    #[command(flatten)]
    pub pipeline: super::PipelineFlags,
    /// Replay the model calls of a previous run (its output directory): no network.
    #[arg(long, conflicts_with_all = ["model", "base_url"])]
    pub replay: Option<PathBuf>,
    /// Where the run's records go (default: .reproagent/bench/<adapter>-<unix time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Cases run at once.
    #[arg(long, short = 'j', default_value_t = 2)]
    pub jobs: usize,
    /// Where tests run: docker when the engine answers and the image is there, else local.
    #[arg(long, value_enum, default_value = "auto")]
    pub sandbox: super::reproduce::SandboxChoice,
    /// Docker image for the tests, when a case names none.
    #[arg(long)]
    pub image: Option<String>,
    /// `--python`, `--workdir`, `--activate` for cases whose `tests` name none.
    #[command(flatten)]
    pub env: super::EnvFlags,
    /// Seconds one test run may take, when a case says nothing.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub timeout: u64,
    /// Seconds an external command may take per case.
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub adapter_timeout: u64,
    /// Skip checking each case's gold test is fail-to-pass before scoring.
    #[arg(long)]
    pub no_verify: bool,
    /// Only these cases (repeatable).
    #[arg(long = "case")]
    pub cases: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterName {
    Pipeline,
    Keyfree,
    ZeroShot,
    Gold,
    Empty,
    Command,
}

/// Check case.json files and that each case's repository and patches are usable,
/// without running anything.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// A case directory, or a directory of them.
    #[arg(default_value = "fixtures/bench")]
    pub suite: PathBuf,
}

/// A Markdown table and a self-contained HTML page from one or more runs' records.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Run output directories (or their run.json files), compared side by side.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Write report.md and report.html here (default: print the Markdown).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Import SWE-bench / SWT-bench instances (a JSON array or JSON Lines file) as cases
/// over local checkouts: OUT/<instance_id>/ with case.json, issue.md, gold.patch and
/// test.patch. Instances that cannot be imported are reported and skipped.
#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("checkouts").required(true).args(["checkout", "repos"])))]
pub struct ImportArgs {
    /// The instances: a JSON array or one JSON object a line.
    pub file: PathBuf,
    /// One checkout of the repository, for every instance.
    #[arg(long)]
    pub checkout: Option<PathBuf>,
    /// A directory of checkouts, each named owner__name or name.
    #[arg(long)]
    pub repos: Option<PathBuf>,
    /// Where the cases go (default: .reproagent/bench/swt-<file name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// A run's candidate tests as SWT-bench predictions: one object per case with a
/// candidate, {"instance_id", "model_name_or_path", "model_patch"}.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The run's output directory (or its run.json).
    pub run: PathBuf,
    /// The predictions' model_name_or_path (default: reproagent-<adapter>[-<model>]).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Write the predictions here (default: print them).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: ExportFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    Jsonl,
    Json,
}

/// Cases from a git history: commits that change code and tests, the tests failing
/// before the change and passing after it. Writes OUT/<id>/ per case and OUT/mine.json
/// (the count each stage kept, and every dropped commit with the reason).
#[derive(Args, Debug)]
pub struct MineArgs {
    /// The git repository.
    pub repo: PathBuf,
    /// Where the cases go (default: .reproagent/bench/mined-<repository name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Non-merge commits looked at, newest first.
    #[arg(long, default_value_t = 200)]
    pub max_commits: usize,
    /// Most code files a fix may change.
    #[arg(long, default_value_t = 5)]
    pub max_files: usize,
    /// Most code lines (added plus removed) a fix may change.
    #[arg(long, default_value_t = 200)]
    pub max_lines: usize,
    /// A directory of issue texts (<number>.md or <number>.txt) for the issues commit
    /// messages reference (#123, Fixes #123).
    #[arg(long)]
    pub issues: Option<PathBuf>,
    /// Keep cases without running their tests (no fail-to-pass check).
    #[arg(long)]
    pub no_verify: bool,
    /// Where tests run: docker when the engine answers and the image is there, else local.
    #[arg(long, value_enum, default_value = "auto")]
    pub sandbox: super::reproduce::SandboxChoice,
    /// Docker image for the tests.
    #[arg(long)]
    pub image: Option<String>,
    /// Seconds one test run may take.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub timeout: u64,
}

pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    match args.command {
        BenchCommand::Run(a) => {
            // Before any thread exists: Ctrl-C removes the containers, kills the process
            // groups and deletes the copies of every case in flight, then exits 130.
            crate::sandbox::interrupt::install().map_err(|e| anyhow::anyhow!("installing the Ctrl-C handler: {e}"))?;
            let r = run_bench(*a);
            crate::sandbox::interrupt::wait_if_interrupted();
            r
        }
        BenchCommand::Validate(a) => validate(a),
        BenchCommand::Report(a) => report(a).map(|_| 0),
        BenchCommand::Import(a) => import(a),
        BenchCommand::Export(a) => export(a).map(|_| 0),
        BenchCommand::Mine(a) => mine(a).map(|_| 0),
        BenchCommand::Localize(a) => {
            crate::sandbox::interrupt::install().map_err(|e| anyhow::anyhow!("installing the Ctrl-C handler: {e}"))?;
            let r = localize(a);
            crate::sandbox::interrupt::wait_if_interrupted();
            r.map(|_| 0)
        }
    }
}

fn rank_cell(r: Option<usize>) -> String {
    r.map(|r| r.to_string()).unwrap_or_else(|| format!(">{}", bench::localize::DEPTH))
}

fn localize(a: LocalizeArgs) -> anyhow::Result<()> {
    if !a.cases.exists() {
        return Err(super::with_hint(
            format!("cases directory {} does not exist", a.cases.display()),
            Some("give a case directory or a directory of them (reproagent bench import makes them)"),
        ));
    }
    let json = a.json;
    let show = |r: &bench::localize::CaseRanks| {
        if json || crate::sandbox::interrupt::interrupted() {
            return;
        }
        match &r.error {
            Some(e) => eprintln!("{}: not measured: {e}", r.case_id),
            None => eprintln!(
                "{}: localize {}, bm25 {} ({:.2} s; top: {} | {})",
                r.case_id,
                rank_cell(r.localize_rank),
                rank_cell(r.bm25_rank),
                r.localize_secs,
                r.localize_top.as_deref().unwrap_or("-"),
                r.bm25_top.as_deref().unwrap_or("-")
            ),
        }
    };
    let ranks = bench::localize::run(&a.cases, &a.only, &show)
        .map_err(|e| super::with_hint(format!("{}: {e}", a.cases.display()), Some("give a readable case directory")))?;
    if ranks.is_empty() {
        return Err(super::with_hint(
            format!("no cases under {}", a.cases.display()),
            Some("a case is a directory with a case.json; check --case"),
        ));
    }
    let s = bench::localize::summarize(&ranks);
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "cases": ranks, "summary": s }))?);
    } else {
        println!("gold file rank over {} measured case(s) of {}:", s.measured, s.cases);
        println!("  localize: rank 1 {}, top 5 {}, top 10 {}", s.localize.top1, s.localize.top5, s.localize.top10);
        println!("  bm25:     rank 1 {}, top 5 {}, top 10 {}", s.bm25.top1, s.bm25.top5, s.bm25.top10);
        println!("  slowest localization: {:.2} s", s.max_localize_secs);
    }
    Ok(())
}

fn err(e: bench::BenchError) -> anyhow::Error {
    super::with_hint(e.to_string(), e.hint())
}

fn model_err(e: ModelError) -> anyhow::Error {
    super::with_hint(e.to_string(), e.hint().as_deref())
}

fn run_bench(a: RunArgs) -> anyhow::Result<i32> {
    if !a.suite.exists() {
        return Err(super::with_hint(
            format!("suite {} does not exist", a.suite.display()),
            Some("give a case directory or a directory of them"),
        ));
    }
    // A bad --python stops the run before any case; the cases' own are checked per case.
    if let Some(p) = &a.env.python {
        let e = crate::sandbox::env::resolve_cached(&a.suite, Some(p), crate::sandbox::env::PythonSource::Flag)
            .map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
        eprintln!("environment: python {}", e.python.describe());
    }
    let uses_model = matches!(a.adapter, AdapterName::Pipeline | AdapterName::ZeroShot);
    let p = &a.pipeline;
    let pipeline_only = p.no_probe
        || p.no_json_mode
        || p.max_calls.is_some()
        || p.max_cost.is_some()
        || p.tool_protocol != super::ProtocolArg::Auto;
    if pipeline_only && a.adapter != AdapterName::Pipeline {
        return Err(super::with_hint(
            format!("--adapter {:?} takes none of the pipeline's flags", a.adapter).to_lowercase(),
            Some("--no-probe, --no-json-mode, --max-calls, --max-cost and --tool-protocol are for --adapter pipeline"),
        ));
    }
    let (source, info) = if !uses_model {
        if a.model.is_some() || a.replay.is_some() {
            return Err(super::with_hint(
                format!("--adapter {:?} uses no model", a.adapter).to_lowercase(),
                Some("drop --model and --replay"),
            ));
        }
        (ModelSource::None, None)
    } else if let Some(dir) = &a.replay {
        // The model's description comes from any one of the run's cassettes.
        let info =
            first_cassette(dir).map(|p| Replayer::open(&p).map(|r| r.describe())).transpose().map_err(model_err)?;
        let info = info.ok_or_else(|| {
            super::with_hint(
                format!("{}: no cases/*/cassette.jsonl to replay", dir.display()),
                Some("give the output directory of a recorded bench run"),
            )
        })?;
        (
            ModelSource::Replay(dir.clone()),
            Some(ModelInfo { endpoint_host: format!("replay:{}", dir.display()), ..info }),
        )
    } else {
        let Some(name) = &a.model else {
            return Err(super::with_hint(
                format!("--adapter {:?} needs a model", a.adapter).to_lowercase(),
                Some("give --model NAME (and --base-url), or --replay RUN"),
            ));
        };
        let config = resolve_from_process(&a.flags.overrides(name), std::path::Path::new(".")).map_err(model_err)?;
        if a.adapter == AdapterName::Pipeline {
            a.pipeline.check_price(&config)?;
        }
        let http: Arc<dyn ChatModel> = Arc::new(HttpModel::new(config));
        let info = http.describe();
        (ModelSource::Live(http), Some(info))
    };
    let adapter: Box<dyn Adapter> = match (a.adapter, info) {
        (AdapterName::Gold, _) => Box::new(adapter::Gold),
        (AdapterName::Empty, _) => Box::new(adapter::Empty),
        (AdapterName::Keyfree, _) => Box::new(adapter::KeyFree),
        (AdapterName::Command, _) => Box::new(adapter::External {
            command: a.command.clone().unwrap_or_default(),
            timeout: Duration::from_secs(a.adapter_timeout),
        }),
        (AdapterName::Pipeline, Some(model)) => {
            Box::new(adapter::Pipeline { model, options: a.pipeline.options(std::path::Path::new("."))? })
        }
        (AdapterName::ZeroShot, Some(model)) => Box::new(adapter::ZeroShot { model, hits: 5 }),
        (AdapterName::Pipeline | AdapterName::ZeroShot, None) => {
            anyhow::bail!("--adapter {:?} needs a model", a.adapter)
        }
    };
    let name = adapter.info().name;
    let out = a.out.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        state_bench_dir().join(format!("{name}-{t}"))
    });
    let opts = BenchOptions {
        suite: a.suite.clone(),
        out: out.clone(),
        jobs: a.jobs.max(1),
        scorer: Scorer { env: a.env.options(), ..scorer(a.sandbox, a.image.clone(), a.timeout) },
        verify: !a.no_verify,
        only: a.cases.clone(),
        model: source,
    };
    let json = a.json;
    let show = |r: &CaseResult| {
        // After Ctrl-C a case failing under the cleanup is no result: say nothing.
        if !json && !crate::sandbox::interrupt::interrupted() {
            eprintln!("{}", case_line(r));
        }
    };
    let record = bench::run::run(adapter.as_ref(), &opts, &show).map_err(err)?;
    let s = summarize(&record);
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "out": out, "summary": s }))?);
    } else {
        let t = &s.total;
        println!(
            "{name}: fail-to-pass {}/{} ({:.0}%), fail-before {}/{}, invalid cases {}, adapter errors {}, cost ${:.4}, {} model calls, {:.1} s",
            t.fail_to_pass,
            t.judged(),
            100.0 * t.fail_to_pass_rate(),
            t.fail_before,
            t.judged(),
            t.invalid,
            t.adapter_errors,
            t.cost_usd,
            t.model_calls,
            record.wall_secs
        );
        println!("records: {}/run.json (report: reproagent bench report {})", out.display(), out.display());
    }
    Ok(0)
}

fn case_line(r: &CaseResult) -> String {
    let verdict = match r.status {
        CaseStatus::Scored if r.fail_to_pass => "fail-to-pass".to_string(),
        CaseStatus::Scored => format!(
            "not fail-to-pass (before {}, after {})",
            r.before.as_ref().map_or("-", |b| b.status.as_str()),
            r.after.as_ref().map_or("-", |b| b.status.as_str())
        ),
        CaseStatus::Invalid => "invalid case".into(),
        CaseStatus::AdapterError => "adapter error".into(),
    };
    let why = match (r.status, &r.reason) {
        (CaseStatus::Scored, _) | (_, None) => String::new(),
        (_, Some(m)) => format!(": {m}"),
    };
    format!("{:<28} {verdict}{why} ({:.1} s)", r.case_id, r.wall_secs)
}

fn first_cassette(dir: &std::path::Path) -> Option<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join("cases"))
        .ok()?
        .flatten()
        .map(|e| e.path().join("cassette.jsonl"))
        .filter(|p| p.exists())
        .collect();
    paths.sort();
    paths.into_iter().next()
}

fn validate(a: ValidateArgs) -> anyhow::Result<i32> {
    let cases = case::load_suite(&a.suite).map_err(|e| anyhow::anyhow!("{}: {e}", a.suite.display()))?;
    if cases.is_empty() {
        return Err(super::with_hint(
            format!("no case under {}", a.suite.display()),
            Some("a case is a directory with a case.json"),
        ));
    }
    let mut bad = 0;
    for (dir, c) in &cases {
        let problem = match c {
            Err(e) => Some(e.to_string()),
            Ok(c) => c.check().err().map(|e| e.to_string()),
        };
        match problem {
            None => println!("ok   {}", dir.display()),
            Some(p) => {
                bad += 1;
                println!("bad  {}: {p}", dir.display());
            }
        }
    }
    println!("{} cases, {} bad", cases.len(), bad);
    Ok(if bad == 0 { 0 } else { 1 })
}

fn report(a: ReportArgs) -> anyhow::Result<()> {
    let records = a.runs.iter().map(|p| bench::run::load_record(p)).collect::<Result<Vec<_>, _>>().map_err(err)?;
    let md = bench::report::markdown(&records);
    match &a.out {
        None => print!("{md}"),
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            std::fs::write(dir.join("report.md"), &md)?;
            std::fs::write(dir.join("report.html"), bench::report::html(&records))?;
            println!("wrote {} and {}", dir.join("report.md").display(), dir.join("report.html").display());
        }
    }
    Ok(())
}

fn scorer(sandbox: super::reproduce::SandboxChoice, image: Option<String>, timeout_secs: u64) -> Scorer {
    let sandbox = match sandbox {
        super::reproduce::SandboxChoice::Auto => Choice::Auto,
        super::reproduce::SandboxChoice::Docker => Choice::Docker,
        super::reproduce::SandboxChoice::Local => Choice::Local,
    };
    Scorer { sandbox, image, timeout_secs, env: Default::default() }
}

fn import(a: ImportArgs) -> anyhow::Result<i32> {
    if !a.file.is_file() {
        return Err(super::with_hint(
            format!("{} does not exist", a.file.display()),
            Some("give a JSON or JSON Lines file of SWE-bench / SWT-bench instances"),
        ));
    }
    let checkouts = match (&a.checkout, &a.repos) {
        (Some(c), _) => swt::Checkouts::One(c.clone()),
        (None, Some(r)) => swt::Checkouts::Dir(r.clone()),
        (None, None) => {
            return Err(super::with_hint("no checkout given".into(), Some("give --checkout DIR or --repos DIR")))
        }
    };
    let dir = match &checkouts {
        swt::Checkouts::One(d) | swt::Checkouts::Dir(d) => d,
    };
    if !dir.is_dir() {
        return Err(super::with_hint(
            format!("{} is not a directory", dir.display()),
            Some("--checkout is a git checkout; --repos a directory of them named owner__name or name"),
        ));
    }
    let out = a.out.clone().unwrap_or_else(|| {
        let stem = a.file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "instances".into());
        state_bench_dir().join(format!("swt-{stem}"))
    });
    let r = swt::import(&a.file, &checkouts, &out).map_err(err)?;
    for s in &r.skipped {
        eprintln!("skipped {}: {}", s.instance, s.reason);
    }
    for i in &r.imported {
        println!("imported {} -> {}", i.instance_id, i.dir);
    }
    let total = r.imported.len() + r.skipped.len();
    println!("{} of {total} instances imported into {} ({} skipped)", r.imported.len(), out.display(), r.skipped.len());
    if r.imported.is_empty() {
        return Err(super::with_hint(
            format!("no instance of {} could be imported", a.file.display()),
            Some("see the reasons above"),
        ));
    }
    Ok(0)
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    let file = if a.run.is_dir() { a.run.join("run.json") } else { a.run.clone() };
    if !file.is_file() {
        return Err(super::with_hint(
            format!("{} does not exist", file.display()),
            Some("give the output directory of a `reproagent bench run`"),
        ));
    }
    let record = bench::run::load_record(&file).map_err(err)?;
    if !std::path::Path::new(&record.suite).exists() {
        eprintln!("warning: the run's suite {} is not here: instance ids are the case ids", record.suite);
    }
    let predictions = swt::export(&record, a.model_name.as_deref());
    let text = swt::render(&predictions, a.format == ExportFormat::Jsonl).map_err(err)?;
    match &a.out {
        None => print!("{text}"),
        Some(path) => {
            if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(d)?;
            }
            std::fs::write(path, text)?;
            eprintln!("wrote {} predictions to {}", predictions.len(), path.display());
        }
    }
    Ok(())
}

fn mine(a: MineArgs) -> anyhow::Result<()> {
    if !a.repo.is_dir() {
        return Err(super::with_hint(
            format!("{} is not a directory", a.repo.display()),
            Some("give a git repository"),
        ));
    }
    if mine::git(&a.repo, &["rev-parse", "--verify", "-q", "HEAD"]).is_err() {
        return Err(super::with_hint(
            format!("{} is not a git repository with commits", a.repo.display()),
            Some("give a directory inside a git work tree whose HEAD has history"),
        ));
    }
    if let Some(d) = a.issues.as_ref().filter(|d| !d.is_dir()) {
        return Err(super::with_hint(
            format!("--issues {} is not a directory", d.display()),
            Some("give a directory of <number>.md issue texts"),
        ));
    }
    let out = a.out.clone().unwrap_or_else(|| {
        let name = std::fs::canonicalize(&a.repo)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "repo".into());
        state_bench_dir().join(format!("mined-{name}"))
    });
    let opts = mine::MineOptions {
        repo: a.repo.clone(),
        out: out.clone(),
        max_commits: a.max_commits,
        max_files: a.max_files,
        max_lines: a.max_lines,
        issues: a.issues.clone(),
        verify: !a.no_verify,
        scorer: scorer(a.sandbox, a.image.clone(), a.timeout),
    };
    let r = mine::mine(&opts, &|line| eprintln!("{line}")).map_err(err)?;
    let mut rows = Vec::new();
    let mut before = None;
    for s in &r.stages {
        let lost = before.map(|b: usize| b.saturating_sub(s.kept)).unwrap_or(0);
        rows.push(vec![
            s.name.clone(),
            s.kept.to_string(),
            if before.is_some() { lost.to_string() } else { "-".into() },
        ]);
        before = Some(s.kept);
    }
    super::table::print(&["stage".to_string(), "kept".to_string(), "dropped".to_string()], &rows);
    println!(
        "{} cases in {} (stages and dropped commits: {})",
        r.cases.len(),
        out.display(),
        out.join("mine.json").display()
    );
    Ok(())
}

/// `.reproagent/bench/` under the current directory, the default home of bench outputs;
/// `.reproagent/` gets its `.gitignore` (a failure shows when OUT is written).
fn state_bench_dir() -> PathBuf {
    let _ = crate::store::ensure_state_dir(std::path::Path::new("."));
    crate::store::state_dir(std::path::Path::new("")).join("bench")
}
