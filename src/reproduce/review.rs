//! Past the paper's triple review: an independent review of an accepted test, and a fix
//! probe aimed at the pass half of fail-to-pass.
//!
//! - **Review** ([`review`]): its own conversation and system prompt (`prompts/review.md`),
//!   optionally another model on the endpoint (`--review-model`), given the issue, the
//!   root cause, the plan, the test's source and its full failure with the traceback,
//!   with the read-only retrieval tools to check a claim in the code. It answers through
//!   `submit_review` (or JSON in its text, in JSON mode when the endpoint takes it): a
//!   [`ReviewVerdict`] with findings in RepoMAS's shape (evidence, location, severity,
//!   suggestion), schema-checked like every artifact.
//! - **Fix probe** ([`probe`]): once the review accepts, a separate conversation
//!   (`prompts/probe.md`) proposes the smallest fix as exact-snippet edits
//!   (`propose_fix`). Each fix is applied in a fresh sandbox copy of the repository (never
//!   the user's tree), where the test must still fail without it and pass with it. The
//!   verdict is [`Probe::Passes`], [`Probe::Fails`] (no proposed fix made it pass, or
//!   the model judged that none can: the test asserts the buggy behaviour) or
//!   [`Probe::NoFix`]; the last fix becomes `probe.patch`, headed as an unverified
//!   suggestion.

use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::agent::{self, StageError, StageSpec, Trace, Verdict};
use super::{Expected, Probe, RootCause, TestPlan};
use crate::model::{excerpt, ChatModel, ToolSpec};
use crate::sandbox::runners::{TestResult, TestStatus};
use crate::sandbox::tools::{run_test, RunTestArgs};
use crate::sandbox::{self, Sandbox};
use crate::tools::{Registry, ToolContext};

pub const REVIEW_PROMPT: &str = include_str!("prompts/review.md");
pub const PROBE_PROMPT: &str = include_str!("prompts/probe.md");

/// Model calls one review may make (its own budget, within the run's).
pub const MAX_REVIEW_CALLS: u32 = 12;
/// Model calls one probe may make.
pub const MAX_PROBE_CALLS: u32 = 16;
/// Fixes one probe applies before it concludes that the test cannot pass.
pub const MAX_PROBE_FIXES: u32 = 2;
/// Times the probe may send a test back to generation; after that the test stands, with
/// the probe's verdict in the outcome.
pub const MAX_PROBE_RETURNS: u32 = 2;
/// Characters of the failure output the review sees.
const OUTPUT_CHARS: usize = 6_000;

/// The review's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Accept,
    Reject,
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Major,
    Minor,
}

/// One finding, in RepoMAS's shape.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReviewFinding {
    /// What shows the problem: a quote from the test, the failure or the code.
    pub evidence: String,
    /// Where: the test's line or the code's `path:line`.
    pub location: String,
    pub severity: Severity,
    /// What to change.
    pub suggestion: String,
}

/// The review's structured verdict (the arguments of `submit_review`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReviewVerdict {
    /// `accept`: the test reproduces the issue (its target, trigger and assertions match
    /// the report, and it fails for the reported reason); `reject` otherwise.
    pub verdict: Decision,
    /// Why; at least one finding with a rejection.
    #[serde(default)]
    pub findings: Vec<ReviewFinding>,
}

/// One review of the run, as `review.json` lists them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewRecord {
    /// The generation attempt whose test was reviewed.
    pub attempt: u32,
    #[serde(flatten)]
    pub verdict: ReviewVerdict,
}

fn check_verdict(v: &ReviewVerdict) -> Result<(), String> {
    if v.verdict == Decision::Reject && v.findings.is_empty() {
        return Err("a rejection needs at least one finding (evidence, location, severity, suggestion)".into());
    }
    if let Some(f) = v.findings.iter().find(|f| f.evidence.trim().is_empty() || f.suggestion.trim().is_empty()) {
        return Err(format!("the finding at {:?} has an empty evidence or suggestion", f.location));
    }
    Ok(())
}

