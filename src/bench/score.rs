//! Scoring in the sandbox: a candidate test runs on the buggy tree, then again on the
//! tree with the gold code patch applied.

use std::path::Path;
use std::sync::Arc;

use super::case::{apply_patch, Case};
use super::RunSummary;
use crate::localize;
use crate::reproduce::{keyfree, Expected};
use crate::sandbox::env::{self, EnvOptions, Environment, PythonSource};
use crate::sandbox::runners::{TestResult, TestStatus};
use crate::sandbox::tools::{run_test, RunTestArgs};
use crate::sandbox::{self, Choice, SandboxConfig};

/// A reproducer's output: test files to add or replace, or a diff to apply.
#[derive(Debug, Clone, Default)]
pub struct Candidate {
    /// `(path relative to the repository root, content)`.
    pub files: Vec<(String, String)>,
    /// A unified diff (`-p1`) instead of, or besides, `files`.
    pub patch: Option<String>,
    /// The reproducer's own verdict, when it gives one.
    pub claimed: Option<String>,
    /// What it said about it.
    pub reason: Option<String>,
    /// Run only these tests of its files (ids as SWE-bench's `FAIL_TO_PASS` gives them:
    /// `file::Class::test`, `test (module.Class)`, a bare `test_name`), not the whole
    /// files: a gold test file's other tests may fail for reasons that are not the case's.
    /// Empty, or an id that names no test of the files: the whole files run.
    pub only: Vec<String>,
    /// The pipeline's fix probe verdict on its test (`passes`, `fails`, `no_fix`).
    pub probe: Option<String>,
}

impl Candidate {
    /// The candidate's test files: of the source files it writes, those that are tests
    /// by their language's conventions, or all of them when none is (a data file or a
    /// helper a test patch also touches is not run).
    pub fn test_files(&self) -> Vec<String> {
        let mut all: Vec<String> = self.files.iter().map(|(p, _)| p.clone()).collect();
        if let Some(p) = &self.patch {
            for f in super::case::patch_files(p) {
                if !all.contains(&f) {
                    all.push(f);
                }
            }
        }
        let source: Vec<(String, crate::lang::Lang)> =
            all.into_iter().filter_map(|f| crate::lang::Lang::of_path(Path::new(&f)).map(|l| (f, l))).collect();
        let tests: Vec<String> = source
            .iter()
            .filter(|(f, l)| crate::lang::is_test_path(&l.descriptor().tests, f))
            .map(|(f, _)| f.clone())
            .collect();
        if tests.is_empty() {
            source.into_iter().map(|(f, _)| f).collect()
        } else {
            tests
        }
    }

    /// The candidate as one diff against the buggy tree at `root`.
    pub fn as_patch(&self, root: &Path) -> String {
        let mut out = self.patch.clone().unwrap_or_default();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&super::case::diff_for_files(root, &self.files));
        out
    }

    /// Put the candidate into the tree at `root`.
    pub fn apply(&self, root: &Path) -> Result<(), String> {
        if let Some(p) = &self.patch {
            apply_patch(root, p, false).map_err(|e| format!("the candidate's patch does not apply: {e}"))?;
        }
        // Under the fill gate: `create_dir_all` after an interrupt deleted the tree would
        // bring it back.
        let _fill = crate::sandbox::interrupt::filling();
        for (path, content) in &self.files {
            if crate::sandbox::check_rel(path).is_err() {
                return Err(format!("the candidate writes {path:?}, outside the repository"));
            }
            let dest = root.join(path);
            if let Some(d) = dest.parent() {
                std::fs::create_dir_all(d).map_err(|e| format!("{path}: {e}"))?;
            }
            std::fs::write(&dest, content).map_err(|e| format!("{path}: {e}"))?;
        }
        Ok(())
    }
}

/// Where and how tests run.
#[derive(Debug, Clone)]
pub struct Scorer {
    pub sandbox: Choice,
    /// Docker image when the case names none.
    pub image: Option<String>,
    /// Seconds one test run may take when the case says nothing.
    pub timeout_secs: u64,
    /// `--python`, `--workdir`, `--activate`, when the case says nothing.
    pub env: EnvOptions,
}

/// A case's tree at one of its states, in a temporary directory (deleted on Ctrl-C too).
pub struct Tree {
    pub dir: tempfile::TempDir,
    _interrupt: crate::sandbox::interrupt::Registration,
}

