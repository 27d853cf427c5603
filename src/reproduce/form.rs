//! The framework form of a generated Python test: where the file goes (from the
//! [`Conventions`] of the suspect code), the wrapper its statements go in (a pytest
//! function, a `unittest.TestCase` or Django `SimpleTestCase`/`TestCase` method), the
//! imports that form needs, and the node id or label it runs by, so a run collects the
//! generated test and nothing else.
//!
//! How the statements become the body is `synth`'s; this module only wraps them.

use std::path::Path;

use super::conventions::Conventions;
use crate::lang::Lang;
use crate::sandbox::runners::Framework;

/// The wrapper of a generated Python test.
#[derive(Debug, Clone, PartialEq)]
pub struct PyForm {
    pub framework: Framework,
    /// The class the test method goes in (`None`: a module-level pytest function).
    pub class: Option<String>,
    /// The base class and the import that brings it.
    base: Option<(&'static str, &'static str)>,
}

/// Does the snippet touch the database (models, querysets, connections)?
fn touches_database(body: &str) -> bool {
    [
        ".objects.",
        ".objects",
        "models.Model",
        "connection.",
        "connections[",
        "transaction.",
        ".save(",
        "migrate",
        "call_command(",
    ]
    .iter()
    .any(|p| body.contains(p))
}

impl PyForm {
    /// The form for the repository's framework. `stem` names the class, `body` is the
    /// snippet (a Django test that touches the database is a `TestCase`).
    pub fn of(conv: &Conventions, stem: &str, body: &str) -> PyForm {
        let framework = match conv.lang() {
            Some(Lang::Python) => Framework::parse_name(&conv.framework).unwrap_or(Framework::Pytest),
            _ => Framework::Pytest,
        };
        let class = format!("Reproduce{}Tests", camel(stem));
        let base = match framework {
            Framework::Pytest | Framework::Custom => {
                return PyForm { framework: Framework::Pytest, class: None, base: None }
            }
            Framework::Django if !touches_database(body) => {
                ("SimpleTestCase", "from django.test import SimpleTestCase")
            }
            Framework::Django | Framework::DjangoManage => ("TestCase", "from django.test import TestCase"),
            _ => ("unittest.TestCase", "import unittest"),
        };
        PyForm { framework, class: Some(class), base: Some(base) }
    }

    /// The framework's name, as `TestFile` and the test plan carry it.
    pub fn framework_name(&self) -> &'static str {
        self.framework.name()
    }

    /// The imports the form needs, before the snippet's own.
    pub fn preamble(&self) -> String {
        self.base.map(|(_, import)| format!("{import}\n")).unwrap_or_default()
    }

    /// The lines that open the test (`def test_x():` or the class and its method).
    pub fn open(&self, name: &str) -> String {
        match (&self.class, self.base) {
            (Some(c), Some((base, _))) => format!("class {c}({base}):\n    def test_{name}(self):\n"),
            _ => format!("def test_{name}():\n"),
        }
    }

    /// The indentation of the body.
    pub fn indent(&self) -> &'static str {
        if self.class.is_some() {
            "        "
        } else {
            "    "
        }
    }

    /// The test's node id part (pytest) or label part (unittest, Django) within its file.
    pub fn test_id(&self, name: &str) -> String {
        match &self.class {
            Some(c) => format!("{c}.test_{name}"),
            None => format!("test_{name}"),
        }
    }

    /// The body without what the framework does itself: under Django's runners,
    /// `settings.configure(...)` and `django.setup()` (the runner configured settings;
    /// configuring again raises "Settings already configured").
    pub fn filter_body<'a>(&self, body: Vec<&'a str>) -> Vec<&'a str> {
        if !matches!(self.framework, Framework::Django | Framework::DjangoManage) {
            return body;
        }
        let mut out = Vec::new();
        let mut depth: i32 = 0;
        for l in body {
            let t = l.trim();
            if depth > 0 {
                depth += paren_balance(t);
                continue;
            }
            if t.starts_with("settings.configure(") {
                depth = paren_balance(t);
                continue;
            }
            if t == "django.setup()" {
                continue;
            }
            out.push(l);
        }
        out
    }
}

