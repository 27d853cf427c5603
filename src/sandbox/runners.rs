//! Test runners: which framework a test file uses, the command that runs it with the
//! repository's own framework, and the parse of what it printed (or the report it
//! wrote) into one [`TestResult`]: passed / failed / errored, the failing tests, and
//! for each failure the exception or assertion type and its message.
//!
//! Structured reports are preferred to scraping text: pytest and JUnit write JUnit XML,
//! Jest and Vitest write their JSON; node:test prints TAP; unittest and Django's
//! runtests.py are read from their verbose text, which is stable across versions.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ExecOutput;

/// Where runners write their reports, relative to the repository copy.
pub const REPORT_DIR: &str = ".reproagent-run";

/// Test frameworks we run and read. [`FRAMEWORKS`] is the one list of them that the
/// test plan's schema, the prompts, the plan check, `run_test` and the key-free mode read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Framework {
    Pytest,
    Unittest,
    /// Django's own suite: `tests/runtests.py` with labels from `tests/`.
    Django,
    /// A Django project's `python manage.py test <label>`.
    DjangoManage,
    NodeTest,
    Jest,
    Vitest,
    Junit4,
    Junit5,
    /// An explicit command template; the result comes from the exit code.
    Custom,
}

/// One framework of [`FRAMEWORKS`]: its name (as serde writes it), the other names
/// `parse_name` takes, its language and what it is, for the prompts.
#[derive(Debug, Clone, Copy)]
pub struct FrameworkInfo {
    pub framework: Framework,
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub lang: &'static str,
    pub about: &'static str,
}

/// The frameworks a test can be planned, written and run with.
pub const FRAMEWORKS: &[FrameworkInfo] = &[
    FrameworkInfo { framework: Framework::Pytest, name: "pytest", aliases: &[], lang: "python", about: "pytest, run by node id from the repository root with its configuration" },
    FrameworkInfo { framework: Framework::Unittest, name: "unittest", aliases: &[], lang: "python", about: "unittest TestCase classes, `python3 -m unittest -v`" },
    FrameworkInfo {
        framework: Framework::Django,
        name: "django",
        aliases: &["django-runtests", "runtests"],
        lang: "python",
        about: "Django's own suite: SimpleTestCase/TestCase classes in an app package under tests/, run by label with tests/runtests.py",
    },
    FrameworkInfo {
        framework: Framework::DjangoManage,
        name: "django-manage",
        aliases: &["manage.py"],
        lang: "python",
        about: "a Django project's tests: TestCase classes run by label with `python manage.py test`",
    },
    FrameworkInfo { framework: Framework::NodeTest, name: "node-test", aliases: &["node:test", "node"], lang: "typescript", about: "node's built-in test runner (`node --test`)" },
    FrameworkInfo { framework: Framework::Jest, name: "jest", aliases: &[], lang: "typescript", about: "Jest" },
    FrameworkInfo { framework: Framework::Vitest, name: "vitest", aliases: &[], lang: "typescript", about: "Vitest" },
    FrameworkInfo { framework: Framework::Junit4, name: "junit4", aliases: &[], lang: "java", about: "JUnit 4 (`org.junit.Test`)" },
    FrameworkInfo { framework: Framework::Junit5, name: "junit5", aliases: &["junit"], lang: "java", about: "JUnit 5 (`org.junit.jupiter.api.Test`)" },
];

/// The names of [`FRAMEWORKS`], in order.
pub fn framework_names() -> Vec<&'static str> {
    FRAMEWORKS.iter().map(|f| f.name).collect()
}

/// The frameworks as a Markdown list for the prompts: `name` (language): what it is.
pub fn frameworks_text() -> String {
    FRAMEWORKS.iter().map(|f| format!("- `{}` ({}): {}\n", f.name, f.lang, f.about)).collect()
}

/// The JSON schema of a framework name: a string, one of [`FRAMEWORKS`].
pub fn framework_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": framework_names(),
        "description": "The test framework: one of the repository's frameworks listed in the conventions.",
    })
}

impl Framework {
    /// The framework's name in [`FRAMEWORKS`] (`custom` for a command template).
    pub fn name(self) -> &'static str {
        FRAMEWORKS.iter().find(|f| f.framework == self).map(|f| f.name).unwrap_or("custom")
    }

    pub fn parse_name(s: &str) -> Option<Framework> {
        let s = s.trim();
        FRAMEWORKS.iter().find(|f| f.name == s || f.aliases.contains(&s)).map(|f| f.framework)
    }

    /// The frameworks that run Python, read unittest's verbose text.
    pub fn is_python(self) -> bool {
        matches!(self, Framework::Pytest | Framework::Unittest | Framework::Django | Framework::DjangoManage)
    }
}

/// The outcome of a test run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TestStatus {
    /// Tests ran and all passed.
    Passed,
    /// Tests ran and at least one failed (an assertion, or an exception in a test body).
    Failed,
    /// The tests could not run as tests: collection, import or compile error, timeout,
    /// nothing collected, a crashed runner.
    Errored,
}

/// One failing test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestFailure {
    /// As the framework names it (`tests/test_x.py::test_a`, `com.acme.FooTest.bar()`).
    pub name: String,
    /// Exception or assertion type (`AssertionError`, `org.opentest4j.AssertionFailedError`).
    pub kind: Option<String>,
    pub message: String,
}

/// A structured test result.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TestResult {
    pub status: TestStatus,
    pub framework: Framework,
    /// The command line that ran.
    pub command: String,
    pub passed: u32,
    pub failed: u32,
    pub failures: Vec<TestFailure>,
    /// For `errored`: what went wrong, in a line or a few.
    pub error: Option<String>,
    /// What the run did differently from what was asked, and why (another runner,
    /// because the environment lacks the asked one), with the fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub output: ExecOutput,
}

