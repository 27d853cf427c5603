//! The repository's own test runner and conventions: where a test of the suspect code
//! goes (the tests that reach it, else the module mirroring its path), which framework
//! runs it and how, on small trees shaped like Django, sympy and pytest; a generated test
//! collects nothing but itself; and a key-free test runs through Django's
//! tests/runtests.py on a real Django tree (Django 4.2's sdist from PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use reproagent::reproduce::conventions::conventions;
use reproagent::reproduce::{keyfree, Status};
use reproagent::sandbox::runners::TestStatus;
use reproagent::sandbox::tools::{run_test, RunTestArgs};
use reproagent::sandbox::{self, Choice, SandboxConfig};

use crate::common::*;

fn write(root: &Path, files: &[(&str, &str)]) {
    for (p, text) in files {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), files);
    index_with(dir.path(), 2, true);
    dir
}

const TEST_TEXT: &str = "from django.test import SimpleTestCase\nfrom django.utils.text import slugify\n\n\nclass TestUtilsText(SimpleTestCase):\n    def test_slugify(self):\n        self.assertEqual(slugify('a b'), 'a-b')\n";

fn django_shaped() -> tempfile::TempDir {
    let jquery = "function jQuery(a) { return a; }\n".repeat(40);
    let mut files: Vec<(&str, &str)> = vec![
        ("django/__init__.py", ""),
        ("django/utils/__init__.py", ""),
        ("django/utils/text.py", "def slugify(value):\n    return value.replace(' ', '-')\n\n\ndef capfirst(x):\n    return x[:1].upper() + x[1:]\n"),
        ("django/utils/html.py", "def escape(text):\n    return text.replace('<', '&lt;')\n"),
        // A Selenium base class in a file named tests.py: no test in it.
        ("django/contrib/admin/tests.py", "class AdminSeleniumTestCase:\n    def wait_until(self, callback):\n        return callback()\n"),
        ("tests/runtests.py", "import sys\n"),
        ("tests/aaa_tests/__init__.py", ""),
        ("tests/aaa_tests/test_first.py", "from django.test import SimpleTestCase\n\n\nclass FirstTests(SimpleTestCase):\n    def test_one(self):\n        self.assertTrue(True)\n"),
        ("tests/utils_tests/__init__.py", ""),
        ("tests/utils_tests/test_text.py", TEST_TEXT),
    ];
    files.push(("django/contrib/admin/static/admin/js/vendor/jquery.js", &jquery));
    tree(&files)
}

#[test]
fn django_tests_of_the_suspect_code_are_the_convention() {
    let dir = django_shaped();
    let root = dir.path();
    let c = conventions(root, &["django/utils/text.py".to_string()]);
    assert_eq!(c.languages, vec!["python".to_string()], "a vendored jquery.js does not make the project typescript");
    assert_eq!(c.framework, "django");
    assert_eq!(c.test_module.as_deref(), Some("tests/utils_tests/test_text.py"));
    assert_eq!(c.test_dir, "tests/utils_tests");
    assert_eq!(c.example_path.as_deref(), Some("tests/utils_tests/test_text.py"));
    assert!(c.example.as_deref().unwrap().contains("class TestUtilsText(SimpleTestCase)"));
    assert!(
        c.command.contains("cd tests && PYTHONPATH=..")
            && c.command.contains("runtests.py --settings=test_sqlite --parallel 1"),
        "{}",
        c.command
    );
    assert!(c.command.ends_with("'utils_tests.test_reproduce.ReproduceTests.test_name'"), "{}", c.command);
    assert!(c.text().contains("SimpleTestCase"), "{}", c.text());
    assert!(c.text().contains("no `settings.configure()`"), "{}", c.text());

    // No test reaches html.py: the module that would mirror it, in the closest test package.
    let c = conventions(root, &["django/utils/html.py".to_string()]);
    assert_eq!(c.test_module.as_deref(), Some("tests/utils_tests/test_html.py"));
    assert_eq!(c.test_dir, "tests/utils_tests");
    assert_eq!(
        c.example_path.as_deref(),
        Some("tests/utils_tests/test_text.py"),
        "the example comes from the same directory"
    );

    // The admin's tests.py holds no test: never the example, whatever the suspect.
    let c = conventions(root, &["django/contrib/admin/tests.py".to_string(), "django/utils/text.py".to_string()]);
    assert_ne!(c.example_path.as_deref(), Some("django/contrib/admin/tests.py"));
}