impl Tree {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Why a case or candidate could not be scored.
#[derive(Debug, Clone, PartialEq)]
pub enum ScoreError {
    /// The case's fault (repository, gold patch, environment).
    Case(String),
    /// The candidate's fault (its patch does not apply, it writes outside the tree, no test).
    Candidate(String),
}

/// The two runs of a candidate.
#[derive(Debug, Clone)]
pub struct Scored {
    pub before: Vec<TestResult>,
    pub after: Vec<TestResult>,
    pub test_files: Vec<String>,
}

impl Scored {
    pub fn before_summary(&self) -> RunSummary {
        summarize_runs(&self.before)
    }
    pub fn after_summary(&self) -> RunSummary {
        summarize_runs(&self.after)
    }
    /// The run on the buggy tree did not pass.
    pub fn fail_before(&self) -> bool {
        !self.before.is_empty() && self.before.iter().any(|r| r.status != TestStatus::Passed)
    }
    /// Every test file passed once the gold patch was in.
    pub fn pass_after(&self) -> bool {
        !self.after.is_empty() && self.after.iter().all(|r| r.status == TestStatus::Passed && r.passed > 0)
    }
}

/// One status and the first failure, over the runs of several test files.
pub fn summarize_runs(runs: &[TestResult]) -> RunSummary {
    let status = if runs.iter().any(|r| r.status == TestStatus::Errored) {
        "errored"
    } else if runs.iter().any(|r| r.status == TestStatus::Failed) {
        "failed"
    } else {
        "passed"
    };
    let failure =
        runs.iter().flat_map(|r| r.failures.iter()).next().map(|f| {
            format!("{}: {}", f.kind.as_deref().unwrap_or("?"), f.message.lines().next().unwrap_or("").trim())
        });
    RunSummary {
        status: status.into(),
        passed: runs.iter().map(|r| r.passed).sum(),
        failed: runs.iter().map(|r| r.failed).sum(),
        failure,
        error: runs.iter().find_map(|r| r.error.clone()),
    }
}

/// The error the issue reports (its type, and its message when it gives one), if it
/// reports one.
pub fn issue_expected(issue: &str) -> Option<Expected> {
    let facts = localize::read_issue(issue);
    facts
        .exceptions
        .last()
        .map(|e| Expected { kind: e.kind.clone(), message: (!e.message.trim().is_empty()).then(|| e.message.clone()) })
}

/// Does the failure before the fix show the error the issue reports? None when the
/// issue reports no error type. The type is compared without its module; when the issue
/// gives a message, the failure's must say the same (see [`message_matches`]).
pub fn matches_issue(expected: Option<&Expected>, before: &[TestResult]) -> Option<bool> {
    let e = expected?;
    let kind_only = Expected { kind: e.kind.clone(), message: None };
    Some(before.iter().flat_map(|r| r.failures.iter()).any(|f| {
        keyfree::matches(&kind_only, f.kind.as_deref(), &f.message)
            && e.message.as_deref().is_none_or(|m| message_matches(m, &f.message))
    }))
}

/// The words of a message that say what it is: letters-first tokens of three or more
/// characters, without paths, addresses (`0x7f3a...`) and numbers, which differ between machines.
fn message_words(m: &str) -> Vec<String> {
    m.split_whitespace()
        .filter(|t| !t.contains('/') && !t.contains('\\'))
        .flat_map(|t| t.split(|c: char| !(c.is_alphanumeric() || c == '_')))
        .filter(|w| w.len() >= 3 && w.chars().next().is_some_and(|c| c.is_alphabetic()) && !w.starts_with("0x"))
        .map(|w| w.to_lowercase())
        .collect()
}

/// Does a failure's message say what the issue's says? One holds the other (spacing and
/// quotes aside), or at least two thirds of the issue's words are in the failure's: a
/// reporter's message carries their own values (paths, object ids), the test's its own.
pub fn message_matches(issue: &str, got: &str) -> bool {
    let norm = |s: &str| {
        s.chars().filter(|c| !c.is_whitespace() && !matches!(c, '\'' | '"' | '`')).collect::<String>().to_lowercase()
    };
    let (a, b) = (norm(issue), norm(got));
    if a.is_empty() || (!b.is_empty() && (b.contains(&a) || a.contains(&b))) {
        return true;
    }
    let want = message_words(issue);
    if want.is_empty() {
        return false;
    }
    let have = message_words(got);
    let hit = want.iter().filter(|w| have.contains(w)).count();
    3 * hit >= 2 * want.len()
}

impl Scorer {
    /// The environment a case's tests run in: the case's `tests.python`, `workdir` and
    /// `activate` over the harness's options; looked up over the case's repository when
    /// it is a directory. Resolved once per interpreter and repository in a run.
    pub fn case_env(&self, case: &Case) -> Result<(Arc<Environment>, EnvOptions), ScoreError> {
        let (python, source) = match &case.tests.python {
            Some(p) => (Some(case.path_of(p)), PythonSource::Case),
            None => (self.env.python.clone(), PythonSource::Flag),
        };
        let opts = EnvOptions {
            python: python.clone(),
            workdir: case.tests.workdir.clone().or_else(|| self.env.workdir.clone()),
            activate: case.tests.activate.clone().or_else(|| self.env.activate.clone()),
        };
        let repo = case.path_of(&case.repo);
        let repo = if repo.is_dir() { repo } else { case.dir.clone() };
        let e = env::resolve_cached(&repo, python.as_deref(), source)
            .map_err(|e| ScoreError::Case(format!("{e} (hint: {})", e.hint().unwrap_or(""))))?;
        Ok((e, opts))
    }