/// Pick the framework for a test file from the file itself and the repository's manifests.
pub fn detect(repo: &Path, file: &str, content: &str) -> Option<Framework> {
    let ext = Path::new(file).extension().and_then(|e| e.to_str()).unwrap_or("");
    let read = |p: &str| crate::confine::read_text(repo, p).unwrap_or_default();
    match ext {
        "py" => Some(detect_python(repo, content)),
        "js" | "mjs" | "cjs" | "ts" | "mts" | "cts" | "tsx" | "jsx" => {
            if content.contains("'vitest'") || content.contains("\"vitest\"") {
                return Some(Framework::Vitest);
            }
            if content.contains("node:test") {
                return Some(Framework::NodeTest);
            }
            if content.contains("@jest/globals") {
                return Some(Framework::Jest);
            }
            let pkg: serde_json::Value = serde_json::from_str(&read("package.json")).unwrap_or_default();
            let dep = |name: &str| {
                ["dependencies", "devDependencies"].iter().any(|k| pkg.get(k).and_then(|d| d.get(name)).is_some())
            };
            let script = pkg.pointer("/scripts/test").and_then(|s| s.as_str()).unwrap_or("");
            if dep("vitest") || script.contains("vitest") {
                Some(Framework::Vitest)
            } else if dep("jest") || script.contains("jest") {
                Some(Framework::Jest)
            } else {
                Some(Framework::NodeTest)
            }
        }
        "java" => {
            if content.contains("org.junit.jupiter") {
                Some(Framework::Junit5)
            } else if content.contains("org.junit") {
                Some(Framework::Junit4)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The runner for a Python test when the environment has no pytest: Django's
/// `tests/runtests.py` for a test under `tests/` of a repository that has one, else
/// unittest (never the system's pytest, which cannot import the environment's packages).
pub fn without_pytest(repo: &Path, file: &str) -> Framework {
    if file.starts_with("tests/") && repo.join("tests/runtests.py").is_file() {
        Framework::Django
    } else {
        Framework::Unittest
    }
}

/// The module-level `def test_*` functions unittest would not collect (pytest style).
pub fn has_test_functions(content: &str) -> bool {
    content.lines().any(|l| l.starts_with("def test") || l.starts_with("async def test"))
}

/// unittest over a pytest-style file, for an environment without pytest: the file's
/// `TestCase`s as unittest loads them, plus each module-level `test*` function that
/// takes no argument as a test of its own, reported in unittest's `-v` format.
const UNITTEST_FUNCTIONS: &str = r#"import os, sys, inspect, unittest
path = sys.argv[1]
only = sys.argv[2] if len(sys.argv) > 2 else ""
name = os.path.splitext(path)[0].replace(os.sep, ".")
sys.path.insert(0, os.getcwd())
loader = unittest.TestLoader()
# The module first: an import error becomes a failed-import test, which reads as an error.
suite = loader.loadTestsFromName(name)
mod = sys.modules.get(name)


class Function(unittest.FunctionTestCase):
    def __str__(self):
        return "%s (%s.%s)" % (self._testFunc.__name__, name, self._testFunc.__name__)

    def id(self):
        return "%s.%s" % (name, self._testFunc.__name__)


def plain(f):
    return inspect.isfunction(f) and f.__module__ == name and not inspect.signature(f).parameters


if mod is not None and only:
    target = getattr(mod, only, None)
    suite = unittest.TestSuite([Function(target)]) if plain(target) else loader.loadTestsFromName(only, mod)
elif mod is not None:
    for key, f in list(vars(mod).items()):
        if key.startswith("test") and plain(f):
            suite.addTest(Function(f))
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
"#;

/// The shell line running [`UNITTEST_FUNCTIONS`] over `file` (and `test` in it).
pub fn unittest_functions_line(file: &str, test: Option<&str>) -> String {
    let t = test.map(|t| format!(" {}", sh_quote(t))).unwrap_or_default();
    format!(
        "rm -rf {REPORT_DIR} && mkdir -p {REPORT_DIR} && python3 -c {} {}{t}",
        sh_quote(UNITTEST_FUNCTIONS),
        sh_quote(file)
    )
}

/// Is `repo` Django's own tree: `tests/runtests.py` next to the `django` package?
pub fn is_django_tree(repo: &Path) -> bool {
    repo.join("tests/runtests.py").is_file() && repo.join("django/__init__.py").is_file()
}

/// Is `repo` a Django project run with `manage.py test` (and not with pytest-django)?
pub fn is_django_project(repo: &Path) -> bool {
    let manage = crate::confine::read_text(repo, "manage.py").unwrap_or_default();
    manage.contains("django") && !PytestConfig::read(repo).is_some_and(|c| c.django_settings)
}

fn detect_python(repo: &Path, content: &str) -> Framework {
    if is_django_tree(repo) {
        return Framework::Django;
    }
    if content.contains("import pytest") || content.contains("from pytest") {
        return Framework::Pytest;
    }
    if is_django_project(repo) {
        return Framework::DjangoManage;
    }
    let pytest_project = PytestConfig::read(repo).is_some() || repo.join("conftest.py").is_file();
    if !pytest_project && (content.contains("import unittest") || content.contains("from unittest")) {
        return Framework::Unittest;
    }
    Framework::Pytest
}

/// The repository's pytest configuration: the first of `pytest.ini`, `.pytest.ini`,
/// `pyproject.toml [tool.pytest.ini_options]`, `tox.ini [pytest]`, `setup.cfg
/// [tool:pytest]` at the root, as pytest itself picks it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PytestConfig {
    /// The file it came from, relative to the root.
    pub file: String,
    /// `testpaths`: where the suite lives.
    pub testpaths: Vec<String>,
    /// `python_files` globs (default `test_*.py`, `*_test.py`).
    pub python_files: Vec<String>,
    /// `python_functions` prefixes or globs (default `test`).
    pub python_functions: Vec<String>,
    /// `DJANGO_SETTINGS_MODULE` is set: pytest-django runs the suite.
    pub django_settings: bool,
}

impl PytestConfig {
    pub fn read(repo: &Path) -> Option<PytestConfig> {
        // Through the checked reader: a symlink out of the repository or a FIFO named
        // `pytest.ini` is no configuration.
        let read = |p: &str| crate::confine::read_text(repo, p);
        for name in ["pytest.ini", ".pytest.ini"] {
            if let Some(text) = read(name) {
                return Some(PytestConfig::from_ini(name, &ini_section(&text, "pytest").unwrap_or_default()));
            }
        }
        if let Some(text) = read("pyproject.toml") {
            let v: Option<toml::Value> = toml::from_str(&text).ok();
            if let Some(t) =
                v.as_ref().and_then(|v| v.get("tool")).and_then(|t| t.get("pytest")).and_then(|t| t.get("ini_options"))
            {
                let list = |k: &str| -> Vec<String> {
                    match t.get(k) {
                        Some(toml::Value::Array(a)) => {
                            a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()
                        }
                        Some(toml::Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
                        _ => Vec::new(),
                    }
                };
                return Some(PytestConfig {
                    file: "pyproject.toml".into(),
                    testpaths: list("testpaths"),
                    python_files: list("python_files"),
                    python_functions: list("python_functions"),
                    django_settings: t.get("DJANGO_SETTINGS_MODULE").is_some(),
                });
            }
        }
        for (name, section) in [("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")] {
            if let Some(kv) = read(name).and_then(|t| ini_section(&t, section)) {
                return Some(PytestConfig::from_ini(name, &kv));
            }
        }
        None
    }

    fn from_ini(file: &str, kv: &[(String, String)]) -> PytestConfig {
        let list = |k: &str| -> Vec<String> {
            kv.iter().filter(|(key, _)| key == k).flat_map(|(_, v)| v.split_whitespace().map(str::to_string)).collect()
        };
        PytestConfig {
            file: file.into(),
            testpaths: list("testpaths"),
            python_files: list("python_files"),
            python_functions: list("python_functions"),
            django_settings: kv.iter().any(|(k, _)| k == "DJANGO_SETTINGS_MODULE"),
        }
    }

    /// The prefix test functions must have (`python_functions`' first plain prefix).
    pub fn function_prefix(&self) -> String {
        self.python_functions.iter().find(|p| !p.contains(['*', '?', '['])).cloned().unwrap_or_else(|| "test".into())
    }
}

/// The `key = value` lines of one INI section (continuation lines joined with spaces),
/// or `None` when the section is absent.
fn ini_section(text: &str, section: &str) -> Option<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut inside = false;
    let mut found = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') && t.ends_with(']') {
            inside = t[1..t.len() - 1].trim() == section;
            found |= inside;
            continue;
        }
        if !inside || t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(last) = out.last_mut() {
                last.1.push(' ');
                last.1.push_str(t);
            }
        } else if let Some((k, v)) = t.split_once('=').or_else(|| t.split_once(':')) {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    found.then_some(out)
}

/// What a command line needs to know of the repository beyond the test file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layout {
    /// Directories (relative to the root) put first on `PYTHONPATH`: the `src` of a src
    /// layout, so the tree's code is imported and not an installed copy.
    pub python_path: Vec<String>,
    /// pytest's own repository: it runs with its `src/_pytest` and the `pytester` plugin.
    pub pytest_itself: bool,
    /// pytest's own repository without the `src/_pytest/_version.py` its build writes
    /// (a git checkout): the version to write there in the sandbox's copy, the latest
    /// `doc/en/announce/release-X.Y.Z` (pytest refuses to run without the module).
    pub pytest_version: Option<String>,
}

