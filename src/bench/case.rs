//! The case contract: a directory with `case.json`.
//!
//! ```json
//! {
//!   "id": "py-slug",
//!   "language": "python",
//!   "repo": "repo",
//!   "base_commit": null,
//!   "issue_file": "issue.md",
//!   "gold_patch": "gold.patch",
//!   "gold_test_patch": "test.patch",
//!   "tests": { "framework": "pytest", "command": null, "timeout_secs": 120,
//!              "python": "/path/to/venv/bin/python" }
//! }
//! ```
//!
//! `repo` is a path, relative to the case directory or absolute: a directory (copied as
//! a sandbox copies it: see [`crate::sandbox::copy`]), a git repository (with
//! `base_commit`: that commit's tree), or a `.tar`,
//! `.tar.gz` or `.tgz` archive (a single top-level directory is stripped). The issue is
//! `issue_text` inline or `issue_file`; the patches are unified diffs in files beside
//! `case.json`, applied with `-p1` at the repository root. `tests` says how tests run
//! when the repository's own conventions are not enough.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// How a case's tests run, when detection from the repository is not enough.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TestSpec {
    /// `pytest`, `unittest`, `django`, `node-test`, `jest`, `vitest`, `junit4`, `junit5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    /// A command template instead of the framework's (`{file}` and `{test}` substituted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Seconds one test run may take (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// The Docker image tests run in (default: the harness's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The Python the local sandbox runs tests with: an interpreter or a virtualenv
    /// directory, relative to the case directory or absolute (default: the harness's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// Docker: where `image` keeps the repository (e.g. `/testbed`); the case's tree is
    /// uploaded over it and tests run there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Docker: a shell line every command runs after, in bash (e.g. `source
    /// /opt/miniconda3/bin/activate && conda activate testbed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activate: Option<String>,
}

/// One case, as `case.json` says it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub id: String,
    /// `python`, `typescript` or `java`.
    pub language: String,
    /// A directory, a git repository or an archive; relative to the case directory.
    pub repo: String,
    /// With a git repository: the buggy commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_file: Option<String>,
    /// The fix (code only), a unified diff file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gold_patch: Option<String>,
    /// The test that came with the fix, a unified diff file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gold_test_patch: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub tests: TestSpec,
    /// Tests the gold test patch turns from failing to passing (SWT-bench's FAIL_TO_PASS), for reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fail_to_pass: Vec<String>,
    /// Where the case came from (an instance id, a commit, a URL), kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<serde_json::Value>,
    /// The case directory (not in the file).
    #[serde(skip)]
    pub dir: PathBuf,
}

fn is_default(t: &TestSpec) -> bool {
    *t == TestSpec::default()
}

#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// `case.json` is missing or unreadable.
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// `case.json` is not valid JSON, or a field is missing, unknown or of the wrong type.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// A field is there but its value is wrong.
    #[error("{path}: field `{field}`: {problem}")]
    Field { path: String, field: &'static str, problem: String },
    /// The case cannot be set up (repository, commit, patch); the message says which.
    #[error("case {case}: {problem}")]
    Setup { case: String, problem: String },
}

impl CaseError {
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            CaseError::Read { .. } => "a case is a directory with a case.json",
            CaseError::Parse { .. } | CaseError::Field { .. } => {
                "case.json needs id, language, repo and issue_text or issue_file; see `reproagent bench run --help`"
            }
            CaseError::Setup { .. } => return None,
        })
    }
    fn setup(case: &str, problem: impl Into<String>) -> Self {
        CaseError::Setup { case: case.to_string(), problem: problem.into() }
    }
}

pub const LANGUAGES: &[&str] = &["python", "typescript", "java"];

