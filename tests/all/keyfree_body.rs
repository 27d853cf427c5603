//! The key-free mode on issues written the way people write them: code that leaves out
//! its imports, set-up that must run before an import, a result the prose says is wrong,
//! a test class pasted without fences with pytest's `E` lines, and the issues it must
//! refuse (the error shown is the old behaviour and the prose does not say what happens
//! today; the example spans two files); an error the issue wants back (it used to be
//! raised) asserted raised; a package only the test's environment has. Each reproduced
//! test is run again after the fix and must pass there.

use std::path::Path;

use reproagent::localize;
use reproagent::reproduce::{keyfree, Outcome, Status};
use reproagent::sandbox::runners::TestStatus;
use reproagent::search::SearchIndex;
use reproagent::store;

use crate::common::*;
use crate::reproduce::run_in;

pub(crate) fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (p, text) in files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

pub(crate) fn keyfree_run(root: &Path, issue: &str) -> Outcome {
    index_with(root, 2, false);
    keyfree::run(&keyfree_request(root, &root.join("issue-42.md"), issue)).unwrap()
}

/// Reproduced on the buggy tree, and the same test passes on the fixed one.
pub(crate) fn reproduced_and_fixed(buggy: &[(&str, &str)], fix: (&str, &str), issue: &str) -> Outcome {
    let repo = tree(buggy);
    let o = keyfree_run(repo.path(), issue);
    assert_eq!(o.status, Status::Reproduced, "{}\n{}", o.reason, o.test_code.as_deref().unwrap_or(""));
    let mut files: Vec<(&str, &str)> = buggy.iter().filter(|(p, _)| *p != fix.0).copied().collect();
    files.push(fix);
    let fixed = tree(&files);
    let path = o.test_path.clone().unwrap();
    let code = o.test_code.clone().unwrap();
    assert_eq!(run_in(fixed.path(), &path, &code, "pytest"), TestStatus::Passed, "must pass after the fix:\n{code}");
    o
}

const MEASURE_INIT: &str = "from measure.core import Span\n";
const MEASURE_BUGGY: &str = "class Span:\n    def __init__(self, lo, hi):\n        self.lo, self.hi = lo, hi\n\n    def width(self):\n        return [self.lo, self.hi][2] - self.lo\n";
const MEASURE_FIXED: &str = "class Span:\n    def __init__(self, lo, hi):\n        self.lo, self.hi = lo, hi\n\n    def width(self):\n        return self.hi - self.lo\n";

#[test]
fn a_package_the_session_never_imported_is_imported() {
    let issue = "Span.width crashes\n\nI was poking at spans in a shell:\n\n```python\ns = measure.Span(2, 5)\ns.width()\n```\n\n```\nTraceback (most recent call last):\n  File \"<stdin>\", line 2, in <module>\n  File \"/opt/venv/lib/python3.11/site-packages/measure/core.py\", line 6, in width\n    return [self.lo, self.hi][2] - self.lo\nIndexError: list index out of range\n```\n";
    let o = reproduced_and_fixed(
        &[("measure/__init__.py", MEASURE_INIT), ("measure/core.py", MEASURE_BUGGY)],
        ("measure/core.py", MEASURE_FIXED),
        issue,
    );
    assert!(o.test_code.unwrap().contains("import measure\n"));
}

#[test]
fn a_name_the_repository_imports_one_way_is_imported_that_way() {
    // `Span` alone: the repository's own modules import it from measure.core.
    let issue = "width of a span\n\n```python\nSpan(1, 4).width()\n```\n\nIndexError: list index out of range\n";
    let o = reproduced_and_fixed(
        &[("measure/__init__.py", MEASURE_INIT), ("measure/core.py", MEASURE_BUGGY)],
        ("measure/core.py", MEASURE_FIXED),
        issue,
    );
    assert!(o.test_code.unwrap().contains("from measure.core import Span"));
}