impl Layout {
    pub fn of(repo: &Path) -> Layout {
        let src = repo.join("src");
        let src_layout = std::fs::read_dir(&src)
            .map(|rd| rd.flatten().any(|e| e.path().join("__init__.py").is_file()))
            .unwrap_or(false);
        let pytest_itself = src.join("_pytest/__init__.py").is_file()
            && (src.join("pytest").exists() || src.join("pytest.py").is_file());
        let pytest_version = (pytest_itself && !src.join("_pytest/_version.py").exists())
            .then(|| latest_release(&repo.join("doc/en/announce")));
        Layout { python_path: if src_layout { vec!["src".into()] } else { Vec::new() }, pytest_itself, pytest_version }
    }

    /// The shell that writes `src/_pytest/_version.py` when it is missing, or nothing.
    fn prep(&self) -> String {
        match &self.pytest_version {
            Some(v) => {
                let tuple = v
                    .split('.')
                    .map(|p| if p.chars().all(|c| c.is_ascii_digit()) { p.to_string() } else { format!("{p:?}") })
                    .collect::<Vec<_>>()
                    .join(", ");
                // printf turns the `\n`s into newlines.
                let module = format!("version = {v:?}\\n__version__ = version\\nversion_tuple = ({tuple},)\\n");
                format!(
                    "{{ test -f src/_pytest/_version.py || printf {} > src/_pytest/_version.py; }} && ",
                    sh_quote(&module)
                )
            }
            None => String::new(),
        }
    }

    /// `PYTHONPATH=a:b${PYTHONPATH:+:$PYTHONPATH} ` with `dirs` in front, or nothing.
    fn env(&self, extra: Option<&str>) -> String {
        let dirs: Vec<&str> = extra.into_iter().chain(self.python_path.iter().map(String::as_str)).collect();
        if dirs.is_empty() {
            return String::new();
        }
        format!("PYTHONPATH={}${{PYTHONPATH:+:$PYTHONPATH}} ", dirs.join(":"))
    }
}

/// The highest `release-X.Y.Z` among the files of `dir` (pytest's announcements), else `0.0.0`.
fn latest_release(dir: &Path) -> String {
    let mut best: Option<(Vec<u64>, String)> = None;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(v) = name.strip_prefix("release-").and_then(|n| n.strip_suffix(".rst")) else { continue };
        let Ok(key) = v.split('.').map(str::parse::<u64>).collect::<Result<Vec<u64>, _>>() else { continue };
        if best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((key, v.to_string()));
        }
    }
    best.map(|(_, v)| v).unwrap_or_else(|| "0.0.0".into())
}

/// The tests a Python file defines itself, as node-id or label parts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PythonTests {
    /// Top-level functions named `test*`.
    pub functions: Vec<String>,
    /// Classes pytest collects: named `Test*`, or deriving from a `*TestCase` or from
    /// such a class of the file.
    pub pytest_classes: Vec<String>,
    /// Classes unittest's loader takes by label: deriving from something named
    /// `*TestCase`, `*Tests` or `*Test`, or from such a class of the file, or holding
    /// `test*` methods with a base that is not `object` or a `*Mixin` (a mixin holding
    /// test methods is not one).
    pub case_classes: Vec<String>,
}

