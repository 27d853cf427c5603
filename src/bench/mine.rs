//! `bench mine REPO`: cases from a git history.
//!
//! Non-merge commits are walked newest first and filtered in stages; each stage logs
//! how many commits it kept, and every commit it drops is recorded with the stage and
//! the reason:
//!
//! 1. commits scanned (up to `max_commits`);
//! 2. has a parent (a root commit has nothing to be buggy against);
//! 3. touches supported source (a Python, TypeScript or Java file);
//! 4. changes both code and tests (the tests become the gold test, the code the fix);
//! 5. not too large (the code diff within `max_files` files and `max_lines` lines);
//! 6. gold test fail-to-pass: the case is written and [`Scorer::verify`] runs its test
//!    before and after the fix (skipped without `verify`).
//!
//! A kept commit becomes a case directory `OUT/<short sha>-<slug>/`: the parent is the
//! buggy commit, the code diff is `gold.patch`, the test diff `test.patch`, and the
//! commit message (with the text of the issues it references, when `issues` holds
//! them) is `issue.md`. `OUT/mine.json` is the [`MineRecord`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use super::case::Case;
use super::score::{ScoreError, Scorer};
use super::BenchError;
use crate::lang::{is_test_path, Lang};

/// How a mining run goes.
#[derive(Debug, Clone)]
pub struct MineOptions {
    /// The git repository (any directory inside its work tree).
    pub repo: PathBuf,
    /// Where the cases and `mine.json` go.
    pub out: PathBuf,
    /// Commits looked at, newest first.
    pub max_commits: usize,
    /// Most code files a fix may change.
    pub max_files: usize,
    /// Most code lines (added plus removed) a fix may change.
    pub max_lines: usize,
    /// A directory of issue texts, `<number>.md` or `<number>.txt`.
    pub issues: Option<PathBuf>,
    /// Run each case's gold test before and after the fix, keeping only fail-to-pass ones.
    pub verify: bool,
    pub scorer: Scorer,
}

/// The stages, in order.
pub const STAGES: &[&str] = &[
    "commits scanned",
    "has a parent",
    "touches supported source",
    "changes code and tests",
    "not too large",
    "gold test fail-to-pass",
];

/// One stage of the funnel and the commits it kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Stage {
    pub name: String,
    pub kept: usize,
}

/// A commit a stage dropped, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Dropped {
    pub commit: String,
    pub subject: String,
    pub stage: String,
    pub reason: String,
}

/// What a mining run did: written as `OUT/mine.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MineRecord {
    /// The repository's absolute path.
    pub repo: String,
    /// Whether the gold tests were run (the last stage is left out when not).
    pub verified: bool,
    pub stages: Vec<Stage>,
    pub dropped: Vec<Dropped>,
    /// The ids of the cases written, newest commit first.
    pub cases: Vec<String>,
}

/// A changed file of a commit: its path and lines added plus removed.
#[derive(Debug, Clone, PartialEq)]
struct Changed {
    path: String,
    lines: usize,
    lang: Lang,
}

/// Run `git -C repo ARGS` and return its standard output, or its error on one line.
pub(crate) fn git(repo: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "git {}: {}",
            args.first().unwrap_or(&""),
            err.lines().find(|l| !l.trim().is_empty()).unwrap_or("failed").trim()
        ))
    }
}

/// Does the repository hold this commit?
pub(crate) fn has_commit(repo: &Path, commit: &str) -> bool {
    git(repo, &["cat-file", "-e", &format!("{commit}^{{commit}}")]).is_ok()
}

/// The language most of `paths` are in (ties go to the first in [`Lang::all`]); None
/// when none is in a supported language.
pub fn majority_language<'a>(paths: impl IntoIterator<Item = &'a str>) -> Option<Lang> {
    let mut counts: BTreeMap<Lang, usize> = BTreeMap::new();
    for p in paths {
        if let Some(l) = Lang::of_path(Path::new(p)) {
            *counts.entry(l).or_default() += 1;
        }
    }
    let most = counts.values().copied().max()?;
    Lang::all().into_iter().find(|l| counts.get(l) == Some(&most))
}

