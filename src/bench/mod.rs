//! The bench harness: scores reproducers on real cases, the same way for every one.
//!
//! After OpenRE-Bench: one case contract ([`case`]), one adapter per reproducer behind
//! one trait ([`adapter`]), one metric suite computed in the sandbox ([`score`]), run
//! records with provenance from which every report is recomputed ([`BenchRecord`],
//! [`summarize`], [`report`]), SWT-bench import and export ([`swt`]), and a mining
//! pipeline with per-stage counts ([`mine`]).
//!
//! A candidate test is scored by running it on the buggy tree and again after the
//! gold code patch: it *fails before* when the run does not pass, *passes after* when
//! every test in it passes, and is *fail-to-pass* when both hold. A case that cannot be
//! scored (its repository is missing, its gold patch does not apply, its gold test cannot
//! run at all: it errors before and after the gold patch) is counted apart as `invalid`,
//! never as a failure of the reproducer; an adapter that breaks is counted apart as
//! `adapter_error`.

pub mod adapter;
pub mod case;
pub(crate) mod localize;
pub(crate) mod mine;
pub mod report;
pub mod run;
pub mod score;
pub(crate) mod swt;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use case::{Case, CaseError, TestSpec};

/// The record of one bench run: everything a report needs, and the provenance that
/// makes it comparable. Written as `run.json` in the run's output directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRecord {
    /// Unique id of the run (sortable by time).
    pub run_id: String,
    /// Unix seconds when the run started.
    pub started_at: u64,
    pub reproagent_version: String,
    pub adapter: AdapterInfo,
    /// The suite directory the cases came from.
    pub suite: String,
    /// Which sandbox scored the tests, and why.
    pub sandbox: String,
    /// The harness's environment (`--python`, `--workdir`, `--activate`), and why it was
    /// chosen; each case's own is in its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Cases run at once.
    pub jobs: usize,
    pub wall_secs: f64,
    pub cases: Vec<CaseResult>,
}

/// Which reproducer ran, with what settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AdapterInfo {
    /// `pipeline`, `keyfree`, `zero-shot`, `gold`, `empty`, `command`.
    pub name: String,
    /// The model (None for adapters that use none).
    pub model: Option<String>,
    /// The endpoint's host (never its key), or `replay:<dir>` for an offline replay.
    pub endpoint: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
    /// The external command, for `command`.
    pub command: Option<String>,
}

/// How a case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseStatus {
    /// The candidate was run before and after the gold patch.
    Scored,
    /// The case itself is broken (repository missing, patch does not apply, the gold test
    /// cannot run before or after the fix): counted apart, not held against the reproducer.
    Invalid,
    /// The adapter failed to produce a candidate (crash, timeout, bad output).
    AdapterError,
}

/// A test run summarised: enough to score and to show.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunSummary {
    /// `passed`, `failed` or `errored` (the runner's structured status).
    pub status: String,
    pub passed: u32,
    pub failed: u32,
    /// The first failure, `Kind: message` on one line.
    pub failure: Option<String>,
    /// For `errored`: what went wrong.
    pub error: Option<String>,
}

/// The result of one adapter on one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub case_id: String,
    /// `python`, `typescript` or `java`.
    pub language: String,
    pub status: CaseStatus,
    /// Why the case is invalid or the adapter failed; what the adapter said otherwise.
    pub reason: Option<String>,
    pub fail_before: bool,
    pub pass_after: bool,
    pub fail_to_pass: bool,
    /// Whether the failure before the fix matches the issue's reported error. None when
    /// the issue reports no error type to match.
    pub matches_issue: Option<bool>,
    pub before: Option<RunSummary>,
    pub after: Option<RunSummary>,
    /// The candidate: the test files it adds or changes, as a unified diff.
    pub test_patch: Option<String>,
    /// The files of the candidate that were run as tests.
    pub test_files: Vec<String>,
    /// The adapter's own verdict (`reproduced`, `not reproduced`...), when it gives one.
    pub claimed: Option<String>,
    /// The pipeline's fix probe on its test: `passes`, `fails` or `no_fix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    pub cost_usd: f64,
    pub model_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Seconds the adapter took, and the whole case (adapter and scoring).
    pub adapter_secs: f64,
    pub wall_secs: f64,
    /// The Python environment the case's tests ran in, and why it was chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
}

/// Counts and rates for one slice of a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Tally {
    /// Cases in the slice.
    pub cases: usize,
    /// Of which scored (the rates' denominator).
    pub scored: usize,
    pub invalid: usize,
    pub adapter_errors: usize,
    pub fail_to_pass: usize,
    pub fail_before: usize,
    /// Scored cases where the issue reports an error type, and of those, how many failed with it.
    pub matches_issue: usize,
    pub matchable: usize,
    pub cost_usd: f64,
    pub model_calls: u64,
    pub wall_secs: f64,
}

impl Tally {
    fn add(&mut self, c: &CaseResult) {
        self.cases += 1;
        match c.status {
            CaseStatus::Scored => self.scored += 1,
            CaseStatus::Invalid => self.invalid += 1,
            CaseStatus::AdapterError => self.adapter_errors += 1,
        }
        // An adapter error counts against the reproducer: it is in the denominator.
        if c.status != CaseStatus::Invalid {
            self.fail_to_pass += c.fail_to_pass as usize;
            self.fail_before += c.fail_before as usize;
            if let Some(m) = c.matches_issue {
                self.matchable += 1;
                self.matches_issue += m as usize;
            }
        }
        self.cost_usd += c.cost_usd;
        self.model_calls += c.model_calls as u64;
        self.wall_secs += c.wall_secs;
    }

    /// Cases the reproducer is judged on: scored ones and adapter errors (an adapter that
    /// breaks has failed the case); invalid cases are left out.
    pub fn judged(&self) -> usize {
        self.scored + self.adapter_errors
    }

    fn rate(n: usize, d: usize) -> f64 {
        if d == 0 {
            0.0
        } else {
            n as f64 / d as f64
        }
    }
    pub fn fail_to_pass_rate(&self) -> f64 {
        Self::rate(self.fail_to_pass, self.judged())
    }
    pub fn fail_before_rate(&self) -> f64 {
        Self::rate(self.fail_before, self.judged())
    }
    pub fn matches_issue_rate(&self) -> f64 {
        Self::rate(self.matches_issue, self.matchable)
    }
}

/// The summary of a run: the whole and per language.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub run_id: String,
    pub adapter: AdapterInfo,
    pub total: Tally,
    pub per_language: BTreeMap<String, Tally>,
}

/// Recompute a run's summary from its record alone.
pub fn summarize(record: &BenchRecord) -> Summary {
    let mut total = Tally::default();
    let mut per_language: BTreeMap<String, Tally> = BTreeMap::new();
    for c in &record.cases {
        total.add(c);
        per_language.entry(c.language.clone()).or_default().add(c);
    }
    Summary { run_id: record.run_id.clone(), adapter: record.adapter.clone(), total, per_language }
}

/// Errors of the harness itself (a case's own problems are [`CaseStatus::Invalid`] results).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Case(#[from] CaseError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Other(String),
}

impl BenchError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io { context: context.into(), source }
    }
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            BenchError::Case(e) => e.hint(),
            _ => None,
        }
    }
}