/// The tests a Python file defines itself. Names a star import brings in (sympy's
/// `test()`) are not among them.
pub fn python_test_ids(code: &str, prefix: &str) -> PythonTests {
    let mut out = PythonTests::default();
    let name_of =
        |rest: &str| rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or("").to_string();
    // (name, bases, holds test methods)
    let mut classes: Vec<(String, Vec<String>, bool)> = Vec::new();
    for line in code.lines() {
        if let Some(rest) = line.strip_prefix("def ").or_else(|| line.strip_prefix("async def ")) {
            let name = name_of(rest);
            if name.starts_with(prefix) && !out.functions.contains(&name) {
                out.functions.push(name);
            }
        } else if let Some(rest) = line.strip_prefix("class ") {
            let bases = rest
                .split_once('(')
                .map(|(_, b)| b.split(')').next().unwrap_or(""))
                .unwrap_or("")
                .split(',')
                .map(|b| b.trim().rsplit('.').next().unwrap_or("").trim().to_string())
                .filter(|b| !b.is_empty() && !b.contains('='))
                .collect();
            classes.push((name_of(rest), bases, false));
        } else if let Some(last) = classes.last_mut() {
            let t = line.trim_start();
            if line.len() > t.len()
                && t.strip_prefix("def ")
                    .or_else(|| t.strip_prefix("async def "))
                    .is_some_and(|r| r.starts_with(prefix))
            {
                last.2 = true;
            }
        }
    }
    let looks_like_case = |b: &str| b.ends_with("TestCase") || b.ends_with("Tests") || b.ends_with("Test");
    // A class deriving from a case class of the same file is one too (to a fixpoint).
    let mut cases: Vec<String> = Vec::new();
    loop {
        let before = cases.len();
        for (name, bases, tests) in &classes {
            let mixin_only = bases.iter().all(|b| b == "object" || b.ends_with("Mixin"));
            let case = bases.iter().any(|b| looks_like_case(b) || cases.contains(b))
                || (*tests && !mixin_only && !name.ends_with("Mixin"));
            if case && !cases.contains(name) {
                cases.push(name.clone());
            }
        }
        if cases.len() == before {
            break;
        }
    }
    loop {
        let before = out.pytest_classes.len();
        for (name, bases, _) in &classes {
            let collected = name.starts_with("Test")
                || bases.iter().any(|b| b.ends_with("TestCase") || out.pytest_classes.contains(b));
            if collected && !out.pytest_classes.contains(name) {
                out.pytest_classes.push(name.clone());
            }
        }
        if out.pytest_classes.len() == before {
            break;
        }
    }
    out.case_classes = cases;
    out
}

/// A unittest-style name (`Case.test_a`) as a pytest node id part (`Case::test_a`);
/// a parametrized id (`test_a[1.5]`) keeps its brackets as they are.
fn pytest_test_id(t: &str) -> String {
    match t.split_once('[') {
        Some((head, rest)) => format!("{}[{rest}", head.replace('.', "::")),
        None => t.replace('.', "::"),
    }
}

/// `a/b/c.py` -> `a.b.c`, when every part is an identifier.
fn python_module(path: &str) -> Option<String> {
    let m = path.strip_suffix(".py")?.replace('/', ".");
    m.split('.')
        .all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_alphanumeric() || c == '_')
                && !p.starts_with(|c: char| c.is_ascii_digit())
        })
        .then_some(m)
}

/// Jars on the class path of JUnit runs, where Debian's junit4/junit5 packages put them;
/// the repository's own `lib/` and `target/dependency/` jars are added too.
pub const JUNIT_JARS: &str =
    "/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar:/usr/share/java/hamcrest.jar";
pub const JUNIT_LAUNCHER: &str = "/usr/share/java/junit-platform-console-standalone.jar";

/// A word for `sh`, in single quotes.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The shell line that runs `file` (and `test` in it, if given) with `framework`.
/// Reports go under [`REPORT_DIR`]. A `template` replaces the framework's command:
/// `{file}` and `{test}` are substituted.
///
/// A Python file runs by node id or label: `test` when given, else the tests the file
/// defines itself ([`python_test_ids`]), so a name a star import brings in (sympy's
/// `test()`, which runs sympy's whole suite) is never collected.
pub fn command_line(
    framework: Framework,
    file: &str,
    test: Option<&str>,
    content: &str,
    template: Option<&str>,
    layout: &Layout,
) -> String {
    if let Some(t) = template {
        return t.replace("{file}", &sh_quote(file)).replace("{test}", &sh_quote(test.unwrap_or("")));
    }
    let q = sh_quote(file);
    let prep = format!("rm -rf {REPORT_DIR} && mkdir -p {REPORT_DIR} && ");
    let labels = |module: &str, sep: &str, with_functions: bool| -> Vec<String> {
        match test {
            Some(t) => vec![format!("{module}{sep}{}", if sep == "::" { pytest_test_id(t) } else { t.to_string() })],
            None => {
                let t = python_test_ids(content, "test");
                let ids: Vec<String> = if with_functions {
                    t.pytest_classes.into_iter().chain(t.functions).collect()
                } else {
                    t.case_classes
                };
                ids.iter().map(|n| format!("{module}{sep}{n}")).collect()
            }
        }
    };
    let joined = |v: Vec<String>, fallback: String| {
        if v.is_empty() {
            fallback
        } else {
            v.iter().map(|x| sh_quote(x)).collect::<Vec<_>>().join(" ")
        }
    };
    match framework {
        Framework::Pytest => {
            let targets = joined(labels(file, "::", true), q);
            let plugins = if layout.pytest_itself { " -p pytester" } else { "" };
            format!("{prep}{}{}python3 -m pytest -p no:cacheprovider{plugins} -q -rA --junitxml={REPORT_DIR}/junit.xml {targets}", layout.prep(), layout.env(None))
        }
        Framework::Unittest => {
            let targets = match python_module(file) {
                Some(module) => joined(labels(&module, ".", false), sh_quote(&module)),
                None => q,
            };
            format!("{prep}{}python3 -m unittest -v {targets}", layout.env(None))
        }
        Framework::Django => {
            // tests/foo/tests.py -> foo.tests, as runtests.py takes labels from tests/;
            // the tree's own `django` package first on the path, not an installed one.
            let module = file.trim_start_matches("tests/").trim_end_matches(".py").replace('/', ".");
            let targets = joined(labels(&module, ".", false), sh_quote(&module));
            format!("{prep}cd tests && {}python3 runtests.py --settings=test_sqlite --parallel 1 --verbosity 2 --noinput {targets}", layout.env(Some("..")))
        }
        Framework::DjangoManage => {
            let module = file.trim_end_matches(".py").replace('/', ".");
            let targets = joined(labels(&module, ".", false), sh_quote(&module));
            format!("{prep}{}python3 manage.py test --noinput --verbosity 2 {targets}", layout.env(None))
        }
        Framework::NodeTest => {
            let pat = test.map(|t| format!("--test-name-pattern={} ", sh_quote(t))).unwrap_or_default();
            format!("{prep}node --test --test-reporter=tap {pat}{q}")
        }
        Framework::Jest => {
            let pat = test.map(|t| format!("-t {} ", sh_quote(t))).unwrap_or_default();
            format!("{prep}node_modules/.bin/jest --ci --json --outputFile={REPORT_DIR}/jest.json {pat}{q}")
        }
        Framework::Vitest => {
            let pat = test.map(|t| format!("-t {} ", sh_quote(t))).unwrap_or_default();
            format!("{prep}node_modules/.bin/vitest run --reporter=json --outputFile={REPORT_DIR}/vitest.json {pat}{q}")
        }
        Framework::Junit4 | Framework::Junit5 => {
            let class = java_class(file, content);
            let select = match test {
                Some(t) => format!("--select-method {}", sh_quote(&format!("{class}#{t}"))),
                None => format!("--select-class {}", sh_quote(&class)),
            };
            // Compile the repository's sources with the test, then run the class through
            // the JUnit Platform launcher (JUnit 4 through its vintage engine).
            format!(
                "{prep}CP={JUNIT_JARS}:{JUNIT_LAUNCHER}:$(ls lib/*.jar target/dependency/*.jar 2>/dev/null | tr '\\n' ':') && \
                 find . -name '*.java' -not -path './{REPORT_DIR}/*' > {REPORT_DIR}/sources && \
                 javac -nowarn -d {REPORT_DIR}/classes -cp \"$CP\" @{REPORT_DIR}/sources && \
                 java -jar {JUNIT_LAUNCHER} --disable-banner --disable-ansi-colors --details=tree \
                 --class-path \"{REPORT_DIR}/classes:$CP\" {select} --reports-dir {REPORT_DIR}/junit"
            )
        }
        Framework::Custom => format!("sh {q}"),
    }
}

