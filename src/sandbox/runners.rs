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

/// Test frameworks we run and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Framework {
    Pytest,
    Unittest,
    Django,
    NodeTest,
    Jest,
    Vitest,
    Junit4,
    Junit5,
    /// An explicit command template; the result comes from the exit code.
    Custom,
}

impl Framework {
    pub fn parse_name(s: &str) -> Option<Framework> {
        Some(match s {
            "pytest" => Framework::Pytest,
            "unittest" => Framework::Unittest,
            "django" => Framework::Django,
            "node-test" | "node:test" | "node" => Framework::NodeTest,
            "jest" => Framework::Jest,
            "vitest" => Framework::Vitest,
            "junit4" => Framework::Junit4,
            "junit5" | "junit" => Framework::Junit5,
            _ => return None,
        })
    }
}

/// The outcome of a test run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestFailure {
    /// As the framework names it (`tests/test_x.py::test_a`, `com.acme.FooTest.bar()`).
    pub name: String,
    /// Exception or assertion type (`AssertionError`, `org.opentest4j.AssertionFailedError`).
    pub kind: Option<String>,
    pub message: String,
}

/// A structured test result.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    let has = |p: &str| repo.join(p).exists();
    let read = |p: &str| crate::confine::read_text(repo, p).unwrap_or_default();
    match ext {
        "py" => {
            if has("tests/runtests.py") && has("django") {
                return Some(Framework::Django);
            }
            if content.contains("import pytest") || content.contains("from pytest") {
                return Some(Framework::Pytest);
            }
            let pytest_config = has("pytest.ini")
                || has("conftest.py")
                || read("pyproject.toml").contains("[tool.pytest")
                || read("setup.cfg").contains("[tool:pytest]")
                || read("tox.ini").contains("[pytest]");
            if !pytest_config && (content.contains("import unittest") || content.contains("from unittest")) {
                return Some(Framework::Unittest);
            }
            Some(Framework::Pytest)
        }
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
    format!("rm -rf {REPORT_DIR} && mkdir -p {REPORT_DIR} && python3 -c {} {}{t}", sh_quote(UNITTEST_FUNCTIONS), sh_quote(file))
}