const CONF_SETTINGS: &str = "_values = None\n\n\ndef configure(**kw):\n    global _values\n    _values = kw\n\n\ndef get(name):\n    if _values is None:\n        raise RuntimeError('settings are not configured')\n    return _values[name]\n";
const CONF_MODELS_BUGGY: &str = "from conf import settings\n\nRATE = settings.get('rate')\n\n\ndef price(n):\n    return n * RATE + settings.get('fee') * 0\n\n\ndef total(items):\n    return sum(price(i) for i in items) / len(items) * len(items) if items else 1 / 0\n";
const CONF_MODELS_FIXED: &str = "from conf import settings\n\nRATE = settings.get('rate')\n\n\ndef price(n):\n    return n * RATE + settings.get('fee') * 0\n\n\ndef total(items):\n    return sum(price(i) for i in items)\n";

#[test]
fn set_up_code_runs_before_the_imports_that_need_it() {
    let issue = "total() of an empty order divides by zero\n\nMinimal script:\n\n```python\nfrom conf import settings\nsettings.configure(rate=2, fee=1)\nfrom conf.models import total\nprint(total([]))\n```\n\nIt dies with\n\n```\nZeroDivisionError: division by zero\n```\n";
    let o = reproduced_and_fixed(
        &[("conf/__init__.py", ""), ("conf/settings.py", CONF_SETTINGS), ("conf/models.py", CONF_MODELS_BUGGY)],
        ("conf/models.py", CONF_MODELS_FIXED),
        issue,
    );
    let code = o.test_code.unwrap();
    let configure = code.find("settings.configure(").unwrap();
    assert!(code.find("from conf.models import total").unwrap() > configure, "{code}");
}

const TEXTKIT_BUGGY: &str = "def tidy(s):\n    return '-'.join(s.replace('_', ' ').split(' '))\n";
const TEXTKIT_FIXED: &str = "def tidy(s):\n    return '-'.join(w for w in s.replace('_', ' ').split(' ') if w)\n";

#[test]
fn the_value_the_prose_calls_wrong_becomes_the_assertion() {
    let issue = "tidy keeps separators at the ends\n\n```python\nfrom textkit import tidy\ntidy('_ab cd_')\n```\n\nI would expect `'ab-cd'` here, but instead I get `'-ab-cd-'`.\n";
    let o =
        reproduced_and_fixed(&[("textkit/__init__.py", TEXTKIT_BUGGY)], ("textkit/__init__.py", TEXTKIT_FIXED), issue);
    assert!(o.failure.unwrap().starts_with("AssertionError"));
}

/// The shape of django__django-12983 (Trac, no fences, no code spans): the same call
/// twice, what it prints under "Bug ...", what it should print under "... after
/// correction". Also a GitHub template's "Expected output" heading alone.
#[test]
fn output_lines_under_headings_become_the_assertion() {
    let issue = "Make textkit.tidy() strip separators at the ends\nDescription\n\t\nBug generation\nExample:\nfrom textkit import tidy\ntidy('_ab cd_')\noutput: -ab-cd-\nImprovement after correction\nfrom textkit import tidy\ntidy('_ab cd_')\noutput: ab-cd\n";
    let o =
        reproduced_and_fixed(&[("textkit/__init__.py", TEXTKIT_BUGGY)], ("textkit/__init__.py", TEXTKIT_FIXED), issue);
    assert_eq!(o.failure.as_deref(), Some("AssertionError: still '-ab-cd-'"));
    let issue = "tidy keeps separators at the ends\n\n```python\nfrom textkit import tidy\nprint(tidy('_ab cd_'))\n```\n\n### Expected output\n\noutput: ab-cd\n";
    let o =
        reproduced_and_fixed(&[("textkit/__init__.py", TEXTKIT_BUGGY)], ("textkit/__init__.py", TEXTKIT_FIXED), issue);
    assert!(o.failure.unwrap().starts_with("AssertionError: '-ab-cd-', the issue expects"));
    // Labelled lines: "**Expected:** X", "**Actual:** Y".
    let issue = "tidy keeps separators at the ends\n\n```python\nfrom textkit import tidy\nprint(tidy('_ab cd_'))\n```\n\n**Expected:** ab-cd\n**Actual:** -ab-cd-\n";
    let o =
        reproduced_and_fixed(&[("textkit/__init__.py", TEXTKIT_BUGGY)], ("textkit/__init__.py", TEXTKIT_FIXED), issue);
    assert_eq!(o.failure.as_deref(), Some("AssertionError: still '-ab-cd-'"));
}