/// The report file a framework writes, relative to the repository copy.
pub fn report_file(framework: Framework) -> Option<&'static str> {
    match framework {
        Framework::Pytest => Some(".reproagent-run/junit.xml"),
        Framework::Jest => Some(".reproagent-run/jest.json"),
        Framework::Vitest => Some(".reproagent-run/vitest.json"),
        Framework::Junit4 => Some(".reproagent-run/junit/TEST-junit-vintage.xml"),
        Framework::Junit5 => Some(".reproagent-run/junit/TEST-junit-jupiter.xml"),
        _ => None,
    }
}

/// `package a.b;` + `FooTest.java` -> `a.b.FooTest`.
fn java_class(file: &str, content: &str) -> String {
    let stem = Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let pkg = content
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("package ").map(|p| p.trim_end_matches(';').trim().to_string()));
    match pkg {
        Some(p) if !p.is_empty() => format!("{p}.{stem}"),
        _ => stem.to_string(),
    }
}

/// Split `Type: message` when the head looks like an exception type name.
pub fn split_exception(line: &str) -> (Option<String>, String) {
    let line = line.trim();
    if let Some((head, rest)) = line.split_once(':') {
        let is_type = !head.is_empty()
            && head.chars().all(|c| c.is_alphanumeric() || c == '.' || c == '_' || c == '$')
            && head.chars().next().is_some_and(|c| c.is_alphabetic())
            && head.rsplit('.').next().is_some_and(|n| n.starts_with(|c: char| c.is_uppercase()));
        if is_type {
            return (Some(head.to_string()), rest.trim().to_string());
        }
    }
    (None, line.to_string())
}

/// Exceptions that mean the test could not run, not that its check failed.
fn is_setup_error(kind: Option<&str>) -> bool {
    matches!(
        kind.map(|k| k.rsplit('.').next().unwrap_or(k)),
        Some(
            "SyntaxError"
                | "IndentationError"
                | "ImportError"
                | "ModuleNotFoundError"
                | "ClassNotFoundException"
                | "NoClassDefFoundError"
        )
    )
}

/// Parse a run into a result. `report` is the framework's report file, if it wrote one.
pub fn parse(framework: Framework, command: String, output: ExecOutput, report: Option<&[u8]>) -> TestResult {
    let mut r = TestResult {
        status: TestStatus::Errored,
        framework,
        command,
        passed: 0,
        failed: 0,
        failures: Vec::new(),
        error: None,
        note: None,
        output,
    };
    let parsed = match framework {
        Framework::Pytest | Framework::Junit4 | Framework::Junit5 => report.and_then(|x| parse_junit_xml(x, &mut r)),
        Framework::Jest | Framework::Vitest => report.and_then(|x| parse_jest_json(x, &mut r)),
        Framework::NodeTest => parse_tap(&r.output.stdout.clone(), &mut r),
        Framework::Unittest | Framework::Django | Framework::DjangoManage => {
            let text = format!("{}\n{}", r.output.stdout, r.output.stderr);
            parse_unittest(&text, &mut r)
        }
        Framework::Custom => None,
    };
    if r.output.timed_out {
        r.status = TestStatus::Errored;
        r.error = Some(format!("timed out after {} ms; the process tree was killed", r.output.duration_ms));
        return r;
    }
    if r.output.memory_exceeded {
        r.status = TestStatus::Errored;
        r.error = Some("the memory limit was hit".into());
        return r;
    }
    match parsed {
        Some(()) => {
            let setup = !r.failures.is_empty() && r.failures.iter().all(|f| is_setup_error(f.kind.as_deref()));
            r.status = if r.error.is_some() || setup || (r.passed == 0 && r.failed == 0) {
                TestStatus::Errored
            } else if r.failed > 0 || !r.failures.is_empty() {
                TestStatus::Failed
            } else {
                TestStatus::Passed
            };
            if r.status == TestStatus::Errored && r.error.is_none() {
                r.error = Some(if setup { "the tests could not be loaded".into() } else { "no tests ran".into() });
            }
        }
        None if framework == Framework::Custom => {
            r.status = if r.output.success() { TestStatus::Passed } else { TestStatus::Failed };
        }
        None => {
            r.status = TestStatus::Errored;
            r.error = Some(last_lines(&format!("{}\n{}", r.output.stdout, r.output.stderr), 15));
        }
    }
    r
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// JUnit XML (pytest `--junitxml`, the JUnit Platform's legacy reports).
fn parse_junit_xml(xml: &[u8], r: &mut TestResult) -> Option<()> {
    let text = std::str::from_utf8(xml).ok()?;
    let doc = roxmltree::Document::parse(text).ok()?;
    for case in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
        let name = case.attribute("name").unwrap_or("");
        let class = case.attribute("classname").unwrap_or("");
        let full = if class.is_empty() { name.to_string() } else { format!("{class}.{name}") };
        let bad = case.children().find(|c| c.has_tag_name("failure") || c.has_tag_name("error"));
        if case.children().any(|c| c.has_tag_name("skipped")) {
            continue;
        }
        match bad {
            None => r.passed += 1,
            Some(node) => {
                let msg = node.attribute("message").unwrap_or("");
                let body = node.text().unwrap_or("");
                let (mut kind, mut message) = split_exception(msg.lines().next().unwrap_or(""));
                if let Some(t) = node.attribute("type").filter(|t| !t.is_empty()) {
                    kind = Some(t.to_string());
                    message = msg.to_string();
                } else if kind.is_none() {
                    // pytest's long report ends with `path:line: ExceptionType`.
                    kind = body.lines().rev().find_map(|l| {
                        let (loc, ty) = l.trim().rsplit_once(": ")?;
                        let is_loc = loc.rsplit_once(':').is_some_and(|(_, n)| n.chars().all(|c| c.is_ascii_digit()));
                        (is_loc && split_exception(&format!("{ty}: x")).0.is_some()).then(|| ty.to_string())
                    });
                }
                if kind.is_none() {
                    // pytest's message can lack the type ("assert 1 == 2"); the body's `E   Type: msg` line has it.
                    if let Some(e) = body.lines().find_map(|l| l.strip_prefix("E   ")) {
                        let (k, m) = split_exception(e);
                        if k.is_some() {
                            kind = k;
                            message = m;
                        }
                    }
                }
                // pytest: a collection failure is an <error> on a case named after the module.
                if node.has_tag_name("error") && msg.contains("collection failure") {
                    let err = body
                        .lines()
                        .filter(|l| l.starts_with("E "))
                        .map(|l| l[1..].trim())
                        .collect::<Vec<_>>()
                        .join("\n");
                    r.error = Some(format!("collection failed: {}", if err.is_empty() { body.trim() } else { &err }));
                    continue;
                }
                r.failed += 1;
                r.failures.push(TestFailure { name: full, kind, message });
            }
        }
    }
    Some(())
}

