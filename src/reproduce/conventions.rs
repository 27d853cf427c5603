//! The repository's test conventions, for the code an issue is about: which languages it
//! is written in, which framework runs its tests, where the tests of the SUSPECT code
//! live (the test module that reaches it in the graph, else the one mirroring its path)
//! and an example test from there. The pipeline's prompts and the key-free mode's test
//! both read them, so a generated test goes where the repository's own tests of that
//! code are, in their form, and runs the way they run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use crate::lang::Lang;
use crate::sandbox::runners::{self, Framework, Layout, PytestConfig};
use crate::store::Store;

/// A language counts for the repository when it holds at least this share of its
/// indexed lines (a few vendored JavaScript files do not make a Python project
/// "typescript").
const LANGUAGE_SHARE: f64 = 0.10;
/// How many lines of the example test go into the prompts.
const EXAMPLE_LINES: usize = 60;
/// How many suspect files are looked at for their tests.
const SUSPECTS: usize = 3;

/// The repository's test conventions, filled into the prompts.
#[derive(Debug, Clone, Serialize)]
pub struct Conventions {
    /// The languages with real code in the repository, most lines first.
    pub languages: Vec<String>,
    /// A name of [`runners::FRAMEWORKS`].
    pub framework: String,
    /// Where a new test goes (relative to the root).
    pub test_dir: String,
    /// The existing test module of the suspect code (or the one that would mirror it).
    pub test_module: Option<String>,
    /// The suspect file the test module is for.
    pub suspect: Option<String>,
    /// How the test module is found: `reaches`, `mirror`, `nearest`, `most tests`.
    pub found_by: String,
    pub example_path: Option<String>,
    pub example: Option<String>,
    /// The command that runs one new test in the test directory.
    pub command: String,
    /// Framework-specific guidance (form, set-up, what to avoid).
    pub notes: Vec<String>,
}

impl Conventions {
    /// The Markdown the prompts carry.
    pub fn text(&self) -> String {
        let mut s = format!(
            "- languages: {}\n- test framework: {}\n- test directory: {}\n",
            if self.languages.is_empty() { "unknown".into() } else { self.languages.join(", ") },
            self.framework,
            self.test_dir
        );
        if let (Some(m), Some(sus)) = (&self.test_module, &self.suspect) {
            s.push_str(&format!("- tests of `{sus}` live in `{m}` ({})\n", self.found_by));
        }
        if !self.command.is_empty() {
            s.push_str(&format!("- a new test there runs with: `{}`\n", self.command));
        }
        for n in &self.notes {
            s.push_str(&format!("- {n}\n"));
        }
        match (&self.example_path, &self.example) {
            (Some(p), Some(code)) => s.push_str(&format!("- an existing test, `{p}`:\n\n```\n{code}\n```\n")),
            _ => s.push_str("- no existing test file was found\n"),
        }
        s
    }

    /// The language the tests are written in.
    pub fn lang(&self) -> Option<Lang> {
        runners::FRAMEWORKS.iter().find(|f| f.name == self.framework).and_then(|f| Lang::from_name(f.lang))
    }
}

/// One indexed file.
struct FileRow {
    path: String,
    lang: String,
    lines: i64,
    is_test: bool,
}

fn files(store: &Store) -> Vec<FileRow> {
    crate::graph::files(store)
        .map(|fs| {
            fs.into_iter().map(|f| FileRow { path: f.path, lang: f.lang, lines: f.lines, is_test: f.is_test }).collect()
        })
        .unwrap_or_default()
}

/// Files with at least one test function or method (by the language's test prefix).
fn files_with_tests(store: &Store, prefix: &str) -> BTreeMap<String, usize> {
    crate::graph::test_function_counts(store, prefix).unwrap_or_default()
}

/// The tests (`test_of`) that reach an entity of `file`, counted per test file.
fn reaching_tests(store: &Store, file: &str) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for test in crate::graph::tests_reaching_file(store, file).unwrap_or_default() {
        if let Some((path, _)) = test.split_once(':') {
            out.entry(path.to_string()).or_default().insert(test.clone());
        }
    }
    out.into_iter().map(|(k, v)| (k, v.len())).collect()
}