/// The JSON schema of a type, as a tool's parameters.
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({"type": "object"}));
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    v
}

/// What the review and the probe are shown.
pub struct Evidence<'a> {
    pub issue: &'a str,
    pub cause: &'a RootCause,
    pub plan: &'a TestPlan,
    pub test_path: &'a str,
    pub test_code: &'a str,
    pub result: &'a TestResult,
    /// The sandbox's working directory, scrubbed from what the model sees.
    pub workdir: &'a str,
}

/// Output made stable for a prompt (and so for a cassette): the sandbox path, durations,
/// memory addresses and the runner's session header (interpreter and plugin versions)
/// replaced.
pub fn scrub(s: &str, workdir: &str) -> String {
    static PATTERNS: std::sync::OnceLock<Vec<(regex::Regex, &'static str)>> = std::sync::OnceLock::new();
    let p = PATTERNS.get_or_init(|| {
        [
            (r"(?m)^(platform|rootdir|plugins|cachedir|configfile|cwd)[: ].*\n?", ""),
            (r"duration_ms:?\s*[\d.]+", "duration_ms <t>"),
            (r"\b\d+(\.\d+)?\s?(ms|s|sec|seconds)\b", "<t>"),
            (r"0x[0-9a-fA-F]{6,}", "0x<addr>"),
            (r"/tmp/[A-Za-z0-9._-]+", "<tmp>"),
        ]
        .into_iter()
        .filter_map(|(re, with)| regex::Regex::new(re).ok().map(|r| (r, with)))
        .collect()
    });
    let mut out = if workdir.is_empty() { s.to_string() } else { s.replace(workdir, "<repo>") };
    for (re, with) in p.iter() {
        out = re.replace_all(&out, *with).into_owned();
    }
    out
}

/// The tail of a long text (a traceback ends where it matters).
fn tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    format!("[... {} characters before]\n{}", n - max, s.chars().skip(n - max).collect::<String>())
}

/// The failure as the review reads it: each failure's type and full message, and the
/// runner's output with the traceback.
pub fn failure_text(r: &TestResult, workdir: &str) -> String {
    let mut s = format!("status: {:?}, {} passed, {} failed\n", r.status, r.passed, r.failed);
    for f in r.failures.iter().take(5) {
        s.push_str(&format!(
            "\n### {}\n{}: {}\n",
            scrub(&f.name, workdir),
            f.kind.as_deref().unwrap_or("?"),
            scrub(&f.message, workdir)
        ));
    }
    if let Some(e) = &r.error {
        s.push_str(&format!("\nerror: {}\n", scrub(e, workdir)));
    }
    let out =
        [r.output.stdout.trim(), r.output.stderr.trim()].into_iter().filter(|x| !x.is_empty()).collect::<Vec<_>>();
    if !out.is_empty() {
        s.push_str(&format!("\n### Output\n```\n{}\n```\n", tail(&scrub(&out.join("\n"), workdir), OUTPUT_CHARS)));
    }
    s
}

fn expected_text(e: &Expected) -> String {
    format!("{}{}", e.kind, e.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())
}

/// Settings the review and probe share with the run.
pub struct Settings<'a> {
    pub json_mode: bool,
    pub review_model: Option<&'a str>,
    /// The evidence ledger, rendered.
    pub ledger: String,
}