/// Jest's `--json` report; Vitest writes the same shape.
fn parse_jest_json(json: &[u8], r: &mut TestResult) -> Option<()> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    for file in v.get("testResults")?.as_array()? {
        let asserts = file.get("assertionResults").and_then(|a| a.as_array()).cloned().unwrap_or_default();
        if asserts.is_empty() && file.get("status").and_then(|s| s.as_str()) == Some("failed") {
            let msg = file.get("message").and_then(|m| m.as_str()).unwrap_or("the test file failed to run");
            r.error = Some(strip_ansi(msg).trim().to_string());
        }
        for a in asserts {
            match a.get("status").and_then(|s| s.as_str()) {
                Some("passed") => r.passed += 1,
                Some("failed") => {
                    r.failed += 1;
                    let name = a.get("fullName").and_then(|s| s.as_str()).unwrap_or("").to_string();
                    let msg = a
                        .get("failureMessages")
                        .and_then(|m| m.as_array())
                        .and_then(|m| m.first())
                        .and_then(|m| m.as_str())
                        .map(strip_ansi)
                        .unwrap_or_default();
                    let first = msg.lines().next().unwrap_or("");
                    let (kind, head) = split_exception(first);
                    // The useful detail (Expected/Received) follows the first line, up to the stack.
                    let rest: Vec<&str> = msg
                        .lines()
                        .skip(1)
                        .take_while(|l| !l.trim_start().starts_with("at "))
                        .filter(|l| !l.trim().is_empty())
                        .collect();
                    let message = if rest.is_empty() { head } else { format!("{head}\n{}", rest.join("\n")) };
                    r.failures.push(TestFailure { name, kind, message });
                }
                _ => {}
            }
        }
    }
    Some(())
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// node:test's TAP: `not ok N - name` lines with a YAML block holding `error:`, `name:`, `code:`.
fn parse_tap(text: &str, r: &mut TestResult) -> Option<()> {
    let lines: Vec<&str> = text.lines().collect();
    let mut saw_plan = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.starts_with("1..") || trimmed.starts_with("# tests ") {
            saw_plan = true;
        }
        let (ok, rest) = if let Some(rest) = trimmed.strip_prefix("not ok ") {
            (false, rest)
        } else if let Some(rest) = trimmed.strip_prefix("ok ") {
            (true, rest)
        } else {
            i += 1;
            continue;
        };
        let name = rest.split_once(" - ").map(|(_, n)| n).unwrap_or(rest);
        let name = name.split(" # ").next().unwrap_or(name).trim().to_string();
        // The YAML block, indented two more than its test line.
        let mut yaml: Vec<&str> = Vec::new();
        if lines.get(i + 1).is_some_and(|l| l.trim() == "---") {
            i += 2;
            while i < lines.len() && lines[i].trim() != "..." {
                yaml.push(&lines[i][(indent + 2).min(lines[i].len())..]);
                i += 1;
            }
        }
        i += 1;
        let field = |key: &str| -> Option<String> {
            let pos = yaml.iter().position(|l| l.starts_with(&format!("{key}:")))?;
            let v = yaml[pos][key.len() + 1..].trim();
            if v.starts_with('|') || v.starts_with('>') {
                let block: Vec<&str> = yaml[pos + 1..]
                    .iter()
                    .take_while(|l| l.starts_with("  ") || l.is_empty())
                    .map(|l| l.trim())
                    .collect();
                Some(block.join("\n").trim().to_string())
            } else {
                Some(v.trim_matches('\'').trim_matches('"').to_string())
            }
        };
        let failure_type = field("failureType").unwrap_or_default();
        if failure_type == "subtestsFailed" {
            continue; // a parent failing because its children did; the children are counted
        }
        let is_file = [".js", ".mjs", ".cjs", ".ts"].iter().any(|e| name.ends_with(e));
        if ok {
            if !is_file {
                r.passed += 1;
            }
            continue;
        }
        let kind = field("name").or_else(|| field("code"));
        let mut message = field("error").unwrap_or_default();
        if let (Some(a), Some(e)) = (field("actual"), field("expected")) {
            message = format!("{message}\nactual: {a}, expected: {e}");
        }
        if is_file {
            // node 18 wraps a file that failed to load (or exited non-zero) as one failing test.
            r.error = Some(format!("{name}: {}", if message.is_empty() { "the test file failed" } else { &message }));
            continue;
        }
        r.failed += 1;
        r.failures.push(TestFailure { name, kind, message });
    }
    if !saw_plan {
        return None;
    }
    if r.error.is_some() && (r.passed > 0 || r.failed > 0) {
        r.error = None; // the file wrapper failing because a test in it failed
    }
    Some(())
}