fn paren_balance(s: &str) -> i32 {
    s.chars()
        .map(|c| match c {
            '(' | '[' | '{' => 1,
            ')' | ']' | '}' => -1,
            _ => 0,
        })
        .sum()
}

fn camel(s: &str) -> String {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// Where a generated Python test goes: `test_reproduce_<stem>.py` in the directory of the
/// suspect code's tests; in a repository whose tests are not Python, the first of
/// `tests/`, `test/` that exists, else the root.
pub fn python_test_path(root: &Path, conv: &Conventions, stem: &str) -> String {
    let file = format!("test_reproduce_{stem}.py");
    let dir = match conv.lang() {
        Some(Lang::Python) => Some(conv.test_dir.clone()).filter(|d| !d.is_empty()),
        _ => ["tests", "test"].iter().find(|d| root.join(d).is_dir()).map(|d| d.to_string()),
    };
    match dir {
        Some(d) => format!("{d}/{file}"),
        None => file,
    }
}

/// Where a generated JavaScript test goes: the directory of the suspect code's tests when
/// they are JavaScript/TypeScript tests (`lib/x.js` -> `test/`), else `None`.
pub fn js_test_dir(root: &Path, conv: &Conventions) -> Option<String> {
    (conv.lang() == Some(Lang::TypeScript) && !conv.test_dir.is_empty() && root.join(&conv.test_dir).is_dir())
        .then(|| conv.test_dir.clone())
}

/// After the imports: a star import (`from sympy import *`) brings in a package's own
/// functions named `test*` (sympy's `test()` runs its whole suite), which a runner would
/// collect as tests of this module. The line this returns deletes them again; the
/// test's own functions are defined after it.
pub fn star_import_cleanup(imports: &[&str]) -> String {
    let star = imports.iter().any(|l| {
        let t = l.trim();
        t.starts_with("from ") && t.ends_with(" import *")
    });
    if !star {
        return String::new();
    }
    "# The star import brings in the package's own `test*` functions: not tests of this module.\n\
     for _name in [_n for _n, _v in list(globals().items()) if _n.startswith(\"test\") and callable(_v)]:\n    \
     del globals()[_name]\n"
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(framework: &str, dir: &str) -> Conventions {
        Conventions {
            languages: vec!["python".into()],
            framework: framework.into(),
            test_dir: dir.into(),
            test_module: None,
            suspect: None,
            found_by: String::new(),
            example_path: None,
            example: None,
            command: String::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn django_tests_are_test_case_classes_without_settings_configure() {
        let c = conv("django", "tests/utils_tests");
        let f = PyForm::of(&c, "issue_12", "print(slugify('x'))");
        assert_eq!(f.framework, Framework::Django);
        assert_eq!(f.preamble(), "from django.test import SimpleTestCase\n");
        assert_eq!(f.open("x"), "class ReproduceIssue12Tests(SimpleTestCase):\n    def test_x(self):\n");
        assert_eq!(f.test_id("x"), "ReproduceIssue12Tests.test_x");
        let db = PyForm::of(&c, "i", "Author.objects.create(name='a')");
        assert_eq!(db.preamble(), "from django.test import TestCase\n");
        let body = vec!["settings.configure(", "    USE_TZ=True,", ")", "django.setup()", "print(1)"];
        assert_eq!(f.filter_body(body), vec!["print(1)"]);
        assert_eq!(
            python_test_path(Path::new("/nonexistent"), &c, "issue_12"),
            "tests/utils_tests/test_reproduce_issue_12.py"
        );
    }

    #[test]
    fn pytest_tests_are_functions_and_star_imports_are_cleaned() {
        let f = PyForm::of(&conv("pytest", "sympy/core/tests"), "x", "");
        assert_eq!(f.open("a"), "def test_a():\n");
        assert_eq!(f.test_id("a"), "test_a");
        assert!(star_import_cleanup(&["from sympy import *"]).contains("del globals()[_name]"));
        assert_eq!(star_import_cleanup(&["from sympy import Symbol"]), "");
    }
}