#[test]
fn sympy_and_pytest_shaped_trees_place_tests_beside_the_suspects_tests() {
    // sympy: tests next to the package; a script named like a test under bin/, outside testpaths.
    let dir = tree(&[
        ("pytest.ini", "[pytest]\ntestpaths = symp doc/src\n"),
        ("conftest.py", "def pytest_configure(config):\n    pass\n"),
        ("bin/test_executable.py", "def test_executable(path):\n    return path\n\ntest_executable('.')\n"),
        ("symp/__init__.py", "from .core.function import Function\n"),
        ("symp/core/__init__.py", ""),
        ("symp/core/function.py", "class Function:\n    def diff(self):\n        return 0\n"),
        ("symp/core/basic.py", "def walk():\n    return 1\n"),
        ("symp/core/tests/__init__.py", ""),
        (
            "symp/core/tests/test_function.py",
            "from symp.core.function import Function\n\n\ndef test_diff():\n    assert Function().diff() == 0\n",
        ),
        (
            "symp/sets/tests/test_sets.py",
            "def test_a():\n    assert 1\n\n\ndef test_b():\n    assert 1\n\n\ndef test_c():\n    assert 1\n",
        ),
    ]);
    let c = conventions(dir.path(), &["symp/core/function.py".to_string()]);
    assert_eq!(c.framework, "pytest");
    assert_eq!(c.test_dir, "symp/core/tests");
    assert_eq!(c.test_module.as_deref(), Some("symp/core/tests/test_function.py"));
    let c = conventions(dir.path(), &["symp/core/basic.py".to_string()]);
    assert_eq!(c.test_module.as_deref(), Some("symp/core/tests/test_basic.py"), "mirrors its path");
    let c = conventions(dir.path(), &[]);
    assert_ne!(c.test_dir, "bin", "bin/test_executable.py is outside testpaths");
    assert!(c.text().contains("pytest.ini"), "{}", c.text());

    // pytest's own tree: src/_pytest, tests in testing/ with pytester.
    let dir = tree(&[
        ("pyproject.toml", "[tool.pytest.ini_options]\ntestpaths = [\"testing\"]\naddopts = \"-p pytester\"\n"),
        ("src/pytest/__init__.py", "from _pytest.skipping import skip\n"),
        ("src/_pytest/__init__.py", ""),
        ("src/_pytest/skipping.py", "def skip(reason):\n    raise RuntimeError(reason)\n\n\ndef evaluate_skip_marks(item):\n    return skip('x')\n"),
        ("doc/en/announce/release-7.1.2.rst", "7.1.2\n"),
        ("doc/en/announce/release-7.10.0.rst", "7.10.0\n"),
        ("testing/conftest.py", "pytest_plugins = \"pytester\"\n"),
        ("testing/test_skipping.py", "def test_skip(pytester):\n    pytester.makepyfile('def test_a(): pass')\n    pytester.runpytest().assert_outcomes(passed=1)\n"),
        ("testing/test_other.py", "def test_other():\n    assert True\n"),
    ]);
    let c = conventions(dir.path(), &["src/_pytest/skipping.py".to_string()]);
    assert_eq!(c.test_module.as_deref(), Some("testing/test_skipping.py"));
    assert_eq!(c.test_dir, "testing");
    assert!(
        c.command
            .contains("PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} python3 -m pytest -p no:cacheprovider -p pytester"),
        "{}",
        c.command
    );
    assert!(c.command.contains("version = \"7.10.0\""), "the latest release names the version: {}", c.command);
    assert!(c.command.ends_with("'testing/test_reproduce.py::test_name'"), "{}", c.command);
    assert!(c.text().contains("`pytester` fixture"), "{}", c.text());
}

#[test]
fn a_javascript_suspect_gets_the_test_module_mirroring_it() {
    let dir = tree(&[
        ("package.json", "{\"name\": \"x\", \"scripts\": {\"test\": \"node --test\"}}\n"),
        ("lib/x.js", "export function x(a) { return a + 1; }\n"),
        ("lib/y.js", "export function y(a) { return a * 2; }\n"),
        (
            "test/y.test.js",
            "import test from 'node:test';\nimport { y } from '../lib/y.js';\ntest('y', () => { y(1); });\n",
        ),
    ]);
    let c = conventions(dir.path(), &["lib/x.js".to_string()]);
    assert_eq!(c.framework, "node-test");
    assert_eq!(c.test_module.as_deref(), Some("test/x.test.js"));
    assert_eq!(c.example_path.as_deref(), Some("test/y.test.js"));
}