/// The independent review of one test. `Err` only when the model call failed or the
/// run's budget is spent; a review that breaks the protocol is a rejection that says so.
pub fn review(
    model: &dyn ChatModel,
    ctx: &ToolContext,
    registry: &Registry,
    trace: &mut Trace,
    settings: &Settings,
    ev: &Evidence,
) -> Result<ReviewVerdict, StageError> {
    let cause = serde_json::to_string_pretty(ev.cause).unwrap_or_default();
    let plan = serde_json::to_string_pretty(ev.plan).unwrap_or_default();
    let user = format!(
        "## Issue report\n\n{}\n\n## Root cause (from root-cause analysis)\n\n```json\n{cause}\n```\n\n## Test plan\n\n```json\n{plan}\n```\n\nThe failure the test must show today: {}\n\n## The test, `{}`\n\n```\n{}\n```\n\n## Its run today\n\n{}\n{}",
        ev.issue.trim(),
        expected_text(&ev.plan.expected),
        ev.test_path,
        ev.test_code,
        failure_text(ev.result, ev.workdir),
        settings.ledger,
    );
    let mut spec = StageSpec::new(
        "review",
        REVIEW_PROMPT.to_string(),
        user,
        registry,
        ToolSpec::new(
            "submit_review",
            "Submit the review's verdict: accept or reject, with findings (evidence, location, severity, suggestion).",
            schema_of::<ReviewVerdict>(),
        ),
    );
    spec.max_calls = trace.calls_in("review") + MAX_REVIEW_CALLS;
    spec.json_mode = settings.json_mode;
    spec.model = settings.review_model.map(str::to_string);
    let r = agent::run_stage(model, ctx, &spec, trace, |v, _| {
        match serde_json::from_value::<ReviewVerdict>(v).map_err(|e| e.to_string()) {
            Ok(verdict) => match check_verdict(&verdict) {
                Ok(()) => Verdict::Accept(verdict),
                Err(m) => Verdict::Invalid(m),
            },
            Err(m) => Verdict::Invalid(m),
        }
    });
    match r {
        Ok(v) => Ok(v),
        Err(e @ (StageError::Model(_) | StageError::Spent(_))) => Err(e),
        Err(e) => Ok(ReviewVerdict {
            verdict: Decision::Reject,
            findings: vec![ReviewFinding {
                evidence: excerpt(&e.to_string(), 300),
                location: "review".into(),
                severity: Severity::Major,
                suggestion: "the review gave no valid verdict; make the test's target and assertions plain".into(),
            }],
        }),
    }
}

/// One edit of a proposed fix: replace one exact, unique snippet of a file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FileEdit {
    /// The file, relative to the repository root (the code under test, never the test).
    pub path: String,
    /// The exact text to replace: it must occur once in the file.
    pub search: String,
    /// What replaces it.
    pub replace: String,
}

/// The arguments of `propose_fix`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FixProposal {
    /// The smallest edits that fix the bug the issue reports.
    #[serde(default)]
    pub edits: Vec<FileEdit>,
    /// Why they fix it.
    #[serde(default)]
    pub rationale: String,
    /// Instead of edits: why no plausible fix can make this test pass (it asserts the
    /// buggy behaviour, or a value no fix gives).
    #[serde(default)]
    pub test_cannot_pass: Option<String>,
}

/// One fix the probe applied, and what the test did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FixTrial {
    pub edits: Vec<FileEdit>,
    pub rationale: String,
    /// The test's status in the fresh copy, without and with the fix.
    pub without_fix: TestStatus,
    pub with_fix: TestStatus,
    /// The first failure with the fix, when it still fails.
    #[serde(default)]
    pub failure: Option<String>,
    /// The fix as a unified diff.
    pub patch: String,
}

/// The probe's record (`probe.json` holds every probe of the run).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Of the test written on this generation attempt.
    pub attempt: u32,
    pub verdict: Probe,
    /// Why, in a sentence.
    pub reason: String,
    pub trials: Vec<FixTrial>,
}

impl ProbeReport {
    /// The last fix tried, as the run's `probe.patch`, headed as a suggestion.
    pub fn patch_file(&self) -> Option<String> {
        let t = self.trials.last()?;
        let verdict = if t.with_fix == TestStatus::Passed {
            "with it, the reproduction test passed in a sandbox copy (and failed without it)"
        } else {
            "with it, the reproduction test still failed in a sandbox copy"
        };
        Some(format!(
            "UNVERIFIED suggestion: a fix the model proposed to probe the reproduction test, not a reviewed patch.\n{verdict}.\nRationale: {}\n\n{}",
            t.rationale.trim(),
            t.patch
        ))
    }
}

