//! The key-free mode on examples spread over several files: the files are written out
//! and run the way the issue runs them, in a temporary directory (a subprocess) or with
//! `pytester` where the project tests itself that way. Each reproduced test is run again
//! after the fix and must pass there; an example whose failure cannot be checked is refused.

use reproagent::reproduce::Status;

use crate::keyfree_body::{keyfree_run, reproduced_and_fixed, tree};

// A library whose default list is shared between callers: one test module's append
// shows up in the next module.
const TAGS_BUGGY: &str = "_DEFAULT = []\n\n\ndef default_tags():\n    return _DEFAULT\n";
const TAGS_FIXED: &str = "_DEFAULT = []\n\n\ndef default_tags():\n    return list(_DEFAULT)\n";
const TAGS_TEST: &str = "from tagbag import default_tags\n\n\ndef test_empty():\n    assert default_tags() == []\n";

#[test]
fn two_test_modules_run_in_a_subprocess_and_the_summary_is_the_assertion() {
    let issue = "default_tags leaks between test modules\n\nTwo modules in a fresh directory.\n\n`test_module_1.py`:\n\n```python\nfrom tagbag import default_tags\n\ndef test_add():\n    tags = default_tags()\n    tags.append(\"urgent\")\n    assert tags == [\"urgent\"]\n```\n\n`test_module_2.py`:\n\n```python\nfrom tagbag import default_tags\n\ndef test_fresh():\n    assert default_tags() == []\n```\n\nRunning `pytest -q test_module_1.py test_module_2.py` gives\n\n```\n.F\n1 failed, 1 passed in 0.03s\n```\n\nI expected 2 passed: each call should get its own list.\n";
    let o = reproduced_and_fixed(
        &[("tagbag/__init__.py", TAGS_BUGGY), ("tests/test_tags.py", TAGS_TEST)],
        ("tagbag/__init__.py", TAGS_FIXED),
        issue,
    );
    let code = o.test_code.unwrap();
    assert!(
        code.contains("\"test_module_2.py\": textwrap.dedent(\"\"\"\\\n    from tagbag import default_tags"),
        "{code}"
    );
    assert!(code.contains("subprocess.run("), "{code}");
    assert!(code.contains("assert got.get(\"passed\", 0) == 2"), "{code}");
    assert!(o.failure.unwrap().contains("outcome failed=1 passed=1;"));
}

const UNITS_BUGGY: &str =
    "FACTORS = {'m': 1, 'km': 1000}\n\n\ndef to_metres(value, unit):\n    return value * FACTORS[unit.lower()]\n";
const UNITS_FIXED: &str =
    "FACTORS = {'m': 1, 'km': 1000, 'cm': 0.01}\n\n\ndef to_metres(value, unit):\n    return value * FACTORS[unit.lower()]\n";

#[test]
fn a_script_and_its_helper_run_with_python_and_the_reported_error_must_not_appear() {
    let issue = "to_metres does not know centimetres\n\n`helper.py`:\n\n```python\nLENGTHS = [(3, 'km'), (20, 'CM')]\n```\n\n`main.py`:\n\n```python\nfrom helper import LENGTHS\nfrom units import to_metres\n\nprint(sum(to_metres(v, u) for v, u in LENGTHS))\n```\n\n```\n$ python main.py\nTraceback (most recent call last):\n  File \"/home/me/main.py\", line 4, in <module>\n  File \"/usr/lib/python3/site-packages/units/__init__.py\", line 5, in to_metres\nKeyError: 'cm'\n```\n";
    let o = reproduced_and_fixed(&[("units/__init__.py", UNITS_BUGGY)], ("units/__init__.py", UNITS_FIXED), issue);
    let code = o.test_code.unwrap();
    assert!(code.contains("[sys.executable, \"main.py\"]"), "{code}");
    assert!(code.contains("assert \"KeyError: 'cm'\" not in output"), "{code}");
}

// A pytest plugin that tests itself with pytester; its --skip-slow option looks for the
// wrong marker name.
const PLUG_BUGGY: &str = "import pytest\n\n\ndef pytest_addoption(parser):\n    parser.addoption(\"--skip-slow\", action=\"store_true\", help=\"skip tests marked slow\")\n\n\ndef pytest_configure(config):\n    config.addinivalue_line(\"markers\", \"slow: a slow test\")\n\n\ndef pytest_collection_modifyitems(config, items):\n    if not config.getoption(\"--skip-slow\"):\n        return\n    for item in items:\n        if item.get_closest_marker(\"slows\"):\n            item.add_marker(pytest.mark.skip(reason=\"--skip-slow\"))\n";
const PLUG_CONFTEST: &str = "pytest_plugins = \"pytester\"\n";
const PLUG_TEST: &str = "def test_option_is_known(pytester):\n    pytester.makeconftest(\"pytest_plugins = ['slowskip']\")\n    pytester.makepyfile(\"def test_a():\\n    pass\\n\")\n    result = pytester.runpytest(\"--skip-slow\")\n    result.assert_outcomes(passed=1)\n";