fn run_file(
    root: &Path,
    file: &str,
    code: &str,
    framework: &str,
    command: Option<&str>,
) -> reproagent::sandbox::runners::TestResult {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let sb = sandbox::open(Choice::Local, SandboxConfig::new(root, "none")).await.unwrap().sandbox;
        sb.write_file(file, code.as_bytes()).await.unwrap();
        let args = RunTestArgs {
            file: file.into(),
            test: None,
            framework: Some(framework.into()),
            command: command.map(str::to_string),
            timeout_secs: 120,
        };
        let r = run_test(sb.as_ref(), root, &args).await.unwrap();
        sb.close().await.unwrap();
        r
    })
}

/// A package whose star import brings its own `test()` (as sympy's does: it runs the
/// whole suite), and a bug in `add`.
const STAR_PKG: &[(&str, &str)] = &[
    ("calc/__init__.py", "from .ops import add\n\n__all__ = ['add', 'test']\n\n\ndef test(*paths):\n    raise RuntimeError('the package test runner ran: the whole suite')\n"),
    ("calc/ops.py", "def add(a, b):\n    return a - b\n"),
    ("tests/test_ops.py", "from calc.ops import add\n\n\ndef test_add_zero():\n    assert add(1, 0) == 1\n"),
];

#[test]
fn a_generated_test_collects_nothing_but_itself() {
    let dir = tree(STAR_PKG);
    // A model-written file with a star import, run without a test name: by the node ids
    // it defines, so the package's `test` is not collected.
    let code = "from calc import *\n\n\ndef test_add():\n    assert add(1, 2) == 3\n";
    let r = run_file(dir.path(), "tests/test_star.py", code, "pytest", None);
    assert_eq!((r.status, r.passed, r.failed), (TestStatus::Failed, 0, 1), "{:?}\n{}", r.failures, r.output.stdout);
    assert!(r.command.contains("'tests/test_star.py::test_add'"), "{}", r.command);
    assert!(!r.output.stdout.contains("whole suite"), "{}", r.output.stdout);

    // Key-free: the issue's star import, the test beside the suspect's tests, run by node id.
    let issue = dir.path().join("42.md");
    std::fs::write(
        &issue,
        "# add subtracts\n\n`calc.ops.add` returns the difference:\n\n```python\nfrom calc import *\nassert add(1, 2) == 3\n```\n",
    )
    .unwrap();
    let o = keyfree::run(&keyfree_request(dir.path(), &issue, &std::fs::read_to_string(&issue).unwrap())).unwrap();
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    let path = o.test_path.clone().unwrap();
    assert_eq!(path, "tests/test_reproduce_42.py");
    let command = o.command.clone().unwrap();
    assert!(command.contains("'tests/test_reproduce_42.py::test_add_subtracts'"), "{command}");
    let code = o.test_code.unwrap();
    assert!(code.contains("del globals()[_name]"), "{code}");
    // Run as a whole file, not by node id, the cleanup alone keeps the package's `test` out.
    let r = run_file(dir.path(), &path, &code, "pytest", Some("python3 -m pytest -p no:cacheprovider -q {file}"));
    assert!(r.output.stdout.contains("1 failed") && !r.output.stdout.contains("passed"), "{}", r.output.stdout);
    assert!(!r.output.stdout.contains("whole suite"), "{}", r.output.stdout);
}

// ---- Django's tests/runtests.py on a real Django tree ----

const DJANGO: &str = "4.2.16";

/// Django's sdist (its `django/` package and `tests/runtests.py`), with its two pure
/// Python dependencies unpacked beside it: downloaded from PyPI once per target dir.
fn django_sdist() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("django-{DJANGO}"));
        let done = cache.join(".done");
        if done.exists() {
            return cache;
        }
        let _ = std::fs::remove_dir_all(&cache);
        std::fs::create_dir_all(&cache).unwrap();
        let pip = |args: &[&str]| {
            let out = Command::new("/usr/bin/python3").args(["-m", "pip", "download", "-q", "--no-deps", "-d"]).arg(&cache).args(args).output().unwrap();
            assert!(out.status.success(), "pip download {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        pip(&["--no-binary", ":all:", &format!("django=={DJANGO}")]);
        pip(&["asgiref==3.8.1", "sqlparse==0.5.1"]);
        let unpack = "import glob, tarfile, zipfile\n\
             tarfile.open(glob.glob('Django-*.tar.gz')[0]).extractall('.')\n\
             for w in glob.glob('*.whl'):\n    z = zipfile.ZipFile(w)\n    [z.extract(n, 'deps') for n in z.namelist() if '.dist-info/' not in n]\n";
        let out = Command::new("/usr/bin/python3").arg("-c").arg(unpack).current_dir(&cache).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(&done, "").unwrap();
        cache
    })
}