/// Where the probe runs: the run's sandbox choice and configuration, fresh copies each.
pub struct ProbeRuntime<'a> {
    pub rt: &'a tokio::runtime::Runtime,
    pub choice: sandbox::Choice,
    pub config: &'a dyn Fn() -> sandbox::SandboxConfig,
    pub framework: &'a str,
    pub timeout_secs: u64,
    pub repo: &'a Path,
}

fn safe_rel(p: &str) -> bool {
    let path = Path::new(p);
    !p.trim().is_empty()
        && path.is_relative()
        && path.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
}

/// Apply `fix` in a fresh sandbox copy with the test: the test's status without the fix,
/// then with it. `Err(message)` for a fix that does not apply (it goes back to the model),
/// `Ok(None)`'s error string for a broken sandbox.
fn trial(
    pr: &ProbeRuntime,
    test_path: &str,
    test_code: &str,
    fix: &FixProposal,
) -> Result<Result<(TestResult, TestResult, String), String>, String> {
    let opened = pr
        .rt
        .block_on(sandbox::open(pr.choice, (pr.config)()))
        .map_err(|e| format!("the probe's sandbox failed to open: {e}"))?;
    let sb: Arc<dyn Sandbox> = Arc::from(opened.sandbox);
    let run = |sb: &Arc<dyn Sandbox>| {
        pr.rt.block_on(run_test(
            sb.as_ref(),
            pr.repo,
            &RunTestArgs {
                file: test_path.to_string(),
                test: None,
                framework: Some(pr.framework.to_string()),
                command: None,
                timeout_secs: pr.timeout_secs,
            },
        ))
    };
    type Trial = Result<(TestResult, TestResult, String), String>;
    let result = (|| -> Result<Trial, String> {
        pr.rt.block_on(sb.write_file(test_path, test_code.as_bytes())).map_err(|e| e.to_string())?;
        let without = run(&sb).map_err(|e| format!("running the test without the fix: {e}"))?;
        // Edits to one file apply in order; every search must be found once.
        let mut files: Vec<(String, String, String)> = Vec::new();
        for (i, e) in fix.edits.iter().enumerate() {
            let current = match files.iter().position(|f| f.0 == e.path) {
                Some(k) => files[k].2.clone(),
                None => match pr.rt.block_on(sb.read_file(&e.path)) {
                    Ok(b) => {
                        let text = String::from_utf8_lossy(&b).into_owned();
                        files.push((e.path.clone(), text.clone(), text.clone()));
                        text
                    }
                    Err(err) => return Ok(Err(format!("edit {}: {} cannot be read: {err}", i + 1, e.path))),
                },
            };
            let n = current.matches(e.search.as_str()).count();
            if n != 1 {
                return Ok(Err(format!(
                    "edit {}: the `search` text occurs {n} times in {} (it must occur exactly once; copy it from the file)",
                    i + 1,
                    e.path
                )));
            }
            let k = files.iter().position(|f| f.0 == e.path).unwrap_or(0);
            files[k].2 = current.replacen(e.search.as_str(), &e.replace, 1);
        }
        let mut patch = String::new();
        for (path, old, new) in &files {
            pr.rt.block_on(sb.write_file(path, new.as_bytes())).map_err(|e| e.to_string())?;
            patch.push_str(&unified_diff(path, old, new));
        }
        let with = run(&sb).map_err(|e| format!("running the test with the fix: {e}"))?;
        Ok(Ok((without, with, patch)))
    })();
    let _ = pr.rt.block_on(sb.close());
    result
}

