//! `bench run`: one adapter over a suite, cases in parallel, every result recorded.
//!
//! The output directory holds `run.json` (the [`BenchRecord`]) and, per case,
//! `cases/<id>/`: `result.json`, the candidate as `candidate.patch`, the full test
//! results `before.json` and `after.json`, the model's `cassette.jsonl` (so the run can
//! be replayed offline with `--replay OUT`) and the adapter's own artifacts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::adapter::{Adapter, Metered, Workspace};
use super::case::{load_suite, Case};
use super::score::{cannot_run, gold_verdict, issue_expected, matches_issue, ScoreError, Scorer};
use super::{BenchError, BenchRecord, CaseResult, CaseStatus};
use crate::model::{ChatModel, Recorder, Replayer};

/// Where an adapter's model calls go.
#[derive(Clone)]
pub enum ModelSource {
    /// The adapter uses no model.
    None,
    /// A live model; each case's calls are recorded to `cases/<id>/cassette.jsonl`.
    Live(Arc<dyn ChatModel>),
    /// Replay a previous run's cassettes (its output directory): no network.
    Replay(PathBuf),
}

/// How a bench run goes.
#[derive(Clone)]
pub struct BenchOptions {
    pub suite: PathBuf,
    pub out: PathBuf,
    /// Cases run at once.
    pub jobs: usize,
    pub scorer: Scorer,
    /// Check each case's gold test is fail-to-pass before scoring the adapter on it.
    pub verify: bool,
    /// Only these case ids (all when empty).
    pub only: Vec<String>,
    pub model: ModelSource,
}

/// Run `adapter` over the suite. `on_case` sees each result as it is made.
pub fn run(
    adapter: &dyn Adapter,
    opts: &BenchOptions,
    on_case: &(dyn Fn(&CaseResult) + Sync),
) -> Result<BenchRecord, BenchError> {
    let started = Instant::now();
    let started_at =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut cases =
        load_suite(&opts.suite).map_err(|e| BenchError::io(format!("suite {}", opts.suite.display()), e))?;
    if !opts.only.is_empty() {
        cases.retain(|(dir, c)| {
            let id = c.as_ref().map(|c| c.id.clone()).unwrap_or_else(|_| dir_name(dir));
            opts.only.contains(&id)
        });
    }
    if cases.is_empty() {
        return Err(BenchError::Other(format!(
            "no case under {} (a case is a directory with a case.json)",
            opts.suite.display()
        )));
    }
    if adapter.uses_model() && matches!(opts.model, ModelSource::None) {
        return Err(BenchError::Other(format!(
            "adapter {} needs a model: give --model NAME or --replay RUN",
            adapter.info().name
        )));
    }
    std::fs::create_dir_all(opts.out.join("cases")).map_err(|e| BenchError::io(opts.out.display().to_string(), e))?;

    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<CaseResult>>> = Mutex::new(vec![None; cases.len()]);
    let jobs = opts.jobs.clamp(1, cases.len());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some((dir, loaded)) = cases.get(i) else { break };
                let r = run_case(adapter, opts, dir, loaded);
                let _ = write_json(&opts.out.join("cases").join(&r.case_id).join("result.json"), &r);
                on_case(&r);
                // A poisoned lock only means another worker panicked; its slot stays empty.
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    let cases: Vec<CaseResult> =
        results.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().flatten().collect();
    let salt = blake3::hash(crate::sandbox::new_session_id().as_bytes()).to_hex();
    let record = BenchRecord {
        run_id: format!("{started_at}-{}", &salt[..8]),
        started_at,
        reproagent_version: env!("CARGO_PKG_VERSION").into(),
        adapter: adapter.info(),
        suite: opts.suite.display().to_string(),
        sandbox: format!(
            "{} (image {})",
            match opts.scorer.sandbox {
                crate::sandbox::Choice::Auto => "auto",
                crate::sandbox::Choice::Docker => "docker",
                crate::sandbox::Choice::Local => "local",
            },
            opts.scorer.image.as_deref().unwrap_or("none given")
        ),
        environment: Some(harness_env(&opts.scorer.env)),
        jobs,
        wall_secs: started.elapsed().as_secs_f64(),
        cases,
    };
    write_json(&opts.out.join("run.json"), &record)?;
    Ok(record)
}