/// unittest's `-v` text (Django's runtests.py prints the same).
fn parse_unittest(text: &str, r: &mut TestResult) -> Option<()> {
    let ran = text.lines().find_map(|l| {
        l.strip_prefix("Ran ").and_then(|x| x.split_whitespace().next()).and_then(|n| n.parse::<u32>().ok())
    })?;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let header = l.strip_prefix("FAIL: ").or_else(|| l.strip_prefix("ERROR: "));
        let Some(h) = header else {
            i += 1;
            continue;
        };
        // "test_b (pkg.mod.Case.test_b)" or "test_b (pkg.mod.Case)" on older Pythons.
        let name = match h.split_once(" (") {
            Some((m, rest)) => {
                let inner = rest.trim_end_matches(')');
                if inner.ends_with(&format!(".{m}")) {
                    inner.to_string()
                } else {
                    format!("{inner}.{m}")
                }
            }
            None => h.to_string(),
        };
        i += 1;
        let mut block = Vec::new();
        while i < lines.len() && !lines[i].starts_with("======") && !lines[i].starts_with("Ran ") {
            block.push(lines[i]);
            i += 1;
        }
        // The exception line: the first unindented line after the traceback frames.
        let tb_start = block.iter().position(|l| l.starts_with("Traceback")).unwrap_or(0);
        let exc_at = block
            .iter()
            .enumerate()
            .skip(tb_start + 1)
            .find(|(_, l)| !l.starts_with(' ') && !l.trim().is_empty() && !l.starts_with("----"))
            .map(|(i, _)| i);
        let (kind, message) = match exc_at {
            Some(at) => {
                let (mut k, mut first) = split_exception(block[at]);
                // A bare `AssertionError` (an `assert` without a message) is a type too.
                if k.is_none() && !first.contains(' ') && split_exception(&format!("{first}: x")).0.is_some() {
                    // Its message is the statement that raised it, as the traceback shows it.
                    let code = block[..at]
                        .iter()
                        .rev()
                        .map(|l| l.trim())
                        .find(|l| {
                            !l.is_empty() && !l.chars().all(|c| matches!(c, '^' | '~')) && !l.starts_with("File ")
                        })
                        .unwrap_or("");
                    (k, first) = (Some(first), code.to_string());
                }
                let more: Vec<&str> = block[at + 1..]
                    .iter()
                    .take_while(|l| !l.trim().is_empty() && !l.starts_with("----"))
                    .copied()
                    .collect();
                (k, if more.is_empty() { first } else { format!("{first}\n{}", more.join("\n")) })
            }
            None => (None, String::new()),
        };
        if name.contains("unittest.loader._FailedTest") || name.contains("unittest.loader.ModuleImportFailure") {
            r.error = Some(format!("{}: {message}", kind.as_deref().unwrap_or("error")));
            continue;
        }
        r.failures.push(TestFailure { name, kind, message });
    }
    r.failed = r.failures.len() as u32;
    r.passed = ran.saturating_sub(r.failed + u32::from(r.error.is_some()));
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_exception_lines() {
        assert_eq!(
            split_exception("AssertionError: assert 1 == 2"),
            (Some("AssertionError".into()), "assert 1 == 2".into())
        );
        assert_eq!(split_exception("assert 1 == 2"), (None, "assert 1 == 2".into()));
        assert_eq!(
            split_exception("java.lang.IllegalStateException: boom"),
            (Some("java.lang.IllegalStateException".into()), "boom".into())
        );
        assert_eq!(split_exception("expected: <1> but was: <2>").0, None);
    }

    #[test]
    fn reads_jest_json() {
        // Shape of Jest 29's --json report (one failing, one passing, one file that failed to load).
        let json = br#"{"numFailedTests":1,"testResults":[
          {"name":"/r/a.test.js","status":"failed","message":"","assertionResults":[
            {"fullName":"sum adds","status":"passed","failureMessages":[]},
            {"fullName":"sum rounds","status":"failed","failureMessages":["Error: \u001b[2mexpect(\u001b[22mreceived\u001b[2m).toBe(\u001b[22mexpected\u001b[2m)\u001b[22m\n\nExpected: 3\nReceived: 2.9\n    at Object.<anonymous> (/r/a.test.js:5:20)"]}]}]}"#;
        let r =
            parse(Framework::Jest, "jest".into(), ExecOutput { exit_code: Some(1), ..Default::default() }, Some(json));
        assert_eq!(r.status, TestStatus::Failed);
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(r.failures[0].name, "sum rounds");
        assert_eq!(r.failures[0].kind.as_deref(), Some("Error"));
        assert!(r.failures[0].message.contains("Expected: 3\nReceived: 2.9"), "{}", r.failures[0].message);
        let broken = br#"{"testResults":[{"name":"/r/b.test.js","status":"failed","message":"SyntaxError: Unexpected token","assertionResults":[]}]}"#;
        let r = parse(
            Framework::Vitest,
            "vitest".into(),
            ExecOutput { exit_code: Some(1), ..Default::default() },
            Some(broken),
        );
        assert_eq!(r.status, TestStatus::Errored);
        assert!(r.error.unwrap_or_default().contains("SyntaxError"));
    }

    #[test]
    fn detects_frameworks() {
        let dir = tempfile::tempdir().map_err(|e| e.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path();
        assert_eq!(detect(p, "t/test_a.py", "import unittest\n"), Some(Framework::Unittest));
        assert_eq!(detect(p, "t/test_a.py", "def test_a(): pass\n"), Some(Framework::Pytest));
        assert_eq!(detect(p, "a.test.mjs", "import test from 'node:test'"), Some(Framework::NodeTest));
        assert_eq!(detect(p, "a.test.ts", "import { it } from 'vitest'"), Some(Framework::Vitest));
        assert_eq!(detect(p, "A.java", "import org.junit.jupiter.api.Test;"), Some(Framework::Junit5));
        assert_eq!(detect(p, "A.java", "import org.junit.Test;"), Some(Framework::Junit4));
        std::fs::write(p.join("package.json"), r#"{"devDependencies":{"jest":"29"}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(detect(p, "a.test.js", "test('x', () => {})"), Some(Framework::Jest));
        std::fs::write(p.join("pytest.ini"), "[pytest]\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(detect(p, "t/test_a.py", "import unittest\n"), Some(Framework::Pytest));
        std::fs::create_dir_all(p.join("django")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(p.join("tests")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(p.join("tests/runtests.py"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            detect(p, "tests/x/tests.py", ""),
            Some(Framework::Pytest),
            "a `django` directory that is no package is not Django"
        );
        std::fs::write(p.join("django/__init__.py"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(detect(p, "tests/x/tests.py", ""), Some(Framework::Django));
        let line = command_line(Framework::Django, "tests/x/tests.py", Some("T.test_a"), "", None, &Layout::default());
        assert!(line.contains("cd tests && PYTHONPATH=..${PYTHONPATH:+:$PYTHONPATH} python3 runtests.py --settings=test_sqlite --parallel 1 --verbosity 2 --noinput 'x.tests.T.test_a'"), "{line}");
        // Without a test name: the classes the file defines, by label.
        let code = "from django.test import SimpleTestCase\n\n\nclass ATests(SimpleTestCase):\n    def test_a(self):\n        pass\n\n\nclass Helper:\n    pass\n";
        let line = command_line(Framework::Django, "tests/x/test_y.py", None, code, None, &Layout::default());
        assert!(line.ends_with("--noinput 'x.test_y.ATests'"), "{line}");
    }

    #[test]
    fn a_django_project_runs_with_manage_py_unless_pytest_django_does() {
        let dir = tempfile::tempdir().map_err(|e| e.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path();
        let w = |f: &str, t: &str| std::fs::write(p.join(f), t).unwrap_or_else(|e| panic!("{e}"));
        w("manage.py", "import os\nos.environ.setdefault('DJANGO_SETTINGS_MODULE', 'site.settings')\nfrom django.core.management import execute_from_command_line\n");
        assert_eq!(detect(p, "shop/tests.py", "from django.test import TestCase\n"), Some(Framework::DjangoManage));
        let code =
            "from django.test import TestCase\n\nclass CartTests(TestCase):\n    def test_total(self):\n        pass\n";
        let line = command_line(Framework::DjangoManage, "shop/tests.py", None, code, None, &Layout::default());
        assert!(line.ends_with("python3 manage.py test --noinput --verbosity 2 'shop.tests.CartTests'"), "{line}");
        w("pytest.ini", "[pytest]\nDJANGO_SETTINGS_MODULE = site.settings\ntestpaths = shop\n");
        assert_eq!(detect(p, "shop/tests.py", "from django.test import TestCase\n"), Some(Framework::Pytest));
    }

    #[test]
    fn pytest_configuration_is_read_where_pytest_reads_it() {
        let dir = tempfile::tempdir().map_err(|e| e.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path();
        let w = |f: &str, t: &str| std::fs::write(p.join(f), t).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(PytestConfig::read(p), None);
        w(
            "setup.cfg",
            "[metadata]\nname = x\n\n[tool:pytest]\ntestpaths =\n    tests\n    docs\npython_functions = check_*\n",
        );
        let c = PytestConfig::read(p).unwrap_or_default();
        assert_eq!(
            (c.file.as_str(), c.testpaths.clone()),
            ("setup.cfg", vec!["tests".to_string(), "docs".to_string()])
        );
        w("tox.ini", "[tox]\nenvlist = py3\n");
        assert_eq!(
            PytestConfig::read(p).map(|c| c.file),
            Some("setup.cfg".into()),
            "a tox.ini without [pytest] is not pytest's"
        );
        w("pyproject.toml", "[tool.pytest.ini_options]\ntestpaths = [\"testing\"]\n");
        assert_eq!(
            PytestConfig::read(p).map(|c| (c.file, c.testpaths)),
            Some(("pyproject.toml".into(), vec!["testing".into()]))
        );
        w("pytest.ini", "[pytest]\n");
        assert_eq!(PytestConfig::read(p).map(|c| c.file), Some("pytest.ini".into()), "pytest.ini wins even when empty");
    }

    #[test]
    fn python_files_run_by_the_tests_they_define() {
        let code = "from sympy import *\nimport unittest\n\n\ndef test_a():\n    pass\n\n\nasync def test_b():\n    pass\n\n\ndef helper():\n    pass\n\n\nclass TestC:\n    def test_x(self):\n        pass\n\n\nclass DTests(unittest.TestCase):\n    def check(self):\n        pass\n\n\nclass Plain:\n    def test_like(self):\n        pass\n\n\nclass ETests(DTests):\n    pass\n\n\nclass F(AdminBase):\n    def test_f(self):\n        pass\n\n\nclass GMixin(object):\n    def test_g(self):\n        pass\n";
        let t = python_test_ids(code, "test");
        assert_eq!(t.functions, vec!["test_a", "test_b"]);
        assert_eq!(t.pytest_classes, vec!["TestC", "DTests", "ETests"], "pytest collects Test* classes and TestCases");
        assert_eq!(t.case_classes, vec!["DTests", "ETests", "F"], "unittest takes TestCases by label, not a mixin");
        let line = command_line(
            Framework::Pytest,
            "t/test_s.py",
            None,
            "from sympy import *\n\ndef test_a():\n    pass\n",
            None,
            &Layout::default(),
        );
        assert!(line.ends_with("--junitxml=.reproagent-run/junit.xml 't/test_s.py::test_a'"), "{line}");
        let line =
            command_line(Framework::Pytest, "t/test_s.py", Some("Case.test_a[1.5]"), "", None, &Layout::default());
        assert!(line.ends_with("'t/test_s.py::Case::test_a[1.5]'"), "{line}");
        let layout = Layout { python_path: vec!["src".into()], pytest_itself: true, pytest_version: None };
        let line = command_line(Framework::Pytest, "testing/test_s.py", None, "", None, &layout);
        assert!(
            line.contains(
                "PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} python3 -m pytest -p no:cacheprovider -p pytester "
            ),
            "{line}"
        );
        assert!(line.ends_with(" 'testing/test_s.py'"), "no test in it: the file, {line}");
    }

    #[test]
    fn pytest_itself_with_a_module_or_a_package() {
        // pytest 4.x-5.x has `src/pytest.py`; later ones a `src/pytest/` package. Either way
        // a git checkout lacks `_version.py`, which the run writes into the copy.
        for entry in ["pytest.py", "pytest/__init__.py"] {
            let t = tempfile::tempdir().expect("tmp");
            for (rel, body) in [
                ("src/_pytest/__init__.py", ""),
                (&format!("src/{entry}")[..], ""),
                ("doc/en/announce/release-4.6.3.rst", ""),
            ] {
                let p = t.path().join(rel);
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::write(p, body).expect("write");
            }
            let layout = Layout::of(t.path());
            assert!(layout.pytest_itself, "{entry}");
            assert_eq!(layout.pytest_version.as_deref(), Some("4.6.3"), "{entry}");
            assert!(command_line(Framework::Pytest, "testing/test_s.py", None, "", None, &layout)
                .contains("src/_pytest/_version.py"));
        }
    }

    #[test]
    fn one_table_names_the_frameworks() {
        for f in FRAMEWORKS {
            assert_eq!(
                serde_json::to_value(f.framework).ok(),
                Some(serde_json::Value::String(f.name.into())),
                "serde and the table agree"
            );
            assert_eq!(Framework::parse_name(f.name), Some(f.framework));
            assert_eq!(f.framework.name(), f.name);
            for a in f.aliases {
                assert_eq!(Framework::parse_name(a), Some(f.framework));
            }
            assert!(frameworks_text().contains(&format!("`{}`", f.name)));
        }
        assert_eq!(Framework::parse_name("pytestt"), None);
        let schema =
            serde_json::to_value(framework_schema(&mut schemars::SchemaGenerator::default())).unwrap_or_default();
        assert_eq!(schema["enum"], serde_json::json!(framework_names()));
    }
}