/// The fix probe of an accepted test. `Err` only for a failed model call, a spent budget
/// or a broken sandbox.
#[allow(clippy::too_many_arguments)]
pub fn probe(
    model: &dyn ChatModel,
    ctx: &ToolContext,
    registry: &Registry,
    trace: &mut Trace,
    settings: &Settings,
    ev: &Evidence,
    pr: &ProbeRuntime,
    attempt: u32,
) -> Result<ProbeReport, StageError> {
    let cause = serde_json::to_string_pretty(ev.cause).unwrap_or_default();
    let user = format!(
        "## Issue report\n\n{}\n\n## Root cause (from root-cause analysis)\n\n```json\n{cause}\n```\n\n## The reproduction test, `{}`\n\n```\n{}\n```\n\n## Its run today\n\n{}\n{}",
        ev.issue.trim(),
        ev.test_path,
        ev.test_code,
        failure_text(ev.result, ev.workdir),
        settings.ledger,
    );
    let mut spec = StageSpec::new(
        "probe",
        PROBE_PROMPT.to_string(),
        user,
        registry,
        ToolSpec::new(
            "propose_fix",
            "Propose the smallest fix of the code under test (exact-snippet edits), or say why no plausible fix can make the test pass. The fix is applied in a sandbox copy and the test run with it.",
            schema_of::<FixProposal>(),
        ),
    );
    spec.max_calls = trace.calls_in("probe") + MAX_PROBE_CALLS;
    let mut trials: Vec<FixTrial> = Vec::new();
    let mut broke: Option<String> = None;
    let r = agent::run_stage(model, ctx, &spec, trace, |v, _| {
        let fix: FixProposal = match serde_json::from_value(v) {
            Ok(f) => f,
            Err(e) => return Verdict::Invalid(e.to_string()),
        };
        if let Some(why) = fix.test_cannot_pass.as_deref().filter(|w| !w.trim().is_empty()) {
            return Verdict::Accept((
                Probe::Fails,
                format!("the probe judged that no plausible fix can make the test pass: {why}"),
            ));
        }
        if fix.edits.is_empty() {
            let why = if fix.rationale.trim().is_empty() { "no reason given".into() } else { fix.rationale.clone() };
            return Verdict::Accept((Probe::NoFix, format!("the probe proposed no fix: {why}")));
        }
        if let Some(e) = fix.edits.iter().find(|e| !safe_rel(&e.path) || e.search.is_empty()) {
            return Verdict::Invalid(format!(
                "edit of {:?}: `path` must be relative to the repository root, `search` non-empty",
                e.path
            ));
        }
        if fix.edits.iter().any(|e| Path::new(&e.path) == Path::new(ev.test_path)) {
            return Verdict::Invalid("the fix edits the reproduction test: fix the code under test instead".into());
        }
        let (without, with, patch) = match trial(pr, ev.test_path, ev.test_code, &fix) {
            Ok(Ok(t)) => t,
            Ok(Err(m)) => return Verdict::Invalid(m),
            Err(m) => {
                broke = Some(m.clone());
                return Verdict::Stop(m);
            }
        };
        let first = |r: &TestResult| {
            r.failures
                .first()
                .map(|f| {
                    format!("{}: {}", f.kind.as_deref().unwrap_or("?"), excerpt(&scrub(&f.message, ev.workdir), 300))
                })
                .or_else(|| r.error.as_deref().map(|e| excerpt(&scrub(e, ev.workdir), 300)))
        };
        trials.push(FixTrial {
            edits: fix.edits.clone(),
            rationale: fix.rationale.clone(),
            without_fix: without.status,
            with_fix: with.status,
            failure: first(&with),
            patch,
        });
        if without.status != TestStatus::Failed {
            return Verdict::Accept((
                Probe::Fails,
                format!("in a fresh copy the test did not fail without the fix ({:?})", without.status),
            ));
        }
        if with.status == TestStatus::Passed {
            return Verdict::Accept((
                Probe::Passes,
                "with the probe's fix the test passes, and without it the test fails".into(),
            ));
        }
        let still = first(&with).unwrap_or_else(|| format!("{:?}", with.status));
        if trials.len() as u32 >= MAX_PROBE_FIXES {
            return Verdict::Accept((
                Probe::Fails,
                format!("with each of {} proposed fixes the test still fails; the last: {still}", trials.len()),
            ));
        }
        Verdict::Feedback(agent::bounded(&json!({
            "applied": true,
            "without_fix": without.status,
            "with_fix": with.status,
            "failure_with_fix": still,
            "next": "The test still fails with this fix. If the fix is wrong, call propose_fix with a better one; if no plausible fix can make this test pass (it asserts the buggy behaviour, or a value no fix gives), call propose_fix with `test_cannot_pass` saying why.",
        })))
    });
    let (verdict, reason) = match r {
        Ok(v) => v,
        Err(e @ (StageError::Model(_) | StageError::Spent(_))) => return Err(e),
        Err(e) if broke.is_some() => return Err(e),
        Err(e) => (Probe::NoFix, format!("the probe ended without a verdict: {e}")),
    };
    Ok(ProbeReport { attempt, verdict, reason, trials })
}