/// What the harness's options say about the environment (each case's own, resolved, is
/// in its result).
fn harness_env(o: &crate::sandbox::env::EnvOptions) -> String {
    let mut s = match &o.python {
        Some(p) => format!("python: --python {} unless a case names its tests.python", p.display()),
        None => "python: a case's tests.python, else looked up for each case (VIRTUAL_ENV, the case repository's virtualenv, poetry/pipenv/uv/hatch/conda, the system's)".into(),
    };
    if let Some(w) = &o.workdir {
        s.push_str(&format!("; docker: the tree over {w}"));
    }
    if let Some(a) = &o.activate {
        s.push_str(&format!("; docker: after `{a}`"));
    }
    s
}

fn dir_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "case".into())
}

fn write_json<T: serde::Serialize>(path: &Path, v: &T) -> Result<(), BenchError> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| BenchError::io(d.display().to_string(), e))?;
    }
    std::fs::write(path, serde_json::to_vec_pretty(v)?).map_err(|e| BenchError::io(path.display().to_string(), e))
}

fn blank(case_id: String, language: String) -> CaseResult {
    CaseResult {
        case_id,
        language,
        status: CaseStatus::Invalid,
        reason: None,
        fail_before: false,
        pass_after: false,
        fail_to_pass: false,
        matches_issue: None,
        before: None,
        after: None,
        test_patch: None,
        test_files: Vec::new(),
        claimed: None,
        probe: None,
        cost_usd: 0.0,
        model_calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        adapter_secs: 0.0,
        environment: None,
        wall_secs: 0.0,
    }
}

fn run_case(
    adapter: &dyn Adapter,
    opts: &BenchOptions,
    dir: &Path,
    loaded: &Result<Case, super::CaseError>,
) -> CaseResult {
    let started = Instant::now();
    let case = match loaded {
        Ok(c) => c,
        Err(e) => {
            let mut r = blank(dir_name(dir), "unknown".into());
            r.reason = Some(e.to_string());
            return r;
        }
    };
    let mut r = blank(case.id.clone(), case.language.clone());
    let out = opts.out.join("cases").join(&case.id);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| score_case(adapter, opts, case, &out, &mut r)));
    if res.is_err() {
        r.status = CaseStatus::AdapterError;
        r.reason = Some("the adapter panicked".into());
    }
    r.wall_secs = started.elapsed().as_secs_f64();
    r
}