impl Case {
    /// Read and validate `DIR/case.json`. Structural problems are errors that name the
    /// field; whether the repository and patches are usable is [`Case::check`]'s job.
    pub fn load(dir: &Path) -> Result<Case, CaseError> {
        let path = dir.join("case.json");
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| CaseError::Read { path: shown.clone(), source })?;
        let mut case: Case = serde_json::from_str(&text)
            .map_err(|e| CaseError::Parse { path: shown.clone(), message: e.to_string() })?;
        case.dir = dir.to_path_buf();
        case.validate().map_err(|(field, problem)| CaseError::Field { path: shown, field, problem })?;
        Ok(case)
    }

    /// Field-level checks: which field is wrong and how.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.id.is_empty()
            || !self.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || self.id.starts_with('.')
        {
            return Err(("id", format!("{:?} must be non-empty letters, digits, '-', '_' or '.'", self.id)));
        }
        if !LANGUAGES.contains(&self.language.as_str()) {
            return Err(("language", format!("{:?} is not one of {}", self.language, LANGUAGES.join(", "))));
        }
        if self.repo.trim().is_empty() {
            return Err(("repo", "empty".into()));
        }
        match (&self.issue_text, &self.issue_file) {
            (None, None) => return Err(("issue_text", "missing: give issue_text or issue_file".into())),
            (Some(_), Some(_)) => return Err(("issue_file", "give issue_text or issue_file, not both".into())),
            (Some(t), None) if t.trim().is_empty() => return Err(("issue_text", "empty".into())),
            _ => {}
        }
        if let Some(c) = &self.base_commit {
            if c.is_empty()
                || !c.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '^' | '~'))
            {
                return Err(("base_commit", format!("{c:?} is not a commit")));
            }
        }
        if let Some(w) = &self.tests.workdir {
            if !w.starts_with('/') || w.split('/').any(|c| c == "..") || w.trim_end_matches('/').is_empty() {
                return Err((
                    "tests.workdir",
                    format!("{w:?} must be an absolute directory inside the image, like /testbed"),
                ));
            }
        }
        if self.tests.python.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Err(("tests.python", "empty: give an interpreter or a virtualenv directory".into()));
        }
        if let Some(f) = &self.tests.framework {
            if crate::sandbox::runners::Framework::parse_name(f).is_none() {
                return Err(("tests.framework", format!("{f:?} is not a framework we run")));
            }
        }
        Ok(())
    }

    /// A path of the case, relative to its directory unless absolute.
    pub fn path_of(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir.join(p)
        }
    }

    pub fn issue(&self) -> Result<String, CaseError> {
        match (&self.issue_text, &self.issue_file) {
            (Some(t), _) => Ok(t.clone()),
            (None, Some(f)) => std::fs::read_to_string(self.path_of(f))
                .map_err(|e| CaseError::setup(&self.id, format!("issue_file {f}: {e}"))),
            (None, None) => Err(CaseError::setup(&self.id, "no issue text")),
        }
    }

    fn patch(&self, field: &str, p: &Option<String>) -> Result<Option<String>, CaseError> {
        match p {
            None => Ok(None),
            Some(f) => std::fs::read_to_string(self.path_of(f))
                .map(Some)
                .map_err(|e| CaseError::setup(&self.id, format!("{field} {f}: {e}"))),
        }
    }
    pub fn gold_patch_text(&self) -> Result<Option<String>, CaseError> {
        self.patch("gold_patch", &self.gold_patch)
    }
    pub fn gold_test_patch_text(&self) -> Result<Option<String>, CaseError> {
        self.patch("gold_test_patch", &self.gold_test_patch)
    }

    /// Everything that can be checked without running anything: the repository is
    /// there, the issue and patches read, and the patches apply to the buggy tree.
    pub fn check(&self) -> Result<(), CaseError> {
        let tmp = tempfile::tempdir().map_err(|e| CaseError::setup(&self.id, format!("temp dir: {e}")))?;
        self.materialize(tmp.path())?;
        self.issue()?;
        if let Some(p) = self.gold_patch_text()? {
            apply_patch(tmp.path(), &p, true)
                .map_err(|e| CaseError::setup(&self.id, format!("gold_patch does not apply: {e}")))?;
        }
        if let Some(p) = self.gold_test_patch_text()? {
            apply_patch(tmp.path(), &p, true)
                .map_err(|e| CaseError::setup(&self.id, format!("gold_test_patch does not apply: {e}")))?;
        }
        Ok(())
    }

    /// Write the buggy tree into `dest` (an empty directory).
    pub fn materialize(&self, dest: &Path) -> Result<(), CaseError> {
        let src = self.path_of(&self.repo);
        let err = |p: String| CaseError::setup(&self.id, p);
        if !src.exists() {
            return Err(err(format!("repository {} does not exist", src.display())));
        }
        let name = src.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if src.is_file() {
            if !(name.ends_with(".tar") || name.ends_with(".tar.gz") || name.ends_with(".tgz")) {
                return Err(err(format!(
                    "repository {} is a file but not a .tar, .tar.gz or .tgz archive",
                    src.display()
                )));
            }
            let file = std::fs::File::open(&src).map_err(|e| err(format!("{}: {e}", src.display())))?;
            let reader: Box<dyn Read> =
                if name.ends_with(".tar") { Box::new(file) } else { Box::new(flate2::read::GzDecoder::new(file)) };
            unpack(reader, dest, true).map_err(|e| err(format!("{}: {e}", src.display())))?;
            return Ok(());
        }
        if let Some(commit) = &self.base_commit {
            let out = Command::new("git")
                .arg("-C")
                .arg(&src)
                .args(["archive", "--format=tar", commit])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| err(format!("git: {e}")))?;
            if !out.status.success() {
                return Err(err(format!(
                    "base_commit {commit} of {}: {}",
                    src.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            unpack(&out.stdout[..], dest, false).map_err(|e| err(format!("git archive: {e}")))?;
            return Ok(());
        }
        // The sandbox's copy: the same entries a sandbox would take, cloned where it can.
        crate::sandbox::copy::copy_tree(&src, dest)
            .map(|_| ())
            .map_err(|e| err(format!("copying {}: {e}", src.display())))
    }
}

/// Unpack a tar stream into `dest`; with `strip`, drop a single top-level directory.
/// The staging dir beside `dest` is registered for an interrupt, and the writes hold the
/// fill gate: an interrupt waits for the unpack, then deletes both (before, it deleted
/// `dest` and left the staging dir behind, or `create_dir_all(dest)` brought `dest` back).
fn unpack(reader: impl Read, dest: &Path, strip: bool) -> std::io::Result<()> {
    let mut archive = tar::Archive::new(reader);
    let staging = tempfile::tempdir_in(dest.parent().unwrap_or(Path::new("/tmp")))?;
    let _interrupt = crate::sandbox::interrupt::register_dir(staging.path());
    let _fill = crate::sandbox::interrupt::filling();
    archive.set_preserve_permissions(true);
    archive.unpack(staging.path())?;
    let entries: Vec<_> = std::fs::read_dir(staging.path())?.collect::<Result<_, _>>()?;
    let root = if strip && entries.len() == 1 && entries[0].file_type()?.is_dir() {
        entries[0].path()
    } else {
        staging.path().to_path_buf()
    };
    std::fs::create_dir_all(dest)?;
    for e in std::fs::read_dir(&root)? {
        let e = e?;
        std::fs::rename(e.path(), dest.join(e.file_name()))?;
    }
    Ok(())
}

/// Copy a directory tree (a run's artifacts), leaving out `.git` and `.reproagent`;
/// symlinks stay symlinks. Repositories are copied with [`crate::sandbox::copy::copy_tree`].
pub fn copy_tree(src: &Path, dest: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dest)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let name = e.file_name();
        if name == ".git" || name == ".reproagent" {
            continue;
        }
        let (from, to) = (e.path(), dest.join(&name));
        let ft = e.file_type()?;
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if ft.is_dir() {
            copy_tree(&from, &to)?;
        } else {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// Apply a unified diff at `root` with `git apply -p1` (`check` only tests that it
/// applies). Works whether or not `root` is a git repository.
pub fn apply_patch(root: &Path, patch: &str, check: bool) -> Result<(), String> {
    use std::io::Write;
    let mut cmd = Command::new("git");
    cmd.arg("apply").arg("--whitespace=nowarn").arg("-p1");
    if check {
        cmd.arg("--check");
    }
    // Keep git from treating an enclosing repository as the root it applies to.
    let ceiling = root.parent().unwrap_or(root);
    // The patch's writes hold the fill gate: an interrupt deletes the tree before or after.
    let _fill = crate::sandbox::interrupt::filling();
    let mut child = cmd
        .arg("-")
        .current_dir(root)
        .env("GIT_CEILING_DIRECTORIES", ceiling)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("git apply: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(patch.as_bytes()).map_err(|e| format!("git apply: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("git apply: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let msg = String::from_utf8_lossy(&out.stderr);
        Err(msg.lines().filter(|l| !l.trim().is_empty()).take(3).collect::<Vec<_>>().join("; "))
    }
}

/// The files a unified diff touches (their new paths; `/dev/null` left out).
pub fn patch_files(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("+++ ") {
            let p = rest.split('\t').next().unwrap_or("").trim();
            if p == "/dev/null" {
                continue;
            }
            let p = p.strip_prefix("b/").unwrap_or(p).to_string();
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// A unified diff that adds (or replaces) `files` relative to `root`: new files as
/// `/dev/null` additions, existing ones as a whole-file replacement.
pub fn diff_for_files(root: &Path, files: &[(String, String)]) -> String {
    let mut out = String::new();
    for (path, content) in files {
        let old = std::fs::read_to_string(root.join(path)).ok();
        let new_lines: Vec<&str> = content.lines().collect();
        out.push_str(&format!("diff --git a/{path} b/{path}\n"));
        match &old {
            None => out.push_str(&format!(
                "new file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{} @@\n",
                new_lines.len()
            )),
            Some(o) => {
                let n = o.lines().count();
                out.push_str(&format!(
                    "--- a/{path}\n+++ b/{path}\n@@ -{},{} +{},{} @@\n",
                    (n > 0) as usize,
                    n,
                    (!new_lines.is_empty()) as usize,
                    new_lines.len()
                ));
                for l in o.lines() {
                    out.push_str(&format!("-{l}\n"));
                }
                if !o.is_empty() && !o.ends_with('\n') {
                    out.push_str("\\ No newline at end of file\n");
                }
            }
        }
        for l in &new_lines {
            out.push_str(&format!("+{l}\n"));
        }
        if !content.is_empty() && !content.ends_with('\n') {
            out.push_str("\\ No newline at end of file\n");
        }
    }
    out
}

/// Load every case under `suite`: the directory itself when it holds a `case.json`,
/// else each subdirectory that does (sorted by name). A case that fails to load is
/// returned as its error, with the directory it came from, so the run can report it.
pub fn load_suite(suite: &Path) -> std::io::Result<Vec<(PathBuf, Result<Case, CaseError>)>> {
    if suite.join("case.json").exists() {
        return Ok(vec![(suite.to_path_buf(), Case::load(suite))]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(suite)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join("case.json").exists())
        .collect();
    dirs.sort();
    Ok(dirs
        .into_iter()
        .map(|d| {
            let c = Case::load(&d);
            (d, c)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_for_new_file_applies() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        let patch = diff_for_files(
            dir.path(),
            &[("t/new.py".into(), "x = 1\ny = 2\n".into()), ("a.txt".into(), "three\n".into())],
        );
        apply_patch(dir.path(), &patch, false).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("t/new.py")).unwrap(), "x = 1\ny = 2\n");
        assert_eq!(std::fs::read_to_string(dir.path().join("a.txt")).unwrap(), "three\n");
        assert_eq!(patch_files(&patch), vec!["t/new.py".to_string(), "a.txt".to_string()]);
    }

    #[test]
    fn validation_names_the_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("case.json"), r#"{"id":"a","language":"cobol","repo":"r","issue_text":"x"}"#)
            .unwrap();
        let e = Case::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("`language`") && e.contains("cobol"), "{e}");
        std::fs::write(dir.path().join("case.json"), r#"{"id":"a","language":"python","issue_text":"x"}"#).unwrap();
        let e = Case::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("missing field `repo`"), "{e}");
        std::fs::write(
            dir.path().join("case.json"),
            r#"{"id":"a","language":"python","repo":"r","issue_text":"x","colour":1}"#,
        )
        .unwrap();
        let e = Case::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("unknown field `colour`"), "{e}");
    }
}