/// The issue numbers a commit message references (`#123`, `Fixes #123`, `closes #7`),
/// in order, once each. `owner/repo#12` and `&#39;` are not references.
pub fn issue_refs(message: &str) -> Vec<u64> {
    let bytes = message.as_bytes();
    let mut out = Vec::new();
    for (i, _) in message.match_indices('#') {
        if i > 0 {
            let prev = bytes[i - 1];
            if prev.is_ascii_alphanumeric() || matches!(prev, b'&' | b'/' | b'#' | b'_') {
                continue;
            }
        }
        let digits: String = message[i + 1..].chars().take_while(|c| c.is_ascii_digit()).collect();
        let after = message[i + 1 + digits.len()..].chars().next();
        if digits.is_empty() || digits.len() > 9 || after.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Ok(n) = digits.parse::<u64>() {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// A case id: the short sha and a slug of the subject (lowercase words joined by `-`,
/// at most 40 characters).
pub fn case_id(sha: &str, subject: &str) -> String {
    let short: String = sha.chars().take(7).collect();
    let mut slug = String::new();
    for word in subject.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_ascii_lowercase();
        if !slug.is_empty() && slug.len() + 1 + word.len() > 40 {
            break;
        }
        if !slug.is_empty() {
            slug.push('-');
        }
        slug.push_str(&word);
    }
    slug.truncate(40);
    if slug.is_empty() {
        short
    } else {
        format!("{short}-{slug}")
    }
}

/// The issue text of a commit: the subject as a title, the body, then the text of each
/// referenced issue found in `issues`.
fn issue_text(subject: &str, body: &str, issues: Option<&Path>) -> String {
    let mut s = format!("# {}\n", subject.trim());
    if !body.trim().is_empty() {
        s.push('\n');
        s.push_str(body.trim());
        s.push('\n');
    }
    if let Some(dir) = issues {
        for n in issue_refs(&format!("{subject}\n{body}")) {
            let text =
                ["md", "txt"].iter().find_map(|ext| std::fs::read_to_string(dir.join(format!("{n}.{ext}"))).ok());
            if let Some(t) = text {
                s.push_str(&format!("\n## Issue #{n}\n\n{}\n", t.trim()));
            }
        }
    }
    s
}

/// The changed files of `parent..commit` in a supported language, with their sizes.
fn changed_files(repo: &Path, parent: &str, commit: &str) -> Result<Vec<Changed>, String> {
    let out = git(repo, &["diff", "--numstat", "--no-renames", "-z", parent, commit])?;
    let mut files = Vec::new();
    for rec in out.split('\0').filter(|r| !r.is_empty()) {
        let mut parts = rec.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let Some(lang) = Lang::of_path(Path::new(path)) else { continue };
        let lines = added.parse::<usize>().unwrap_or(0) + removed.parse::<usize>().unwrap_or(0);
        files.push(Changed { path: path.to_string(), lines, lang });
    }
    Ok(files)
}

/// `git diff parent commit -- files`, with the a/ b/ prefixes whatever the user's config
/// and the paths taken literally (not as globs).
fn diff(repo: &Path, parent: &str, commit: &str, files: &[&Changed]) -> Result<String, String> {
    let mut args = vec![
        "--literal-pathspecs",
        "-c",
        "diff.noprefix=false",
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-renames",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        parent,
        commit,
        "--",
    ];
    args.extend(files.iter().map(|f| f.path.as_str()));
    git(repo, &args)
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), BenchError> {
    std::fs::write(path, serde_json::to_vec_pretty(v)?).map_err(|e| BenchError::io(path.display().to_string(), e))
}

/// Mine the repository's history into cases. `log` sees one line per verified case.
pub fn mine(opts: &MineOptions, log: &dyn Fn(&str)) -> Result<MineRecord, BenchError> {
    let top = git(&opts.repo, &["rev-parse", "--show-toplevel"])
        .map_err(|e| BenchError::Other(format!("{} is not a git repository: {e}", opts.repo.display())))?;
    let repo = std::fs::canonicalize(top.trim()).map_err(|e| BenchError::io(top.trim().to_string(), e))?;
    let max = opts.max_commits.to_string();
    let shas = git(&repo, &["rev-list", "--no-merges", "--max-count", &max, "HEAD"])
        .map_err(|e| BenchError::Other(format!("{}: {e} (does it have any commit?)", repo.display())))?;
    std::fs::create_dir_all(&opts.out).map_err(|e| BenchError::io(opts.out.display().to_string(), e))?;
    // A re-run into the same OUT: the cases the last run wrote, to remove those not written again.
    let previous: Vec<String> = std::fs::read(opts.out.join("mine.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<MineRecord>(&b).ok())
        .map(|r| r.cases)
        .unwrap_or_default();

    let stages = if opts.verify { STAGES } else { &STAGES[..STAGES.len() - 1] };
    let mut kept = vec![0usize; stages.len()];
    let mut dropped = Vec::new();
    let mut cases = Vec::new();
    for sha in shas.lines().map(str::trim).filter(|s| !s.is_empty()) {
        kept[0] += 1;
        let meta = git(&repo, &["log", "-1", "--format=%P%x00%s%x00%b", sha]).map_err(BenchError::Other)?;
        let mut parts = meta.splitn(3, '\0');
        let parents = parts.next().unwrap_or("").trim().to_string();
        let subject = parts.next().unwrap_or("").trim().to_string();
        let body = parts.next().unwrap_or("").trim().to_string();
        let mut reject = |stage: usize, reason: String| {
            dropped.push(Dropped {
                commit: sha.to_string(),
                subject: subject.clone(),
                stage: STAGES[stage].to_string(),
                reason,
            });
        };
        let Some(parent) = parents.split_whitespace().next().map(str::to_string) else {
            reject(1, "a root commit (no parent)".into());
            continue;
        };
        kept[1] += 1;
        let files = changed_files(&repo, &parent, sha).map_err(BenchError::Other)?;
        if files.is_empty() {
            reject(2, "no Python, TypeScript or Java file changed".into());
            continue;
        }
        kept[2] += 1;
        let (tests, code): (Vec<&Changed>, Vec<&Changed>) =
            files.iter().partition(|f| is_test_path(&f.lang.descriptor().tests, &f.path));
        match (tests.is_empty(), code.is_empty()) {
            (false, true) => {
                reject(3, "only tests changed".into());
                continue;
            }
            (true, _) => {
                reject(3, "only code changed".into());
                continue;
            }
            _ => {}
        }
        kept[3] += 1;
        let lines: usize = code.iter().map(|f| f.lines).sum();
        if code.len() > opts.max_files {
            reject(4, format!("{} code files changed (at most {})", code.len(), opts.max_files));
            continue;
        }
        if lines > opts.max_lines {
            reject(4, format!("{lines} code lines changed (at most {})", opts.max_lines));
            continue;
        }
        kept[4] += 1;

        let id = case_id(sha, &subject);
        let dir = opts.out.join(&id);
        let case = write_case(&repo, &dir, &id, sha, &parent, &subject, &body, &code, &tests, opts.issues.as_deref())
            .map_err(|e| BenchError::Other(format!("writing case {id}: {e}")))?;
        if opts.verify {
            match opts.scorer.verify(&case) {
                Ok(_) => {
                    log(&format!("{id}: fail-to-pass"));
                    kept[5] += 1;
                }
                Err(ScoreError::Case(m) | ScoreError::Candidate(m)) => {
                    log(&format!("{id}: dropped: {m}"));
                    let _ = std::fs::remove_dir_all(&dir);
                    reject(5, m);
                    continue;
                }
            }
        }
        cases.push(id);
    }
    // Only directories the previous run listed as its cases, and only case directories:
    // nothing else a user keeps in OUT is touched.
    for old in previous.iter().filter(|c| !cases.contains(c)) {
        let dir = opts.out.join(old);
        let ours = crate::sandbox::check_rel(old).is_ok() && !old.contains('/') && dir.join("case.json").is_file();
        if ours {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| BenchError::io(format!("removing the stale case {}", dir.display()), e))?;
        }
    }
    let record = MineRecord {
        repo: repo.display().to_string(),
        verified: opts.verify,
        stages: stages.iter().zip(kept).map(|(s, k)| Stage { name: s.to_string(), kept: k }).collect(),
        dropped,
        cases,
    };
    write_json(&opts.out.join("mine.json"), &record)?;
    Ok(record)
}

/// Write a case directory for one commit and load it back (so it is a valid case).
#[allow(clippy::too_many_arguments)]
fn write_case(
    repo: &Path,
    dir: &Path,
    id: &str,
    sha: &str,
    parent: &str,
    subject: &str,
    body: &str,
    code: &[&Changed],
    tests: &[&Changed],
    issues: Option<&Path>,
) -> Result<Case, String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let gold = diff(repo, parent, sha, code)?;
    let test = diff(repo, parent, sha, tests)?;
    let language = majority_language(code.iter().map(|f| f.path.as_str())).unwrap_or(code[0].lang);
    let w = |name: &str, text: &str| std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"));
    w("gold.patch", &gold)?;
    w("test.patch", &test)?;
    w("issue.md", &issue_text(subject, body, issues))?;
    let case = Case {
        id: id.to_string(),
        language: language.name().to_string(),
        repo: repo.display().to_string(),
        base_commit: Some(parent.to_string()),
        issue_text: None,
        issue_file: Some("issue.md".into()),
        gold_patch: Some("gold.patch".into()),
        gold_test_patch: Some("test.patch".into()),
        tests: Default::default(),
        fail_to_pass: Vec::new(),
        source: Some(serde_json::json!({ "commit": sha, "parent": parent, "subject": subject })),
        dir: dir.to_path_buf(),
    };
    let json = serde_json::to_vec_pretty(&case).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("case.json"), json).map_err(|e| format!("case.json: {e}"))?;
    Case::load(dir).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_references() {
        assert_eq!(
            issue_refs("Fix median (#12)\n\nFixes #34, closes #12. See gh#5 and owner/repo#9 and &#39;"),
            vec![12, 34]
        );
        assert_eq!(issue_refs("#7: crash on empty input"), vec![7]);
        assert_eq!(issue_refs("C# support, #1a, issue #"), Vec::<u64>::new());
    }

    #[test]
    fn language_from_paths() {
        assert_eq!(majority_language(["a.py", "b.js", "c.py"]), Some(Lang::Python));
        assert_eq!(majority_language(["src/x.tsx", "README.md", "y.mjs"]), Some(Lang::TypeScript));
        assert_eq!(majority_language(["A.java", "b.py"]), Some(Lang::Python));
        assert_eq!(majority_language(["Main.java", "build.gradle"]), Some(Lang::Java));
        assert_eq!(majority_language(["README.md", "Makefile"]), None);
    }

    #[test]
    fn case_ids_are_valid() {
        assert_eq!(
            case_id("0123456789abcdef", "Fix median of even-length lists (#12)"),
            "0123456-fix-median-of-even-length-lists-12"
        );
        assert_eq!(case_id("0123456789abcdef", "  !!  "), "0123456");
        let long =
            case_id("abcdef0123", "a very long subject line that goes on and on about the many things it changed");
        assert!(long.len() <= 48, "{long}");
        assert!(!long.ends_with('-'));
    }

    #[test]
    fn issue_text_appends_referenced_issues() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("12.md"), "median([1, 2]) returns 1\n").unwrap();
        let t = issue_text("Fix median", "Fixes #12 and #13.", Some(dir.path()));
        assert_eq!(t, "# Fix median\n\nFixes #12 and #13.\n\n## Issue #12\n\nmedian([1, 2]) returns 1\n");
    }
}