    /// The buggy tree.
    pub fn buggy(&self, case: &Case) -> Result<Tree, ScoreError> {
        let dir = tempfile::Builder::new()
            .prefix("reproagent-bench-")
            .tempdir()
            .map_err(|e| ScoreError::Case(format!("temp dir: {e}")))?;
        let _interrupt = crate::sandbox::interrupt::register_dir(dir.path());
        case.materialize(dir.path()).map_err(|e| ScoreError::Case(e.to_string()))?;
        Ok(Tree { dir, _interrupt })
    }

    /// The fixed tree: the buggy one with the gold code patch.
    pub fn fixed(&self, case: &Case) -> Result<Tree, ScoreError> {
        let tree = self.buggy(case)?;
        let patch = case
            .gold_patch_text()
            .map_err(|e| ScoreError::Case(e.to_string()))?
            .ok_or_else(|| ScoreError::Case("the case has no gold_patch to score against".into()))?;
        apply_patch(tree.path(), &patch, false)
            .map_err(|e| ScoreError::Case(format!("gold_patch does not apply: {e}")))?;
        Ok(tree)
    }

    /// Run the candidate on the buggy tree and on the fixed one.
    pub fn score(&self, case: &Case, candidate: &Candidate) -> Result<Scored, ScoreError> {
        let before_tree = self.buggy(case)?;
        let after_tree = self.fixed(case)?;
        let test_files = candidate.test_files();
        if test_files.is_empty() {
            return Err(ScoreError::Candidate("the reproducer wrote no test".into()));
        }
        candidate.apply(before_tree.path()).map_err(ScoreError::Candidate)?;
        candidate.apply(after_tree.path()).map_err(ScoreError::Candidate)?;
        let files: Vec<String> = test_files.into_iter().filter(|f| before_tree.path().join(f).is_file()).collect();
        if files.is_empty() {
            return Err(ScoreError::Candidate("the candidate's test files are not in the tree once applied".into()));
        }
        let targets = test_targets(&candidate.only, &files, before_tree.path())
            .unwrap_or_else(|| files.iter().map(|f| (f.clone(), None)).collect());
        let before = self.run_tests(case, before_tree.path(), &targets)?;
        let after = self.run_tests(case, after_tree.path(), &targets)?;
        Ok(Scored { before, after, test_files: files })
    }

    /// Is the case sound? Its repository and patches must be usable and, when it has a
    /// gold test, that test must be fail-to-pass. Returns the reason it is not.
    pub fn verify(&self, case: &Case) -> Result<Scored, ScoreError> {
        let test = case
            .gold_test_patch_text()
            .map_err(|e| ScoreError::Case(e.to_string()))?
            .ok_or_else(|| ScoreError::Case("the case has no gold_test_patch to verify".into()))?;
        let gold = Candidate { patch: Some(test), only: case.fail_to_pass.clone(), ..Candidate::default() };
        let scored = self.score(case, &gold).map_err(|e| match e {
            ScoreError::Candidate(m) => ScoreError::Case(format!("gold_test_patch: {m}")),
            e => e,
        })?;
        gold_verdict(&scored)?;
        Ok(scored)
    }