/// The languages holding at least [`LANGUAGE_SHARE`] of the indexed lines, most first
/// (the largest one always).
fn languages(files: &[FileRow]) -> Vec<String> {
    let mut lines: BTreeMap<&str, i64> = BTreeMap::new();
    for f in files.iter().filter(|f| !f.lang.is_empty()) {
        *lines.entry(f.lang.as_str()).or_default() += f.lines.max(1);
    }
    let total: i64 = lines.values().sum::<i64>().max(1);
    let mut v: Vec<(&str, i64)> = lines.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.iter()
        .enumerate()
        .filter(|(i, (_, n))| *i == 0 || *n as f64 / total as f64 >= LANGUAGE_SHARE)
        .map(|(_, (l, _))| l.to_string())
        .collect()
}

fn stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split('.').next().unwrap_or(name)
}

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
}

/// The words of a directory path, without the words that only say "tests"
/// (`tests/utils_tests` -> `utils`; `sympy/core/tests` -> `sympy core`).
fn dir_words(dir: &str) -> BTreeSet<String> {
    dir.split('/')
        .flat_map(|c| c.split(['_', '-', '.']))
        .filter(|w| {
            !w.is_empty()
                && !matches!(*w, "tests" | "test" | "testing" | "__tests__" | "spec" | "src" | "lib" | "main" | "java")
        })
        .map(str::to_lowercase)
        .collect()
}

fn shared_words(a: &str, b: &str) -> usize {
    dir_words(a).intersection(&dir_words(b)).count()
}

/// Is `test` named after `source` (`text.py` <- `test_text.py`, `x.js` <- `x.test.js`,
/// `Foo.java` <- `FooTest.java`)?
fn mirrors(source: &str, test: &str) -> bool {
    let s = stem(source).to_lowercase();
    let name = test.rsplit('/').next().unwrap_or(test).to_lowercase();
    let t = stem(test).to_lowercase();
    // A prefix before `test_` (pylint's `unittest_typecheck.py`, `python_files = *test_*.py`).
    let prefixed = t.strip_suffix(&format!("test_{s}")).is_some_and(|p| p.chars().all(|c| c.is_ascii_alphanumeric()));
    !s.is_empty()
        && (prefixed
            || t == format!("test_{s}")
            || t == format!("{s}_test")
            || t == format!("{s}_tests")
            || t == format!("tests_{s}")
            || t == format!("test{s}")
            || t == format!("{s}test")
            || t == format!("{s}tests")
            || name.starts_with(&format!("{s}.test."))
            || name.starts_with(&format!("{s}.spec.")))
}

/// Is `path` inside one of pytest's `testpaths` (or are there none)?
fn in_testpaths(config: Option<&PytestConfig>, path: &str) -> bool {
    match config {
        Some(c) if !c.testpaths.is_empty() => c.testpaths.iter().any(|t| {
            let t = t.trim_end_matches('/');
            t == "." || path == t || path.starts_with(&format!("{t}/"))
        }),
        _ => true,
    }
}

/// The real test files of a language: the index's test files that hold tests (Python:
/// a `test*` function or method; `conftest.py` and helpers do not), inside pytest's
/// `testpaths` when the project sets them. A script named like a test
/// (`bin/test_executable.py`) or a `tests.py` without a test in it is not one.
fn real_tests(
    files: &[FileRow],
    with_tests: &BTreeMap<String, usize>,
    lang: &str,
    config: Option<&PytestConfig>,
) -> BTreeMap<String, usize> {
    files
        .iter()
        .filter(|f| f.is_test && f.lang == lang && in_testpaths(config, &f.path))
        .filter_map(|f| match lang {
            "python" => with_tests.get(&f.path).map(|n| (f.path.clone(), *n)),
            _ => Some((f.path.clone(), with_tests.get(&f.path).copied().unwrap_or(1).max(1))),
        })
        .collect()
}