const MSGS_BASE: &str = "class Message:\n    def __init__(self, level, text, extra_tags=None):\n        self.level, self.text, self.extra_tags = level, text, extra_tags\n";
const MSGS_COOKIE_BUGGY: &str = "import json\n\nfrom msgs.base import Message\n\n\ndef encode(m):\n    parts = [m.level, m.text]\n    if m.extra_tags:\n        parts.append(m.extra_tags)\n    return json.dumps(parts)\n\n\ndef decode(s):\n    return Message(*json.loads(s))\n";

/// The shape of django__django-15347 (SWE-bench Lite): a session whose last check shows
/// the bug, `True` where the title says the value is wrong.
#[test]
fn the_last_check_of_a_session_the_title_calls_wrong_becomes_the_assertion() {
    let issue = "Messages are incorrectly encoded when extra_tags is an empty string\n\nWhen a message is encoded and decoded again, extra_tags==\"\" is converted to extra_tags==None.\n\n>>> from msgs.base import Message\n>>> from msgs.cookie import encode, decode\n>>> original = Message(10, \"Here is a message\", extra_tags=\"\")\n>>> decoded = decode(encode(original))\n>>> original.extra_tags == \"\"\nTrue\n>>> decoded.extra_tags is None\nTrue\n";
    let fixed = MSGS_COOKIE_BUGGY.replace("if m.extra_tags:", "if m.extra_tags is not None:");
    let o = reproduced_and_fixed(
        &[("msgs/__init__.py", ""), ("msgs/base.py", MSGS_BASE), ("msgs/cookie.py", MSGS_COOKIE_BUGGY)],
        ("msgs/cookie.py", &fixed),
        issue,
    );
    assert!(o.failure.unwrap().starts_with("AssertionError"));
    assert!(o.test_code.unwrap().contains("assert (decoded.extra_tags is None) != True"));
}

#[test]
fn a_function_nothing_imports_is_imported_from_the_one_module_that_defines_it() {
    let issue = "tidy keeps separators\n\n```\ntidy('_ab cd_')\n```\n\nThe result is wrong: `'-ab-cd-'`.\n";
    let o = reproduced_and_fixed(
        &[("textkit/__init__.py", ""), ("textkit/clean.py", TEXTKIT_BUGGY)],
        ("textkit/clean.py", TEXTKIT_FIXED),
        issue,
    );
    assert!(o.test_code.unwrap().contains("from textkit.clean import tidy"));
}

#[test]
fn a_test_class_without_fences_and_pytest_e_lines_are_read() {
    let issue = "tidy on a separator-only string\n\nOur suite has this test, pasted here:\n\nimport unittest\nfrom textkit import tidy\n\nclass TestTidy(unittest.TestCase):\n    def test_only_separators(self):\n        self.assertEqual(tidy('__'), '')\n\nand pytest says\n\nE   AssertionError: '--' != ''\n\nThanks!\n";
    let facts = localize::read_issue(issue);
    assert_eq!(facts.exceptions.last().unwrap().kind, "AssertionError");
    reproduced_and_fixed(&[("textkit/__init__.py", TEXTKIT_BUGGY)], ("textkit/__init__.py", TEXTKIT_FIXED), issue);
}