    /// Run each test file (or one test of it) in a sandbox over `tree`.
    fn run_tests(
        &self,
        case: &Case,
        tree: &Path,
        files: &[(String, Option<String>)],
    ) -> Result<Vec<TestResult>, ScoreError> {
        let image =
            case.tests.image.clone().or_else(|| self.image.clone()).unwrap_or_else(|| "reproagent-env:none".into());
        let timeout = case.tests.timeout_secs.unwrap_or(self.timeout_secs);
        let (environment, opts) = self.case_env(case)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ScoreError::Case(format!("runtime: {e}")))?;
        rt.block_on(async {
            let opened =
                sandbox::open(self.sandbox, SandboxConfig::new(tree, image).with_env(Some(environment), &opts))
                    .await
                    .map_err(|e| ScoreError::Case(format!("the sandbox did not open: {e}")))?;
            let sb = opened.sandbox;
            let mut out = Vec::new();
            let mut err = None;
            for (f, test) in files {
                let args = RunTestArgs {
                    file: f.clone(),
                    test: test.clone(),
                    framework: case.tests.framework.clone(),
                    command: case.tests.command.clone(),
                    timeout_secs: timeout,
                };
                match run_test(sb.as_ref(), tree, &args).await {
                    Ok(r) => out.push(r),
                    Err(e) => {
                        err = Some(ScoreError::Case(format!("running {f}: {e}")));
                        break;
                    }
                }
            }
            let _ = sb.close().await;
            match err {
                Some(e) => Err(e),
                None => Ok(out),
            }
        })
    }
}

/// The `(file, test)` each id of `ids` names among `files` (relative to `tree`), or None
/// when some id names none of them (then the whole files run). The id forms are
/// SWE-bench's: `path::Class::test[param]` (pytest), `test (module.Class)` or
/// `test (module.Class.test)` (unittest and Django's runner, the module dotted from the
/// test root), and a bare `test_name` (the one file of `files` defining it).
pub fn test_targets(ids: &[String], files: &[String], tree: &Path) -> Option<Vec<(String, Option<String>)>> {
    if ids.is_empty() {
        return None;
    }
    let dotted = |f: &str| f.trim_end_matches(".py").replace('/', ".");
    let mut out = Vec::new();
    for id in ids {
        let id = id.trim();
        let target = if let Some((file, rest)) = id.split_once("::") {
            files.iter().find(|f| f.as_str() == file).map(|f| (f.clone(), Some(rest.to_string())))
        } else if let Some((name, inner)) = id.strip_suffix(')').and_then(|x| x.split_once(" (")) {
            let inner = inner.strip_suffix(&format!(".{name}")).unwrap_or(inner);
            let (module, class) = inner.rsplit_once('.')?;
            files
                .iter()
                .find(|f| dotted(f) == module || dotted(f).ends_with(&format!(".{module}")))
                .map(|f| (f.clone(), Some(format!("{class}.{name}"))))
        } else if !id.is_empty() && id.chars().all(|c| c.is_alphanumeric() || c == '_') {
            let defines = |f: &String| {
                std::fs::read_to_string(tree.join(f)).is_ok_and(|c| {
                    c.lines().any(|l| {
                        let l = l.trim_start();
                        l.starts_with(&format!("def {id}(")) || l.starts_with(&format!("async def {id}("))
                    })
                })
            };
            let found: Vec<&String> = files.iter().filter(|f| defines(f)).collect();
            (found.len() == 1).then(|| (found[0].clone(), Some(id.to_string())))
        } else {
            None
        };
        let t = target?;
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Some(out)
}

/// Whether a scored run of the GOLD test shows a sound case: the test runs, fails on the
/// buggy tree and passes with the gold patch. A test that errors on the buggy tree only
/// (an import of what the fix adds) is fail-to-pass; one that errors on both trees
/// cannot run at all ([`cannot_run`]).
pub fn gold_verdict(scored: &Scored) -> Result<(), ScoreError> {
    if let Some(why) = cannot_run(scored) {
        return Err(ScoreError::Case(format!("the gold test cannot run: {why}")));
    }
    if !scored.fail_before() {
        return Err(ScoreError::Case("the gold test passes on the buggy tree: the case shows no bug".into()));
    }
    if !scored.pass_after() {
        let s = scored.after_summary();
        return Err(ScoreError::Case(format!(
            "the gold test does not pass with the gold patch: {}",
            one_line(s.failure.as_deref().or(s.error.as_deref()).unwrap_or(&s.status))
        )));
    }
    Ok(())
}

/// When a test file errored both before and after the gold patch (it cannot run at all:
/// a missing dependency, a collection error, a timeout): which file, what kind of error
/// and its first lines. Held against the case for the gold test, against the candidate
/// for any other.
pub fn cannot_run(scored: &Scored) -> Option<String> {
    let (i, before) = scored.before.iter().enumerate().find(|(i, b)| {
        b.status == TestStatus::Errored && scored.after.get(*i).is_some_and(|a| a.status == TestStatus::Errored)
    })?;
    let file = scored.test_files.get(i).map(String::as_str).unwrap_or("the test");
    let head = error_head(before);
    Some(format!("{file} errored before and after the gold patch ({}): {head}", error_kind(&head)))
}

/// The first lines of a run's error: the runner's message, and the first failure when the
/// message alone says little ("the tests could not be loaded").
fn error_head(r: &TestResult) -> String {
    let mut lines: Vec<String> = r
        .error
        .as_deref()
        .unwrap_or("")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(3)
        .map(String::from)
        .collect();
    if let Some(f) = r.failures.first() {
        let first =
            format!("{}: {}", f.kind.as_deref().unwrap_or("error"), f.message.lines().next().unwrap_or("").trim());
        if !lines.iter().any(|l| l.contains(first.trim_end_matches(": "))) {
            lines.push(first);
        }
    }
    if lines.is_empty() {
        lines.push(format!("exit code {:?}, no report", r.output.exit_code));
    }
    one_line(&lines.join("\n"))
}

/// What kind of error stops a test from running, from its text.
fn error_kind(text: &str) -> &'static str {
    const MISSING: &[&str] = &[
        "ModuleNotFoundError",
        "No module named",
        "ImportError",
        "Cannot find module",
        "ERR_MODULE_NOT_FOUND",
        "ClassNotFoundException",
        "NoClassDefFoundError",
        "does not exist", // javac: package x.y does not exist
    ];
    if text.starts_with("timed out") {
        "timed out"
    } else if text.starts_with("the memory limit") {
        "memory limit"
    } else if MISSING.iter().any(|m| text.contains(m)) {
        "missing dependency"
    } else if text.contains("collection failed") || text.contains("could not be loaded") || text.contains("SyntaxError")
    {
        "collection error"
    } else if text.starts_with("no tests ran") {
        "no tests ran"
    } else {
        "error"
    }
}

