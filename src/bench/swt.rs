//! SWT-bench import and export.
//!
//! Import: SWE-bench / SWT-bench instances (a JSON array or JSON Lines, as the Hugging
//! Face datasets are dumped) become case directories `OUT/<instance_id>/` over a local
//! checkout of each instance's repository: `case.json` (the base commit, the instance's
//! `FAIL_TO_PASS`, and the instance's identity under `source`), `issue.md` (the problem
//! statement), `gold.patch` (the fix) and `test.patch` (the tests that came with it).
//! An instance that cannot be imported (a field missing, no checkout, the base commit
//! not in the checkout, no file of a supported language) is skipped with the reason;
//! the others are imported.
//!
//! Export: a bench run's candidates as SWT-bench predictions, one object per case with
//! a candidate: `{"instance_id", "model_name_or_path", "model_patch"}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::case::{load_suite, patch_files, Case};
use super::mine::{git, has_commit, majority_language};
use super::BenchError;

/// Where the instances' repositories are checked out.
#[derive(Debug, Clone)]
pub enum Checkouts {
    /// One checkout for every instance.
    One(PathBuf),
    /// A directory of checkouts, named `owner__name` or `name`.
    Dir(PathBuf),
}

impl Checkouts {
    /// The checkout of `repo` (`owner/name`), as an absolute path.
    pub fn find(&self, repo: &str) -> Result<PathBuf, String> {
        let found = match self {
            Checkouts::One(dir) => {
                dir.is_dir().then(|| dir.clone()).ok_or_else(|| format!("checkout {} does not exist", dir.display()))?
            }
            Checkouts::Dir(dir) => {
                let name = repo.rsplit('/').next().unwrap_or(repo);
                let tried = [repo.replace('/', "__"), name.to_string()];
                tried.iter().map(|t| dir.join(t)).find(|p| p.is_dir()).ok_or_else(|| {
                    format!("no checkout of {repo} in {} (looked for {})", dir.display(), tried.join(" and "))
                })?
            }
        };
        std::fs::canonicalize(&found).map_err(|e| format!("{}: {e}", found.display()))
    }
}

/// One imported instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Imported {
    pub instance_id: String,
    pub case_id: String,
    pub dir: String,
}

/// One skipped instance: its id when it has one (else its position), and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Skipped {
    pub instance: String,
    pub reason: String,
}

/// What an import did: written as `OUT/import.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImportReport {
    pub file: String,
    pub imported: Vec<Imported>,
    pub skipped: Vec<Skipped>,
}

/// A test list as the datasets give it: a JSON list of strings, or a string holding
/// one (an empty string is an empty list).
pub fn parse_test_list(v: &Value) -> Result<Vec<String>, String> {
    let list = match v {
        Value::Array(_) => v.clone(),
        Value::String(s) if s.trim().is_empty() => return Ok(Vec::new()),
        Value::String(s) => serde_json::from_str(s).map_err(|e| format!("not a JSON list of test names: {e}"))?,
        Value::Null => return Ok(Vec::new()),
        other => return Err(format!("a list of test names was expected, not {other}")),
    };
    let Value::Array(items) = list else { return Err("a list of test names was expected".into()) };
    items
        .into_iter()
        .map(|i| match i {
            Value::String(s) => Ok(s),
            other => Err(format!("a test name is not a string: {other}")),
        })
        .collect()
}

/// A case id from an instance id: characters a case id may not hold become `-`.
pub fn case_id(instance_id: &str) -> String {
    let s: String = instance_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' })
        .collect();
    let s = s.trim_start_matches('.');
    if s.is_empty() {
        "instance".into()
    } else {
        s.to_string()
    }
}

/// An instance as read: where it is in the file (`#3`, `line 3`), and its JSON or why
/// it is not JSON.
pub type ReadInstance = (String, Result<Value, String>);

/// The instances of a file: a JSON array, or one JSON object a line. A line that is
/// not JSON is returned as its error, so it is skipped like any bad instance.
pub fn read_instances(path: &Path) -> Result<Vec<ReadInstance>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path.display().to_string(), e))?;
    if text.trim_start().starts_with('[') {
        let all: Vec<Value> = serde_json::from_str(&text)
            .map_err(|e| BenchError::Other(format!("{}: not a JSON array of instances: {e}", path.display())))?;
        return Ok(all.into_iter().enumerate().map(|(i, v)| (format!("#{}", i + 1), Ok(v))).collect());
    }
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            (format!("line {}", i + 1), serde_json::from_str::<Value>(l).map_err(|e| format!("not JSON: {e}")))
        })
        .collect())
}

fn field<'a>(v: &'a Value, name: &str) -> Result<&'a str, String> {
    match v.get(name) {
        None | Some(Value::Null) => Err(format!("missing field `{name}`")),
        Some(Value::String(s)) if s.trim().is_empty() => Err(format!("field `{name}` is empty")),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("field `{name}` is not a string")),
    }
}