const BOUNDS_LAX: &str = "class Span:\n    def __init__(self, lo, hi):\n        self.lo, self.hi = lo, hi\n";
const BOUNDS_STRICT: &str = "class Span:\n    def __init__(self, lo, hi):\n        if lo > hi:\n            raise ValueError('lo must not exceed hi')\n        self.lo, self.hi = lo, hi\n";

#[test]
fn an_issue_showing_the_old_right_error_asserts_it_comes_back() {
    // The error is what 3.1.0 did, rightly; today the call passes silently. The test must
    // fail today because nothing is raised, and pass once the error is back: not expect
    // the error today (inverted), not refuse (the direction is clear).
    let issue = "Reversed spans are accepted again\n\nWith measure 3.1.0, `Span(5, 2)` raised a `ValueError`, as the docs promise. Since 3.2.0 the same call passes silently and the span has a negative width.\n\n```python\nfrom measure import Span\nSpan(5, 2)\n```\n\nWhat 3.1.0 printed:\n\n```\nTraceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\nValueError: lo must not exceed hi\n```\n";
    let o = reproduced_and_fixed(
        &[("measure/__init__.py", MEASURE_INIT), ("measure/core.py", BOUNDS_LAX)],
        ("measure/core.py", BOUNDS_STRICT),
        issue,
    );
    assert!(o.failure.as_deref().unwrap_or("").starts_with("AssertionError: ValueError not raised"), "{:?}", o.failure);
    assert!(o.test_code.unwrap().contains("except _wanted:"));
    // An error the prose says should be raised, named only in the prose, with the call
    // that passes silently today: the same shape, from a session.
    let issue = "Span accepts reversed bounds\n\n>>> from measure import Span\n>>> Span(9, 1).lo\n9\n\nThis should raise `ValueError`, but it is accepted silently.\n";
    let o = reproduced_and_fixed(
        &[("measure/__init__.py", MEASURE_INIT), ("measure/core.py", BOUNDS_LAX)],
        ("measure/core.py", BOUNDS_STRICT),
        issue,
    );
    assert!(o.failure.as_deref().unwrap_or("").starts_with("AssertionError: ValueError not raised"), "{:?}", o.failure);
}

const GRID_OPEN: &str =
    "class Grid:\n    def __init__(self, size):\n        self.size = size\n        self.cells = []\n";
const GRID_SLOTS: &str =
    "class Grid:\n    __slots__ = ('size',)\n\n    def __init__(self, size):\n        self.size = size\n";

#[test]
fn a_session_showing_the_old_error_before_a_check_that_holds_expects_the_error() {
    // The session shows the old error in the middle (expected with pytest.raises, as any
    // context traceback) and the prose says it changed: that expectation is the right
    // way round, and today it fails because nothing is raised.
    let issue = "Grid instances grew a cells attribute\n\nIn release 4.2.0 grids had no `cells` attribute:\n\n```python\n>>> from grid import Grid\n>>> Grid(2).cells\nTraceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\nAttributeError: 'Grid' object has no attribute 'cells'\n>>> Grid(2).size\n2\n```\n\nThis changed in 4.3, where `Grid(2).cells` is an empty list and can be assigned to.\n";
    let o = reproduced_and_fixed(&[("grid/__init__.py", GRID_OPEN)], ("grid/__init__.py", GRID_SLOTS), issue);
    assert!(o.failure.as_deref().unwrap_or("").starts_with("Failed: DID NOT RAISE"), "{:?}", o.failure);
    assert!(o.test_code.unwrap().contains("with pytest.raises(AttributeError):\n        Grid(2).cells\n"));
}