pub(crate) fn one_line(s: &str) -> String {
    let l: String = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" | ");
    if l.chars().count() > 300 {
        format!("{}...", l.chars().take(300).collect::<String>())
    } else {
        l
    }
}

#[cfg(test)]
mod message_tests {
    use super::message_matches;

    #[test]
    fn messages_match_by_containment_or_most_words() {
        assert!(message_matches("'zero'", "KeyError: 'zero'"));
        assert!(message_matches(
            "[Errno 2] No such file or directory: '/home/ann/data/x.csv'",
            "[Errno 2] No such file or directory: '/tmp/pytest-3/x.csv'"
        ));
        assert!(!message_matches("list index out of range", "unsupported operand type(s) for +: 'int' and 'str'"));
        assert!(!message_matches("'colour'", "'size'"));
    }
}

#[cfg(test)]
mod target_tests {
    use super::test_targets;

    #[test]
    fn fail_to_pass_ids_name_tests_of_the_files() {
        let t = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(t.path().join("sympy/core/tests")).expect("mkdir");
        std::fs::write(t.path().join("sympy/core/tests/test_f.py"), "def test_a():\n    pass\n\ndef test_b(): pass\n")
            .expect("write");
        let files = vec![
            "tests/delete/tests.py".to_string(),
            "tests/test_cli.py".to_string(),
            "sympy/core/tests/test_f.py".to_string(),
        ];
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            test_targets(
                &ids(&[
                    "tests/test_cli.py::TestRoutes::test_host[a.b]",
                    "test_x (delete.tests.FastDeleteTests)",
                    "test_y (delete.tests.T.test_y)",
                    "test_b"
                ]),
                &files,
                t.path()
            ),
            Some(vec![
                ("tests/test_cli.py".into(), Some("TestRoutes::test_host[a.b]".into())),
                ("tests/delete/tests.py".into(), Some("FastDeleteTests.test_x".into())),
                ("tests/delete/tests.py".into(), Some("T.test_y".into())),
                ("sympy/core/tests/test_f.py".into(), Some("test_b".into())),
            ])
        );
        // An id that names no test of the files: the whole files run.
        assert_eq!(test_targets(&ids(&["tests/other.py::test_z"]), &files, t.path()), None);
        assert_eq!(test_targets(&ids(&["test_nowhere"]), &files, t.path()), None);
        assert_eq!(test_targets(&[], &files, t.path()), None);
    }
}