/// A unified diff of one file (`a/` and `b/` prefixes, `-p1`): one hunk around the
/// changed lines, with three lines of context.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a.iter().rev().zip(b.iter().rev()).take(max_suffix).take_while(|(x, y)| x == y).count();
    if prefix == a.len() && prefix == b.len() {
        return String::new();
    }
    let ctx = 3;
    let start = prefix.saturating_sub(ctx);
    let a_end = (a.len() - suffix + ctx).min(a.len());
    let b_end = (b.len() - suffix + ctx).min(b.len());
    let mut s = format!("--- a/{path}\n+++ b/{path}\n");
    let (a_len, b_len) = (a_end - start, b_end - start);
    let at = |n: usize| if n == 0 { start } else { start + 1 };
    s.push_str(&format!("@@ -{},{a_len} +{},{b_len} @@\n", at(a_len), at(b_len)));
    for l in &a[start..prefix] {
        s.push_str(&format!(" {l}\n"));
    }
    for l in &a[prefix..a.len() - suffix] {
        s.push_str(&format!("-{l}\n"));
    }
    for l in &b[prefix..b.len() - suffix] {
        s.push_str(&format!("+{l}\n"));
    }
    for l in &a[a.len() - suffix..a_end] {
        s.push_str(&format!(" {l}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_has_one_hunk_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\n";
        let d = unified_diff("x.py", old, new);
        assert_eq!(d, "--- a/x.py\n+++ b/x.py\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n");
        assert_eq!(unified_diff("x.py", old, old), "");
        let d = unified_diff("y.py", "x\n", "x\ny\n");
        assert_eq!(d, "--- a/y.py\n+++ b/y.py\n@@ -1,1 +1,2 @@\n x\n+y\n");
    }

    #[test]
    fn a_rejection_needs_findings() {
        let v: ReviewVerdict = serde_json::from_value(json!({"verdict": "reject"})).unwrap();
        assert!(check_verdict(&v).unwrap_err().contains("at least one finding"));
        assert!(serde_json::from_value::<ReviewVerdict>(json!({"verdict": "maybe"})).is_err());
        let v: ReviewVerdict = serde_json::from_value(json!({"verdict": "accept"})).unwrap();
        assert!(check_verdict(&v).is_ok());
    }

    #[test]
    fn scrubbing_makes_output_stable() {
        assert_eq!(
            scrub("/tmp/sb1/t.py failed in 0.03s at 0x7f3a9c2d1e80", "/tmp/sb1"),
            "<repo>/t.py failed in <t> at 0x<addr>"
        );
        assert_eq!(
            scrub("platform linux -- Python 3.11\nrootdir: /x\n1 failed\n# duration_ms 4.5\n", ""),
            "1 failed\n# duration_ms <t>\n"
        );
    }
}