/// Jars on the class path of JUnit runs, where Debian's junit4/junit5 packages put them;
/// the repository's own `lib/` and `target/dependency/` jars are added too.
pub const JUNIT_JARS: &str = "/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar:/usr/share/java/hamcrest.jar";
pub const JUNIT_LAUNCHER: &str = "/usr/share/java/junit-platform-console-standalone.jar";

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The shell line that runs `file` (and `test` in it, if given) with `framework`.
/// Reports go under [`REPORT_DIR`]. A `template` replaces the framework's command:
/// `{file}` and `{test}` are substituted.
pub fn command_line(framework: Framework, file: &str, test: Option<&str>, content: &str, template: Option<&str>) -> String {
    if let Some(t) = template {
        return t.replace("{file}", &sh_quote(file)).replace("{test}", &sh_quote(test.unwrap_or("")));
    }
    let q = sh_quote(file);
    let prep = format!("rm -rf {REPORT_DIR} && mkdir -p {REPORT_DIR} && ");
    match framework {
        Framework::Pytest => {
            let target = match test {
                Some(t) => sh_quote(&format!("{file}::{t}")),
                None => q,
            };
            format!("{prep}python3 -m pytest -p no:cacheprovider -q -rA --junitxml={REPORT_DIR}/junit.xml {target}")
        }
        Framework::Unittest => {
            let module = file.trim_end_matches(".py").replace('/', ".");
            let target = match test {
                Some(t) => sh_quote(&format!("{module}.{t}")),
                None => q,
            };
            format!("{prep}python3 -m unittest -v {target}")
        }
        Framework::Django => {
            // tests/foo/tests.py -> foo.tests, as runtests.py takes labels from tests/.
            let label = file.trim_start_matches("tests/").trim_end_matches(".py").replace('/', ".");
            let label = match test {
                Some(t) => format!("{label}.{t}"),
                None => label,
            };
            format!("{prep}cd tests && python3 runtests.py --verbosity 2 --parallel 1 {}", sh_quote(&label))
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
        Some("SyntaxError" | "IndentationError" | "ImportError" | "ModuleNotFoundError" | "ClassNotFoundException" | "NoClassDefFoundError")
    )
}

/// Parse a run into a result. `report` is the framework's report file, if it wrote one.
pub fn parse(framework: Framework, command: String, output: ExecOutput, report: Option<&[u8]>) -> TestResult {
    let mut r = TestResult { status: TestStatus::Errored, framework, command, passed: 0, failed: 0, failures: Vec::new(), error: None, note: None, output };
    let parsed = match framework {
        Framework::Pytest | Framework::Junit4 | Framework::Junit5 => report.and_then(|x| parse_junit_xml(x, &mut r)),
        Framework::Jest | Framework::Vitest => report.and_then(|x| parse_jest_json(x, &mut r)),
        Framework::NodeTest => parse_tap(&r.output.stdout.clone(), &mut r),
        Framework::Unittest | Framework::Django => {
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
                    let err = body.lines().filter(|l| l.starts_with("E ")).map(|l| l[1..].trim()).collect::<Vec<_>>().join("\n");
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
                    let rest: Vec<&str> = msg.lines().skip(1).take_while(|l| !l.trim_start().starts_with("at ")).filter(|l| !l.trim().is_empty()).collect();
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
                let block: Vec<&str> = yaml[pos + 1..].iter().take_while(|l| l.starts_with("  ") || l.is_empty()).map(|l| l.trim()).collect();
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
    let ran = text.lines().find_map(|l| l.strip_prefix("Ran ").and_then(|x| x.split_whitespace().next()).and_then(|n| n.parse::<u32>().ok()))?;
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
                if inner.ends_with(&format!(".{m}")) { inner.to_string() } else { format!("{inner}.{m}") }
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
        let exc_at = block.iter().enumerate().skip(tb_start + 1).find(|(_, l)| !l.starts_with(' ') && !l.trim().is_empty() && !l.starts_with("----")).map(|(i, _)| i);
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
                        .find(|l| !l.is_empty() && !l.chars().all(|c| matches!(c, '^' | '~')) && !l.starts_with("File "))
                        .unwrap_or("");
                    (k, first) = (Some(first), code.to_string());
                }
                let more: Vec<&str> = block[at + 1..].iter().take_while(|l| !l.trim().is_empty() && !l.starts_with("----")).copied().collect();
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
        assert_eq!(split_exception("AssertionError: assert 1 == 2"), (Some("AssertionError".into()), "assert 1 == 2".into()));
        assert_eq!(split_exception("assert 1 == 2"), (None, "assert 1 == 2".into()));
        assert_eq!(split_exception("java.lang.IllegalStateException: boom"), (Some("java.lang.IllegalStateException".into()), "boom".into()));
        assert_eq!(split_exception("expected: <1> but was: <2>").0, None);
    }

    #[test]
    fn reads_jest_json() {
        // Shape of Jest 29's --json report (one failing, one passing, one file that failed to load).
        let json = br#"{"numFailedTests":1,"testResults":[
          {"name":"/r/a.test.js","status":"failed","message":"","assertionResults":[
            {"fullName":"sum adds","status":"passed","failureMessages":[]},
            {"fullName":"sum rounds","status":"failed","failureMessages":["Error: \u001b[2mexpect(\u001b[22mreceived\u001b[2m).toBe(\u001b[22mexpected\u001b[2m)\u001b[22m\n\nExpected: 3\nReceived: 2.9\n    at Object.<anonymous> (/r/a.test.js:5:20)"]}]}]}"#;
        let r = parse(Framework::Jest, "jest".into(), ExecOutput { exit_code: Some(1), ..Default::default() }, Some(json));
        assert_eq!(r.status, TestStatus::Failed);
        assert_eq!((r.passed, r.failed), (1, 1));
        assert_eq!(r.failures[0].name, "sum rounds");
        assert_eq!(r.failures[0].kind.as_deref(), Some("Error"));
        assert!(r.failures[0].message.contains("Expected: 3\nReceived: 2.9"), "{}", r.failures[0].message);
        let broken = br#"{"testResults":[{"name":"/r/b.test.js","status":"failed","message":"SyntaxError: Unexpected token","assertionResults":[]}]}"#;
        let r = parse(Framework::Vitest, "vitest".into(), ExecOutput { exit_code: Some(1), ..Default::default() }, Some(broken));
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
        std::fs::write(p.join("package.json"), r#"{"devDependencies":{"jest":"29"}}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(detect(p, "a.test.js", "test('x', () => {})"), Some(Framework::Jest));
        std::fs::write(p.join("pytest.ini"), "[pytest]\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(detect(p, "t/test_a.py", "import unittest\n"), Some(Framework::Pytest));
        std::fs::create_dir_all(p.join("django")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(p.join("tests")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(p.join("tests/runtests.py"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(detect(p, "tests/x/tests.py", ""), Some(Framework::Django));
        assert!(command_line(Framework::Django, "tests/x/tests.py", Some("T.test_a"), "", None).contains("runtests.py --verbosity 2 --parallel 1 'x.tests.T.test_a'"));
    }
}