#[test]
fn a_project_testing_itself_with_pytester_gets_a_pytester_test() {
    let issue = "--skip-slow does not skip\n\nconftest.py:\n\n```python\npytest_plugins = [\"slowskip\"]\n```\n\ntest_slow.py:\n\n```python\nimport pytest\n\n@pytest.mark.slow\ndef test_slow():\n    assert 0, \"ran\"\n```\n\n```python\n# test_fast.py\ndef test_fast():\n    pass\n```\n\nWith `pytest --skip-slow -q` the slow test should be skipped, but it runs:\n\n```\nF.\n1 failed, 1 passed in 0.02s\n```\n";
    let o = reproduced_and_fixed(
        &[("slowskip.py", PLUG_BUGGY), ("conftest.py", PLUG_CONFTEST), ("tests/test_slowskip.py", PLUG_TEST)],
        ("slowskip.py", &PLUG_BUGGY.replace("\"slows\"", "\"slow\"")),
        issue,
    );
    let code = o.test_code.unwrap();
    assert!(code.contains("(pytester):\n    pytester.makeconftest(FILES[\"conftest.py\"])\n"), "{code}");
    assert!(code.contains("pytester.makepyfile(test_slow=FILES[\"test_slow.py\"])"), "{code}");
    assert!(code.contains("pytester.runpytest(*[\"--skip-slow\", \"-q\"])"), "{code}");
    assert!(code.contains("got.get(\"skipped\", 0) >= 1"), "{code}");
}

#[test]
fn a_multi_file_example_that_passes_today_is_not_claimed() {
    // Already fixed: the run meets the expectation, so the test passes and no claim is made.
    let repo = tree(&[("tagbag/__init__.py", TAGS_FIXED), ("tests/test_tags.py", TAGS_TEST)]);
    let issue = "default_tags leaks\n\n`test_module_1.py`:\n\n```python\nfrom tagbag import default_tags\n\ndef test_add():\n    default_tags().append(1)\n```\n\n`test_module_2.py`:\n\n```python\nfrom tagbag import default_tags\n\ndef test_fresh():\n    assert default_tags() == []\n```\n\n```\n$ pytest test_module_1.py test_module_2.py\n==== 1 failed, 1 passed in 0.03s ====\n```\n\nExpected 2 passed.\n";
    let o = keyfree_run(repo.path(), issue);
    assert_eq!(o.status, Status::NotReproduced, "{}", o.reason);
    assert!(o.reason.contains("runs without the reported error today"), "{}", o.reason);
}

#[test]
fn a_multi_file_example_without_a_checkable_failure_is_refused() {
    let repo = tree(&[("tagbag/__init__.py", TAGS_BUGGY)]);
    let issue = "odd tags\n\n`test_module_1.py`:\n\n```python\ndef test_a():\n    pass\n```\n\n`test_module_2.py`:\n\n```python\ndef test_b():\n    pass\n```\n\nSomething is off when both run.\n";
    let o = keyfree_run(repo.path(), issue);
    assert_eq!(o.status, Status::NotReproduced);
    assert!(o.reason.contains("test_module_1.py, test_module_2.py"), "{}", o.reason);
    assert!(o.reason.contains("no assertion can be checked"), "{}", o.reason);
}

// The same plugin's option, skipping from a hook: pytest reports the plugin's line as
// where the test was skipped, not the test's (the shape of pytest-dev__pytest-7432).
const SKIPLOC_BUGGY: &str = "import pytest\n\n\ndef pytest_addoption(parser):\n    parser.addoption(\"--skip-slow\", action=\"store_true\", help=\"skip tests marked slow\")\n\n\ndef pytest_configure(config):\n    config.addinivalue_line(\"markers\", \"slow: a slow test\")\n\n\ndef pytest_runtest_setup(item):\n    if item.config.getoption(\"--skip-slow\") and item.get_closest_marker(\"slow\"):\n        pytest.skip(\"--skip-slow\")\n";

#[test]
fn output_lines_shown_wrong_and_right_are_checked_in_a_pytester_run() {
    let issue = "--skip-slow reports the plugin as the skip location\n\n```python\nimport pytest\n\n@pytest.mark.slow\ndef test_slow():\n    assert 0\n```\n\nThe skip location reported should point to the test itself:\n\n```\nSKIPPED [1] test_slow.py:3: --skip-slow\n```\n\nbut `pytest -rs -p slowskip --skip-slow` shows the plugin instead:\n\n```\nSKIPPED [1] slowskip.py:14: --skip-slow\n```\n";
    let o = reproduced_and_fixed(
        &[("slowskip.py", SKIPLOC_BUGGY), ("conftest.py", PLUG_CONFTEST), ("tests/test_slowskip.py", PLUG_TEST)],
        ("slowskip.py", &PLUG_BUGGY.replace("\"slows\"", "\"slow\"")),
        issue,
    );
    let code = o.test_code.unwrap();
    assert!(code.contains("pytester.makepyfile(test_slow=FILES[\"test_slow.py\"])"), "{code}");
    assert!(code.contains("pytester.runpytest(*[\"-rs\", \"-p\", \"slowskip\", \"--skip-slow\"])"), "{code}");
    assert_eq!(
        o.failure.as_deref(),
        Some("AssertionError: the output the issue calls wrong appears: SKIPPED [1] slowskip.py:14: --skip-slow"),
        "{code}"
    );
}