#[test]
fn an_issue_showing_only_the_old_error_is_refused_not_inverted() {
    // In the past tense, and nothing said about today: which way would the test point?
    let repo = tree(&[("measure/__init__.py", MEASURE_INIT), ("measure/core.py", BOUNDS_LAX)]);
    let issue = "Reversed spans\n\nIn 3.1.0 this raised `ValueError`, which is what we relied on.\n\n```python\nfrom measure import Span\nSpan(5, 2)\n```\n\n```\nValueError: lo must not exceed hi\n```\n";
    let o = keyfree_run(repo.path(), issue);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(o.reason.contains("used to have") && o.reason.contains("inverted"), "{}", o.reason);
    // Today's error after something that "used to work" is today's failure: expected as is.
    let repo = tree(&[("measure/__init__.py", MEASURE_INIT), ("measure/core.py", MEASURE_BUGGY)]);
    let issue = "width broke\n\nThis used to work in 2.0. Since 2.1 it raises:\n\n```python\nfrom measure import Span\nSpan(1, 4).width()\n```\n\n```\nIndexError: list index out of range\n```\n";
    let o = keyfree_run(repo.path(), issue);
    assert_eq!(o.status, Status::Reproduced, "{}", o.reason);
    assert!(o.failure.unwrap().starts_with("IndexError"));
}

/// A virtualenv (Debian's Python with its system packages, so pytest) holding one
/// package the repository neither has nor imports: `tinyarray`. Made once per test
/// binary under `CARGO_TARGET_TMPDIR`, without the network.
fn venv_with_tinyarray() -> &'static Path {
    static VENV: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    VENV.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reproagent-keyfree-env-v1");
        let venv = root.join("venv");
        if root.join("ready").exists() {
            return venv;
        }
        let _ = std::fs::remove_dir_all(&root);
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-m", "venv", "--system-site-packages"])
            .arg(&venv)
            .output()
            .unwrap();
        assert!(out.status.success(), "venv: {}", String::from_utf8_lossy(&out.stderr));
        let site = std::fs::read_dir(venv.join("lib"))
            .unwrap()
            .map(|e| e.unwrap().path().join("site-packages"))
            .find(|p| p.is_dir())
            .unwrap();
        std::fs::create_dir_all(site.join("tinyarray")).unwrap();
        std::fs::write(site.join("tinyarray/__init__.py"), "def ones(n):\n    return [1.0] * n\n").unwrap();
        std::fs::write(root.join("ready"), "").unwrap();
        venv
    })
}

const GAUGE_BUGGY: &str =
    "def scale(values, factor):\n    return [values[i + 1] * factor for i in range(len(values))]\n";
const GAUGE_FIXED: &str = "def scale(values, factor):\n    return [v * factor for v in values]\n";