/// Where the tests of `suspect` live: (test module, how it was found). An existing test
/// file that reaches it and is named after it first, then one named after it, then the
/// file whose tests reach it most; else a new module named after it in the test
/// directory closest to it.
fn test_module_for(store: &Store, suspect: &str, tests: &BTreeMap<String, usize>) -> Option<(String, &'static str)> {
    let reach = reaching_tests(store, suspect);
    // (named after it, reaches it, shared directory words, reaching tests)
    type Rank = (bool, bool, usize, usize);
    let mut best: Option<(Rank, &str, &'static str)> = None;
    for path in tests.keys() {
        let n = reach.get(path).copied().unwrap_or(0);
        let named = mirrors(suspect, path);
        if n == 0 && !named {
            continue;
        }
        let key = (named, n > 0, shared_words(dir_of(suspect), dir_of(path)), n);
        let how = if n > 0 { "its tests reach it in the call graph" } else { "named after it" };
        if best.as_ref().is_none_or(|(k, _, _)| key > *k) {
            best = Some((key, path, how));
        }
    }
    if let Some((_, p, how)) = best {
        return Some((p.to_string(), how));
    }
    new_module_for(suspect, tests).map(|p| (p, "no test reaches it: a new module mirroring its path"))
}

/// A new test module for `suspect` in the test directory that shares most words with
/// its directory (more tests break a tie), named as the tests there are named.
fn new_module_for(suspect: &str, tests: &BTreeMap<String, usize>) -> Option<String> {
    let mut dirs: BTreeMap<&str, usize> = BTreeMap::new();
    for (p, n) in tests {
        *dirs.entry(dir_of(p)).or_default() += n;
    }
    let sdir = dir_of(suspect);
    let (dir, _) = dirs.iter().max_by_key(|(d, n)| (shared_words(sdir, d), **n, std::cmp::Reverse(d.len())))?;
    let s = stem(suspect);
    let ext = suspect.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    let sample = tests.keys().find(|p| dir_of(p) == *dir).map(String::as_str).unwrap_or("");
    let sample_name = sample.rsplit('/').next().unwrap_or("");
    let name = match ext {
        "py" => {
            if stem(sample).ends_with("_test") {
                format!("{s}_test.py")
            } else {
                format!("test_{s}.py")
            }
        }
        "java" => format!("{s}Test.java"),
        _ => {
            let (kind, text) =
                if sample_name.contains(".spec.") { ("spec", sample_name) } else { ("test", sample_name) };
            let tail = text.rsplit_once('.').map(|(_, e)| e).unwrap_or(ext);
            format!("{s}.{kind}.{tail}")
        }
    };
    Some(if dir.is_empty() { name } else { format!("{dir}/{name}") })
}

fn read_head(root: &Path, rel: &str) -> Option<String> {
    crate::confine::read_text(root, rel).map(|c| c.lines().take(EXAMPLE_LINES).collect::<Vec<_>>().join("\n"))
}

/// Guidance for writing a test in this framework here.
fn notes(root: &Path, framework: Framework, test_dir: &str, layout: &Layout) -> Vec<String> {
    let mut out = Vec::new();
    match framework {
        Framework::Django => {
            out.push(format!(
                "Django's own suite: write a `django.test.SimpleTestCase` subclass (`django.test.TestCase` when the test touches the database or models) in the app test package `{test_dir}/`; tests/runtests.py configures settings (test_sqlite): no `settings.configure()` or `django.setup()` in the test; it runs by label (`app_tests.test_module.Class.test_name`)"
            ));
        }
        Framework::DjangoManage => {
            out.push("a Django project: write a `django.test.TestCase` subclass in the app's tests module; `python manage.py test` configures settings: no `settings.configure()` in the test".into());
        }
        Framework::Pytest => {
            if let Some(c) = PytestConfig::read(root) {
                out.push(format!("pytest runs from the repository root with the configuration in `{}`", c.file));
            }
            if layout.pytest_itself {
                out.push("this is pytest's own repository: tests run against its `src/_pytest`, not an installed pytest; to test pytest's behaviour on a test file, use the `pytester` fixture (`pytester.makepyfile(...)`, `pytester.runpytest(...)`, `result.assert_outcomes(...)`) as the tests in `testing/` do".into());
            }
            out.push("name test functions `test_*`; the test runs by node id".into());
        }
        Framework::Unittest => {
            out.push("write `unittest.TestCase` subclasses; the test runs by label (`module.Class`)".into())
        }
        _ => {}
    }
    if framework.is_python() {
        out.push("import the names the test uses; no `from package import *` (it can bring in a package's own `test` function, which a runner would collect and run)".into());
    }
    out
}

/// The conventions for the code at `suspects` (paths relative to the root, most
/// suspect first; may be empty): from the index's files, test entities and `test_of`.
pub fn conventions(root: &Path, suspects: &[String]) -> Conventions {
    let store = crate::store::open(&crate::store::db_path(root)).ok();
    let files = store.as_ref().map(files).unwrap_or_default();
    let languages = languages(&files);
    // The suspects' language decides the tests' language; else the largest one.
    let is_source = |p: &str| files.iter().any(|f| f.path == p && !f.is_test);
    let suspects: Vec<&String> = {
        let mut seen: Vec<&String> = Vec::new();
        for s in suspects {
            if is_source(s) && !seen.contains(&s) {
                seen.push(s);
            }
        }
        seen.into_iter().take(SUSPECTS).collect()
    };
    let lang = suspects
        .first()
        .and_then(|s| Lang::of_path(Path::new(s.as_str())))
        .map(|l| l.name().to_string())
        .or_else(|| languages.first().cloned())
        .unwrap_or_default();
    let config = PytestConfig::read(root);
    let prefix =
        Lang::from_name(&lang).map(|l| l.descriptor().tests.entity_prefix.clone()).unwrap_or_else(|| "test".into());
    let with_tests = store.as_ref().map(|s| files_with_tests(s, &prefix)).unwrap_or_default();
    let tests = real_tests(&files, &with_tests, &lang, if lang == "python" { config.as_ref() } else { None });

    let mut chosen: Option<(String, String, &'static str)> = None;
    if let Some(store) = store.as_ref() {
        for s in &suspects {
            if let Some((m, how)) = test_module_for(store, s, &tests) {
                let existing = tests.contains_key(&m);
                // An existing test module of a later suspect beats a made-up one of the first.
                if existing || chosen.is_none() {
                    chosen = Some(((*s).clone(), m, how));
                }
                if existing {
                    break;
                }
            }
        }
    }
    // No suspect: the directory with the most tests, and its largest test file.
    let fallback = || -> Option<String> {
        let mut dirs: BTreeMap<&str, usize> = BTreeMap::new();
        for (p, n) in &tests {
            *dirs.entry(dir_of(p)).or_default() += n;
        }
        let (dir, _) = dirs.iter().max_by_key(|(d, n)| (**n, std::cmp::Reverse(*d)))?;
        tests
            .iter()
            .filter(|(p, _)| dir_of(p) == *dir)
            .max_by_key(|(p, n)| (**n, std::cmp::Reverse(*p)))
            .map(|(p, _)| p.clone())
    };
    let (suspect, test_module, found_by) = match chosen {
        Some((s, m, how)) => (Some(s), Some(m), how.to_string()),
        None => (None, fallback(), "the directory with the most tests".to_string()),
    };
    let test_dir = test_module
        .as_deref()
        .map(dir_of)
        .map(str::to_string)
        .or_else(|| config.as_ref().filter(|_| lang == "python").and_then(|c| c.testpaths.first().cloned()))
        .unwrap_or_else(|| {
            match lang.as_str() {
                "java" => "src/test/java",
                "typescript" => "test",
                _ => "tests",
            }
            .into()
        });
    // The example: the test module itself when it exists, else the largest test file
    // in its directory, else any.
    let example_path = test_module
        .clone()
        .filter(|m| tests.contains_key(m))
        .or_else(|| {
            tests
                .iter()
                .filter(|(p, _)| dir_of(p) == test_dir)
                .max_by_key(|(p, n)| (**n, std::cmp::Reverse(*p)))
                .map(|(p, _)| p.clone())
        })
        .or_else(fallback);
    let example = example_path.as_deref().and_then(|p| read_head(root, p));
    let detected =
        example_path.as_deref().zip(example.as_deref()).and_then(|(p, c)| runners::detect(root, p, c)).or_else(|| {
            let probe = test_module
                .clone()
                .unwrap_or_else(|| format!("{test_dir}/test_x.{}", if lang == "python" { "py" } else { "js" }));
            runners::detect(root, &probe, "")
        });
    let framework = detected.unwrap_or(match lang.as_str() {
        "python" => Framework::Pytest,
        "typescript" => Framework::NodeTest,
        "java" => Framework::Junit4,
        _ => Framework::Custom,
    });
    let layout = Layout::of(root);
    // The command that runs one new test there, by node id or label.
    let command = if framework == Framework::Custom {
        String::new()
    } else {
        let (file, test) = match lang.as_str() {
            "python" => {
                let test =
                    if matches!(framework, Framework::Pytest) { "test_name" } else { "ReproduceTests.test_name" };
                (format!("{test_dir}/test_reproduce.py"), Some(test))
            }
            "java" => (format!("{test_dir}/ReproduceTest.java"), None),
            _ => (format!("{test_dir}/reproduce.test.js"), None),
        };
        let file = file.trim_start_matches('/').to_string();
        let line = runners::command_line(framework, &file, test, "", None, &layout);
        line.split_once(" && mkdir -p .reproagent-run && ").map(|(_, l)| l.to_string()).unwrap_or(line)
    };
    Conventions {
        languages,
        framework: framework.name().to_string(),
        notes: notes(root, framework, &test_dir, &layout),
        test_dir,
        test_module,
        suspect: suspect.clone(),
        found_by,
        example_path,
        example,
        command,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_name_tests_after_sources() {
        assert!(mirrors("django/utils/text.py", "tests/utils_tests/test_text.py"));
        assert!(mirrors("sympy/core/function.py", "sympy/core/tests/test_function.py"));
        assert!(mirrors("lib/x.js", "test/x.test.js"));
        assert!(mirrors("src/main/java/a/Foo.java", "src/test/java/a/FooTest.java"));
        assert!(!mirrors("django/utils/text.py", "tests/utils_tests/test_html.py"));
        assert!(mirrors("pylint/checkers/typecheck.py", "tests/checkers/unittest_typecheck.py"));
        assert!(!mirrors("pylint/checkers/typecheck.py", "tests/checkers/unittest_typecheck2.py"));
        assert_eq!(shared_words("django/utils", "tests/utils_tests"), 1);
        assert_eq!(shared_words("sympy/core", "sympy/core/tests"), 2);
    }

    #[test]
    fn new_modules_go_to_the_closest_test_directory() {
        let tests: BTreeMap<String, usize> = [
            ("tests/utils_tests/test_html.py", 5),
            ("tests/admin_views/tests.py", 300),
            ("sympy/core/tests/test_basic.py", 3),
            ("test/a.test.mjs", 1),
        ]
        .iter()
        .map(|(p, n)| (p.to_string(), *n))
        .collect();
        assert_eq!(new_module_for("django/utils/text.py", &tests).as_deref(), Some("tests/utils_tests/test_text.py"));
        assert_eq!(
            new_module_for("sympy/core/function.py", &tests).as_deref(),
            Some("sympy/core/tests/test_function.py")
        );
        assert_eq!(
            new_module_for(
                "lib/x.js",
                &tests.iter().filter(|(p, _)| p.ends_with(".mjs")).map(|(p, n)| (p.clone(), *n)).collect()
            )
            .as_deref(),
            Some("test/x.test.mjs")
        );
    }

    #[test]
    fn vendored_lines_do_not_make_a_language() {
        let f = |path: &str, lang: &str, lines: i64| FileRow {
            path: path.into(),
            lang: lang.into(),
            lines,
            is_test: false,
        };
        let files = vec![f("a.py", "python", 9000), f("static/jquery.js", "typescript", 500), f("b.ts", "java", 2000)];
        assert_eq!(languages(&files), vec!["python".to_string(), "java".to_string()]);
    }
}