fn score_case(adapter: &dyn Adapter, opts: &BenchOptions, case: &Case, out: &Path, r: &mut CaseResult) {
    let invalid = |r: &mut CaseResult, why: String| {
        r.status = CaseStatus::Invalid;
        r.reason = Some(why);
    };
    if let Err(e) = std::fs::create_dir_all(out) {
        return invalid(r, format!("{}: {e}", out.display()));
    }
    let issue = match case.issue() {
        Ok(t) => t,
        Err(e) => return invalid(r, e.to_string()),
    };
    // The case first: a broken case is no failure of the reproducer.
    let is_gold = adapter.info().name == "gold";
    if opts.verify && !is_gold && case.gold_test_patch.is_some() {
        if let Err(ScoreError::Case(m) | ScoreError::Candidate(m)) = opts.scorer.verify(case) {
            return invalid(r, m);
        }
    }
    let work = match opts.scorer.buggy(case) {
        Ok(t) => t,
        Err(ScoreError::Case(m) | ScoreError::Candidate(m)) => return invalid(r, m),
    };

    // The model for this case: recorded, or replayed.
    let model: Option<Box<dyn ChatModel>> = match &opts.model {
        ModelSource::None => None,
        ModelSource::Live(m) => match Recorder::create(&out.join("cassette.jsonl"), m.clone()) {
            Ok(rec) => Some(Box::new(rec)),
            Err(e) => return adapter_error(r, format!("cassette: {e}")),
        },
        ModelSource::Replay(dir) => match Replayer::open(&dir.join("cases").join(&case.id).join("cassette.jsonl")) {
            Ok(rep) => Some(Box::new(rep)),
            Err(e) => return adapter_error(r, format!("replay: {e}")),
        },
    };
    let metered = model.as_deref().map(Metered::new);
    // The case's environment: the adapter runs its tests where the scorer will.
    let (environment, env) = match opts.scorer.case_env(case) {
        Ok(x) => x,
        Err(ScoreError::Case(m) | ScoreError::Candidate(m)) => return invalid(r, m),
    };
    r.environment = Some(environment.python.describe());
    let ws = Workspace {
        case,
        issue: &issue,
        repo: work.path(),
        out,
        model: metered.as_ref().map(|m| m as &dyn ChatModel),
        sandbox: opts.scorer.sandbox,
        image: case.tests.image.clone().or_else(|| opts.scorer.image.clone()),
        environment: Some(environment),
        env,
        timeout_secs: case.tests.timeout_secs.unwrap_or(opts.scorer.timeout_secs),
    };
    let t = Instant::now();
    let produced = adapter.produce(&ws);
    r.adapter_secs = t.elapsed().as_secs_f64();
    if let Some(m) = &metered {
        let s = m.spend();
        r.model_calls = s.calls as u32;
        r.prompt_tokens = s.prompt_tokens;
        r.completion_tokens = s.completion_tokens;
        r.cost_usd = s.cost_usd;
    }
    let candidate = match produced {
        Ok(c) => c,
        Err(why) => return adapter_error(r, why),
    };
    r.claimed = candidate.claimed.clone();
    r.probe = candidate.probe.clone();
    let patch = candidate.as_patch(work.path());
    if !patch.trim().is_empty() {
        let _ = std::fs::write(out.join("candidate.patch"), &patch);
        r.test_patch = Some(patch);
    }
    drop(work);

    match opts.scorer.score(case, &candidate) {
        Ok(s) => {
            let _ = write_json(&out.join("before.json"), &s.before);
            let _ = write_json(&out.join("after.json"), &s.after);
            r.before = Some(s.before_summary());
            r.after = Some(s.after_summary());
            let unrunnable = cannot_run(&s);
            // The gold adapter's candidate IS the gold test, so its run is the case's check:
            // all of it when verifying; with --no-verify, only that the test can run at all.
            let broken_case = match (is_gold, opts.verify) {
                (true, true) => gold_verdict(&s).err().map(|(ScoreError::Case(m) | ScoreError::Candidate(m))| m),
                (true, false) => unrunnable.as_ref().map(|why| format!("the gold test cannot run: {why}")),
                (false, _) => None,
            };
            r.test_files = s.test_files.clone();
            if let Some(why) = broken_case {
                return invalid(r, why);
            }
            r.status = CaseStatus::Scored;
            r.fail_before = s.fail_before();
            r.pass_after = s.pass_after();
            r.fail_to_pass = r.fail_before && r.pass_after;
            r.matches_issue = matches_issue(issue_expected(&issue).as_ref(), &s.before);
            // Another reproducer's test that cannot run is its own failure; say so.
            r.reason = match (unrunnable, candidate.reason.clone()) {
                (Some(why), Some(said)) => Some(format!("the test cannot run: {why}; the reproducer said: {said}")),
                (Some(why), None) => Some(format!("the test cannot run: {why}")),
                (None, said) => said,
            };
        }
        Err(ScoreError::Case(m)) => invalid(r, m),
        // The gold test patch not applying is the case's fault, as `verify` has it.
        Err(ScoreError::Candidate(m)) if is_gold => invalid(r, format!("gold_test_patch: {m}")),
        Err(ScoreError::Candidate(m)) if candidate.test_files().is_empty() => {
            // Writing no test is a legitimate answer ("not reproduced"): it scores zero.
            r.status = CaseStatus::Scored;
            r.reason = Some(match &candidate.reason {
                Some(why) => format!("{m}: {why}"),
                None => m,
            });
        }
        Err(ScoreError::Candidate(m)) => adapter_error(r, m),
    }
}

fn adapter_error(r: &mut CaseResult, why: String) {
    r.status = CaseStatus::AdapterError;
    r.reason = Some(why);
}

/// Read a run's record back (`OUT/run.json`, or the file itself).
pub fn load_record(path: &Path) -> Result<BenchRecord, BenchError> {
    let file = if path.is_dir() { path.join("run.json") } else { path.to_path_buf() };
    let bytes = std::fs::read(&file).map_err(|e| BenchError::io(file.display().to_string(), e))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| BenchError::Other(format!("{}: not a bench run record: {e}", file.display())))
}