#[test]
fn a_package_only_the_environment_has_is_imported_from_there() {
    let venv = venv_with_tinyarray();
    let issue = "scale runs off the end\n\n```python\nfrom gauge.core import scale\nscale(tinyarray.ones(3), 2)\n```\n\n```\nIndexError: list index out of range\n```\n";
    let files = [("gauge/__init__.py", ""), ("gauge/core.py", GAUGE_BUGGY)];
    let run_with = |python: Option<&Path>, issue: &str| {
        let repo = tree(&files);
        index_with(repo.path(), 2, false);
        let mut req = keyfree_request(repo.path(), &repo.path().join("issue-7.md"), issue);
        req.env.python = python.map(Path::to_path_buf);
        (keyfree::run(&req).unwrap(), repo)
    };
    // In the virtualenv the test runs in, `tinyarray` imports and has `ones`: imported.
    let (o, repo) = run_with(Some(venv), issue);
    assert_eq!(o.status, Status::Reproduced, "{}\n{}", o.reason, o.test_code.as_deref().unwrap_or(""));
    let code = o.test_code.clone().unwrap();
    assert!(code.contains("import tinyarray\n"), "{code}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&o.run_dir).join("run.json")).unwrap()).unwrap();
    assert!(record["notes"].to_string().contains("`import tinyarray`"), "{record}");
    drop(repo);
    // The same test passes after the fix, in the same environment.
    let fixed = tree(&[("gauge/__init__.py", ""), ("gauge/core.py", GAUGE_FIXED)]);
    let opts = reproagent::sandbox::env::EnvOptions { python: Some(venv.to_path_buf()), ..Default::default() };
    let env = std::sync::Arc::new(reproagent::sandbox::env::resolve(fixed.path(), &opts).unwrap());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let status = rt.block_on(async {
        let config = reproagent::sandbox::SandboxConfig::new(fixed.path(), "none").with_env(Some(env), &opts);
        let sb = reproagent::sandbox::open(reproagent::sandbox::Choice::Local, config).await.unwrap().sandbox;
        let path = o.test_path.clone().unwrap();
        sb.write_file(&path, code.as_bytes()).await.unwrap();
        let args = reproagent::sandbox::tools::RunTestArgs {
            file: path,
            test: None,
            framework: Some("pytest".into()),
            command: None,
            timeout_secs: 120,
        };
        let r = reproagent::sandbox::tools::run_test(sb.as_ref(), fixed.path(), &args).await.unwrap();
        sb.close().await.unwrap();
        r.status
    });
    assert_eq!(status, TestStatus::Passed, "must pass after the fix:\n{code}");
    // Where the test runs without it (the system's Python), nothing imports it: the
    // NameError is a set-up error and nothing is claimed. The host is not asked.
    let (o, _repo) = run_with(Some(Path::new("/usr/bin/python3")), issue);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(!o.test_code.unwrap().contains("import tinyarray"));
    assert!(o.reason.contains("set-up"), "{}", o.reason);
    // A name used with an attribute the module lacks is not taken for it.
    let (o, _repo) = run_with(Some(venv), &issue.replace("tinyarray.ones(3)", "tinyarray.zeros(3)"));
    assert_eq!(o.status, Status::NotReproduced);
    assert!(!o.test_code.unwrap().contains("import tinyarray"));
}

#[test]
fn a_two_file_example_is_refused_not_merged() {
    let repo = tree(&[("textkit/__init__.py", TEXTKIT_BUGGY)]);
    let issue = "fixture order differs between modules\n\n`test_module_1.py`:\n\n```python\nfrom textkit import tidy\ndef test_a():\n    assert tidy('a') == 'a'\n```\n\n`test_module_2.py`:\n\n```python\ndef test_b():\n    assert False\n```\n";
    let o = keyfree_run(repo.path(), issue);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(o.reason.contains("test_module_1.py, test_module_2.py"), "{}", o.reason);
}

#[test]
fn frames_of_installed_copies_map_onto_the_repository_and_path_words_stay_out() {
    let repo = tree(&[
        ("shop/__init__.py", ""),
        ("shop/core/__init__.py", ""),
        ("shop/core/pricing.py", "def rate(kind):\n    table = {'std': 1}\n    return table[kind]\n\n\ndef quote(kind, n):\n    return rate(kind) * n\n"),
        ("shop/site.py", "class Packages:\n    def site(self):\n        return 'site packages venv lib python'\n"),
        ("other/core/pricing.py", "def rate(kind):\n    return 0\n"),
        ("tests/test_pricing.py", "from shop.core.pricing import quote, rate\n\n\ndef test_quote_rate_kind():\n    assert quote('std', 2) == 2\n\n\ndef test_rate_kind_zero():\n    assert rate('std') == 1\n"),
    ]);
    index_with(repo.path(), 2, false);
    let graph = store::open(&store::db_path(repo.path())).unwrap();
    let search = SearchIndex::open(repo.path()).unwrap();
    for path in [
        "/usr/lib/python3/dist-packages/shop/core/pricing.py",
        "C:\\Users\\ann\\venv\\Lib\\site-packages\\shop\\core\\pricing.py",
        "/home/bo/src/shop/shop/core/pricing.py",
    ] {
        let issue = format!("quote fails for an unknown kind\n\nTraceback (most recent call last):\n  File \"/home/bo/venv/lib/python3.12/site-packages/shop/core/pricing.py\", line 7, in quote\n    return rate(kind) * n\n  File \"{path}\", line 3, in rate\n    return table[kind]\nKeyError: 'zero'\n");
        let loc = localize::localize(&graph, Some(&search), &issue, 10).unwrap();
        assert_eq!(
            loc.files[0].file,
            "shop/core/pricing.py",
            "{path}: {:?}",
            loc.files.iter().map(|f| &f.file).collect::<Vec<_>>()
        );
        assert_eq!(loc.entities[0].entity.as_deref(), Some("shop/core/pricing.py:rate"));
        // The words of the paths (site, packages, venv, lib, python) are no evidence: the
        // class made of them only matches `return`, below everything else.
        assert!(
            loc.entities.iter().take(5).all(|e| !e.entity.as_deref().unwrap_or("").contains("Packages")),
            "{:?}",
            loc.entities
        );
        assert!(
            loc.entities.iter().all(|e| !e.reason.contains("site") && !e.reason.contains("venv")),
            "{:?}",
            loc.entities
        );
        // The test file that matches the issue's words ranks below the code.
        let rank = |f: &str| loc.files.iter().position(|x| x.file == f);
        let t = rank("tests/test_pricing.py").unwrap_or_else(|| panic!("the test file is not ranked: {:?}", loc.files));
        assert!(t > rank("shop/core/pricing.py").unwrap(), "{:?}", loc.files);
    }
    // Another installed package (site-packages/vendor/core/pricing.py) is none of this
    // repository's files, though two of them end with `core/pricing.py`.
    let issue = "boom\n\nTraceback (most recent call last):\n  File \"/v/lib/site-packages/vendor/core/pricing.py\", line 2, in rate\n    return 0\nKeyError: 'x'\n";
    let loc = localize::localize(&graph, None, issue, 10).unwrap();
    assert!(loc.files.iter().all(|f| !f.reason.starts_with("traceback frame")), "{:?}", loc.files);
}

const POLYS_BUGGY: &str = "def solve(eqs, *gens):\n    if len(eqs) < len(gens) and gens[0] in eqs[0]:\n        raise NotImplementedError(\"only zero-dimensional systems supported\")\n    return [(1,)]\n";
const POLYS_FIXED: &str = "def solve(eqs, *gens):\n    if len(eqs) < len(gens):\n        raise NotImplementedError(\"only zero-dimensional systems supported\")\n    return [(1,)]\n";

/// The shape of sympy__sympy-22005: the session shows one call raising, and marks the
/// same call on other arguments, which returns, as not handled: it must raise too.
#[test]
fn a_call_marked_wrong_next_to_one_that_raises_must_raise_the_same() {
    let issue = "detection of infinite solution request\n\n```python\n>>> from polys import solve\n>>> solve((\"x - 1\",), \"x\", \"y\")\nTraceback (most recent call last):\n...\nNotImplementedError:\nonly zero-dimensional systems supported\n>>> solve((\"y - 1\",), \"x\", \"y\")   <--- this is not handled correctly\n[(1,)]\n```\n";
    let o = reproduced_and_fixed(&[("polys/__init__.py", POLYS_BUGGY)], ("polys/__init__.py", POLYS_FIXED), issue);
    assert!(o.failure.as_deref().unwrap().starts_with("Failed: DID NOT RAISE"), "{:?}", o.failure);
}

/// The shape of sympy__sympy-11400: an IPython session, the title quoting the call and
/// saying it does not work.
#[test]
fn an_ipython_call_the_title_says_does_not_work_must_change_its_answer() {
    let issue = "tidy('_ab cd_') doesn't work\n\n```\nIn [3]: from textkit import tidy\n\nIn [4]: tidy('_ab cd_')\nOut[4]: '-ab-cd-'\n```\n\nThe separators at the ends should go.\n";
    let o =
        reproduced_and_fixed(&[("textkit/__init__.py", TEXTKIT_BUGGY)], ("textkit/__init__.py", TEXTKIT_FIXED), issue);
    assert!(o.test_code.unwrap().contains("assert (tidy('_ab cd_')) != '-ab-cd-'"));
}