/// A small real Django tree: Django's package and runner, the settings, one app test
/// package with its real test module, and the dependencies at the root.
fn django_tree() -> tempfile::TempDir {
    let cache = django_sdist();
    let src = cache.join(format!("Django-{DJANGO}"));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_into_dir(&src.join("django"), &root.join("django"));
    for dep in ["asgiref", "sqlparse"] {
        copy_into_dir(&cache.join("deps").join(dep), &root.join(dep));
    }
    for f in [
        "tests/runtests.py",
        "tests/test_sqlite.py",
        "tests/urls.py",
        "tests/utils_tests/__init__.py",
        "tests/utils_tests/test_text.py",
    ] {
        std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
        std::fs::copy(src.join(f), root.join(f)).unwrap();
    }
    dir
}

fn copy_into_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    copy_into(from, to);
}

#[test]
fn a_key_free_test_runs_through_djangos_runtests_by_label() {
    let dir = django_tree();
    let root = dir.path();
    index_with(root, 2, true);
    let c = conventions(root, &["django/utils/text.py".to_string()]);
    assert_eq!((c.framework.as_str(), c.test_dir.as_str()), ("django", "tests/utils_tests"));
    assert_eq!(c.languages, vec!["python".to_string()], "the admin's vendored JavaScript is not a language of Django");

    // The issue configures settings itself, as standalone reports do: under runtests.py
    // that would raise "Settings already configured", so the test leaves it out.
    let issue = root.join("33900.md");
    std::fs::write(
        &issue,
        "# unescape_string_literal('') raises\n\n`django.utils.text.unescape_string_literal` should give back an empty string, it raises:\n\n\
         ```python\nimport django\nfrom django.conf import settings\nsettings.configure(\n    USE_I18N=False,\n)\ndjango.setup()\nfrom django.utils.text import unescape_string_literal\nunescape_string_literal('')\n```\n\n\
         ```\nTraceback (most recent call last):\n  File \"django/utils/text.py\", line 482, in unescape_string_literal\n    raise ValueError(\"Not a string literal: %r\" % s)\n\
         ValueError: Not a string literal: ''\n```\n",
    )
    .unwrap();
    let o = keyfree::run(&keyfree::Request {
        timeout_secs: 300,
        ..keyfree_request(root, &issue, &std::fs::read_to_string(&issue).unwrap())
    })
    .unwrap();
    let run_dir = Path::new(&o.run_dir);
    let generation = std::fs::read_to_string(run_dir.join("generation.json")).unwrap_or_default();
    assert_eq!(o.status, Status::Reproduced, "{}\n{}", o.reason, generation);
    assert!(o.failure.as_deref().unwrap_or("").contains("ValueError: Not a string literal"), "{:?}", o.failure);
    let path = o.test_path.clone().unwrap();
    assert_eq!(path, "tests/utils_tests/test_reproduce_33900.py");
    let code = o.test_code.clone().unwrap();
    assert!(code.contains("from django.test import SimpleTestCase") && code.contains("(SimpleTestCase):"), "{code}");
    assert!(!code.contains("settings.configure(") && !code.contains("django.setup()"), "{code}");
    let command = o.command.clone().unwrap();
    assert!(command.contains("runtests.py --settings=test_sqlite --parallel 1"), "{command}");
    assert!(
        command.ends_with("'utils_tests.test_reproduce_33900.Reproduce33900Tests.test_unescape_string_literal_raises'"),
        "{command}"
    );
    // runtests.py ran it, alone (one test), by label.
    assert!(generation.contains("Ran 1 test"), "{generation}");

    // Fail to pass: with the function fixed, the same test passes through runtests.py.
    let text = std::fs::read_to_string(root.join("django/utils/text.py")).unwrap();
    let fixed = text.replace("    if not s or s[0] not in", "    if not s:\n        return s\n    if s[0] not in");
    assert_ne!(fixed, text, "the fix applies to Django {DJANGO}");
    std::fs::write(root.join("django/utils/text.py"), fixed).unwrap();
    let r = run_file(root, &path, &code, "django", None);
    assert_eq!((r.status, r.passed, r.failed), (TestStatus::Passed, 1, 0), "{}\n{}", r.output.stdout, r.output.stderr);
}