/// Import every instance of `file` into case directories under `out`.
pub fn import(file: &Path, checkouts: &Checkouts, out: &Path) -> Result<ImportReport, BenchError> {
    let instances = read_instances(file)?;
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out.display().to_string(), e))?;
    let mut report = ImportReport { file: file.display().to_string(), ..ImportReport::default() };
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (pos, parsed) in instances {
        let name = parsed
            .as_ref()
            .ok()
            .and_then(|v| v.get("instance_id"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or(pos);
        let result = parsed.and_then(|v| {
            let id = case_id(field(&v, "instance_id")?);
            if let Some(other) = seen.get(&id) {
                return Err(format!("case id {id} is already taken by instance {other}"));
            }
            let dir = out.join(&id);
            import_one(&v, &id, checkouts, &dir)?;
            Ok((id, dir))
        });
        match result {
            Ok((id, dir)) => {
                seen.insert(id.clone(), name.clone());
                report.imported.push(Imported { instance_id: name, case_id: id, dir: dir.display().to_string() });
            }
            Err(reason) => report.skipped.push(Skipped { instance: name, reason }),
        }
    }
    let path = out.join("import.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
        .map_err(|e| BenchError::io(path.display().to_string(), e))?;
    Ok(report)
}

/// Check one instance and write its case directory.
fn import_one(v: &Value, id: &str, checkouts: &Checkouts, dir: &Path) -> Result<(), String> {
    let instance_id = field(v, "instance_id")?;
    let repo = field(v, "repo")?;
    let base_commit = field(v, "base_commit")?;
    let patch = field(v, "patch")?;
    let test_patch = field(v, "test_patch")?;
    let problem = field(v, "problem_statement")?;
    let fail_to_pass = parse_test_list(v.get("FAIL_TO_PASS").ok_or("missing field `FAIL_TO_PASS`")?)
        .map_err(|e| format!("field `FAIL_TO_PASS`: {e}"))?;
    let pass_to_pass = match v.get("PASS_TO_PASS") {
        None => Vec::new(),
        Some(p) => parse_test_list(p).map_err(|e| format!("field `PASS_TO_PASS`: {e}"))?,
    };
    let files = patch_files(patch);
    let language = majority_language(files.iter().map(String::as_str))
        .or_else(|| majority_language(patch_files(test_patch).iter().map(String::as_str)))
        .ok_or_else(|| {
            format!(
                "no Python, TypeScript or Java file in the patch ({})",
                if files.is_empty() { "no file".into() } else { files.join(", ") }
            )
        })?;
    let checkout = checkouts.find(repo)?;
    git(&checkout, &["rev-parse", "--git-dir"])
        .map_err(|_| format!("checkout {} is not a git repository", checkout.display()))?;
    if !has_commit(&checkout, base_commit) {
        return Err(format!(
            "base commit {base_commit} is not in the checkout {} (fetch it, or give the right checkout)",
            checkout.display()
        ));
    }

    let mut source = serde_json::json!({ "dataset": "swt-bench", "instance_id": instance_id, "repo": repo });
    for key in ["version", "created_at", "hints_text"] {
        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
            source[key] = x.clone();
        }
    }
    if !pass_to_pass.is_empty() {
        source["pass_to_pass"] = serde_json::json!(pass_to_pass);
    }
    let case = Case {
        id: id.to_string(),
        language: language.name().to_string(),
        repo: checkout.display().to_string(),
        base_commit: Some(base_commit.to_string()),
        issue_text: None,
        issue_file: Some("issue.md".into()),
        gold_patch: Some("gold.patch".into()),
        gold_test_patch: Some("test.patch".into()),
        tests: Default::default(),
        fail_to_pass,
        source: Some(source),
        dir: dir.to_path_buf(),
    };
    case.validate().map_err(|(f, p)| format!("the case would be invalid: field `{f}`: {p}"))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let written = write_case(dir, &case, problem, patch, test_patch);
    if written.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    written
}

/// Write a case directory's files and load it back.
fn write_case(dir: &Path, case: &Case, problem: &str, patch: &str, test_patch: &str) -> Result<(), String> {
    let with_newline = |s: &str| if s.ends_with('\n') { s.to_string() } else { format!("{s}\n") };
    let w = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{}: {e}", dir.join(name).display()))
    };
    w("issue.md", &with_newline(problem))?;
    w("gold.patch", &with_newline(patch))?;
    w("test.patch", &with_newline(test_patch))?;
    w("case.json", &serde_json::to_string_pretty(case).map_err(|e| e.to_string())?)?;
    Case::load(dir).map(|_| ()).map_err(|e| e.to_string())
}

/// One SWT-bench prediction.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Prediction {
    pub instance_id: String,
    pub model_name_or_path: String,
    /// A unified diff that adds the test.
    pub model_patch: String,
}