// A linter run as `python -m lintkit`: it compiles every `*-rgx` setting of its
// run-control file, and a pattern `re` cannot read escapes as a traceback.
const LINTKIT_INIT: &str = "";
const LINTKIT_MAIN_BUGGY: &str = "import configparser\nimport re\nimport sys\n\n\ndef main():\n    cp = configparser.ConfigParser()\n    cp.read(\".lintkitrc\")\n    for section in cp.sections():\n        for key, value in cp.items(section):\n            if key.endswith(\"-rgx\"):\n                re.compile(value)\n    print(\"checked\")\n\n\nmain()\n";
const LINTKIT_MAIN_FIXED: &str = "import configparser\nimport re\nimport sys\n\n\ndef main():\n    cp = configparser.ConfigParser()\n    cp.read(\".lintkitrc\")\n    for section in cp.sections():\n        for key, value in cp.items(section):\n            if key.endswith(\"-rgx\"):\n                try:\n                    re.compile(value)\n                except re.error as e:\n                    sys.exit(\"lintkit: invalid regular expression in %s: %s\" % (key, e.msg))\n    print(\"checked\")\n\n\nmain()\n";

/// The shape of pylint-dev__pylint-7228 (a linter's issue template): the setting as the
/// issue pastes it, without its section; the command; the traceback.
#[test]
fn the_projects_own_command_runs_on_the_config_the_issue_shows() {
    let issue = "name-rgx with \\p{Han} throws an error\n\n### Configuration\n.lintkitrc:\n\n```ini\nname-rgx=[\\p{Han}a-z_]+\n```\n\n### Command used\n\n```shell\nlintkit\n```\n\n### Output\n\n```shell\nTraceback (most recent call last):\n  File \"/usr/lib/python3/site-packages/lintkit/__main__.py\", line 12, in main\n    re.compile(value)\nre.error: bad escape \\p at position 1\n```\n\n### Expected behavior\n\nnot throw error\n";
    let o = reproduced_and_fixed(
        &[("lintkit/__init__.py", LINTKIT_INIT), ("lintkit/__main__.py", LINTKIT_MAIN_BUGGY)],
        ("lintkit/__main__.py", LINTKIT_MAIN_FIXED),
        issue,
    );
    let code = o.test_code.unwrap();
    assert!(code.contains("[sys.executable, \"-m\", \"lintkit\"] + []"), "{code}");
    assert!(code.contains("\".lintkitrc\": textwrap.dedent(\"\"\"\\\n    [lintkit]\n"), "{code}");
    assert_eq!(o.failure.as_deref(), Some("AssertionError: the issue's error appears: error: bad escape"), "{code}");
}

// The linter, now checking the files it is given: a name bound by an assignment
// expression (`:=`) is looked up in a table only plain assignments fill.
const LINTKIT_FILES_BUGGY: &str = "import ast\nimport sys\n\n\ndef main(paths):\n    for path in paths:\n        with open(path) as f:\n            tree = ast.parse(f.read())\n        bound = {}\n        for node in ast.walk(tree):\n            if isinstance(node, ast.Assign):\n                for t in node.targets:\n                    bound[t.id] = node\n            elif isinstance(node, ast.NamedExpr):\n                bound[node.target.id]\n        print(\"%s: %d names\" % (path, len(bound)))\n\n\nmain(sys.argv[1:])\n";

/// A linter's crash report: the code unnamed, `lintkit crash.py` in a block, the traceback.
#[test]
fn an_unnamed_module_the_projects_command_runs_on_is_written_under_that_name() {
    let issue = "Crash on a walrus\n\n```python\nif (n := 10) > 5:\n    print(n)\n```\n\n```\nlintkit crash.py\n```\n\n```\nTraceback (most recent call last):\n  File \"/usr/lib/python3/site-packages/lintkit/__main__.py\", line 15, in main\n    bound[node.target.id]\nKeyError: 'n'\n```\n";
    let fixed = LINTKIT_FILES_BUGGY
        .replace("                bound[node.target.id]\n", "                bound[node.target.id] = node\n");
    let o = reproduced_and_fixed(
        &[("lintkit/__init__.py", LINTKIT_INIT), ("lintkit/__main__.py", LINTKIT_FILES_BUGGY)],
        ("lintkit/__main__.py", &fixed),
        issue,
    );
    let code = o.test_code.unwrap();
    assert!(code.contains("\"crash.py\": textwrap.dedent(\"\"\"\\\n    if (n := 10) > 5:\n"), "{code}");
    assert!(code.contains("[sys.executable, \"-m\", \"lintkit\"] + [\"crash.py\"]"), "{code}");
    assert_eq!(o.failure.as_deref(), Some("AssertionError: the issue's error appears: KeyError"), "{code}");
}