/// The name a run's predictions go under when none is given: `reproagent-<adapter>`,
/// with the model when there is one.
pub fn default_model_name(record: &super::BenchRecord) -> String {
    match &record.adapter.model {
        Some(m) => format!("reproagent-{}-{m}", record.adapter.name),
        None => format!("reproagent-{}", record.adapter.name),
    }
}

/// A run's candidates as predictions. The instance id is the suite case's
/// `source.instance_id` when it has one, else the case id; cases without a candidate
/// are left out.
/// The suite is read from the path the run recorded; when it is not there (the run was
/// made from another directory), case ids are used.
pub fn export(record: &super::BenchRecord, model_name: Option<&str>) -> Vec<Prediction> {
    let name = model_name.map(str::to_string).unwrap_or_else(|| default_model_name(record));
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    for (_, c) in load_suite(Path::new(&record.suite)).unwrap_or_default() {
        if let Ok(c) = c {
            if let Some(iid) = c.source.as_ref().and_then(|s| s.get("instance_id")).and_then(Value::as_str) {
                ids.insert(c.id.clone(), iid.to_string());
            }
        }
    }
    record
        .cases
        .iter()
        .filter_map(|c| {
            let patch = c.test_patch.as_ref().filter(|p| !p.trim().is_empty())?;
            Some(Prediction {
                instance_id: ids.get(&c.case_id).cloned().unwrap_or_else(|| c.case_id.clone()),
                model_name_or_path: name.clone(),
                model_patch: patch.clone(),
            })
        })
        .collect()
}

/// Predictions as JSON Lines (one object a line) or as one JSON array.
pub fn render(predictions: &[Prediction], jsonl: bool) -> Result<String, BenchError> {
    if jsonl {
        let mut s = String::new();
        for p in predictions {
            s.push_str(&serde_json::to_string(p)?);
            s.push('\n');
        }
        Ok(s)
    } else {
        Ok(serde_json::to_string_pretty(predictions)? + "\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_lists_as_lists_or_strings() {
        let want = vec!["tests/test_a.py::test_x".to_string(), "tests/test_a.py::test_y".to_string()];
        assert_eq!(parse_test_list(&json!(["tests/test_a.py::test_x", "tests/test_a.py::test_y"])).unwrap(), want);
        assert_eq!(
            parse_test_list(&json!("[\"tests/test_a.py::test_x\", \"tests/test_a.py::test_y\"]")).unwrap(),
            want
        );
        assert_eq!(parse_test_list(&json!("[]")).unwrap(), Vec::<String>::new());
        assert_eq!(parse_test_list(&json!("")).unwrap(), Vec::<String>::new());
        assert!(parse_test_list(&json!("tests/test_a.py")).unwrap_err().contains("not a JSON list"));
        assert!(parse_test_list(&json!([1])).unwrap_err().contains("not a string"));
        assert!(parse_test_list(&json!(3)).is_err());
    }

    #[test]
    fn case_ids_from_instance_ids() {
        assert_eq!(case_id("django__django-11099"), "django__django-11099");
        assert_eq!(case_id("owner/name#12"), "owner-name-12");
        assert_eq!(case_id("..x"), "x");
    }

    #[test]
    fn language_from_patch_files() {
        let patch = "diff --git a/src/a.ts b/src/a.ts\n--- a/src/a.ts\n+++ b/src/a.ts\n@@ -1 +1 @@\n-a\n+b\n";
        let files = patch_files(patch);
        assert_eq!(majority_language(files.iter().map(String::as_str)).map(|l| l.name()), Some("typescript"));
        for (path, lang) in [("x.py", "python"), ("x.jsx", "typescript"), ("x.cjs", "typescript"), ("X.java", "java")] {
            assert_eq!(majority_language([path]).map(|l| l.name()), Some(lang));
        }
    }

    #[test]
    fn jsonl_and_arrays_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jsonl");
        std::fs::write(&p, "{\"instance_id\": \"a\"}\n\nnot json\n").unwrap();
        let got = read_instances(&p).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got[0].1.is_ok());
        assert_eq!(got[1].0, "line 3");
        assert!(got[1].1.as_ref().unwrap_err().contains("not JSON"));
        std::fs::write(&p, "[{\"instance_id\": \"a\"}, {\"instance_id\": \"b\"}]").unwrap();
        assert_eq!(read_instances(&p).unwrap().len(), 2);
    }

    #[test]
    fn missing_fields_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let v = json!({"instance_id": "a__b-1", "repo": "a/b", "base_commit": "abc", "test_patch": "x", "problem_statement": "p", "FAIL_TO_PASS": "[]"});
        let e = import_one(&v, "a__b-1", &Checkouts::One(dir.path().to_path_buf()), &dir.path().join("c")).unwrap_err();
        assert_eq!(e, "missing field `patch`");
    }
}
