//! The languages we index: one enum, one extension table, and the descriptors of
//! `grammars/` and the queries of `queries/` embedded as data.
//!
//! Adding a language is a descriptor, a query file, a grammar dependency (mapped in
//! [`Lang::ts_language`]) and an extractor file in `src/extract/`.

use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// A source language. TSX and JavaScript are dialects of [`Lang::TypeScript`] and parse
/// with the TSX grammar; plain `.ts` files parse with the TypeScript grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    Python,
    TypeScript,
    Java,
}

/// What a grammar descriptor (grammars/<lang>.toml) says.
#[derive(Debug, Clone, Deserialize)]
pub struct Descriptor {
    pub name: String,
    pub grammar: String,
    pub extensions: Vec<String>,
    pub queries: Vec<String>,
    pub tests: TestConventions,
}

/// How tests are recognized (and, later, run) in a language.
#[derive(Debug, Clone, Deserialize)]
pub struct TestConventions {
    pub files: Vec<String>,
    pub dirs: Vec<String>,
    pub entity_prefix: String,
    pub runners: Vec<String>,
}

const PYTHON_TOML: &str = include_str!("../../grammars/python.toml");
const TYPESCRIPT_TOML: &str = include_str!("../../grammars/typescript.toml");
const JAVA_TOML: &str = include_str!("../../grammars/java.toml");
const PYTHON_TAGS: &str = include_str!("../../queries/python/tags.scm");
const TYPESCRIPT_TAGS: &str = include_str!("../../queries/typescript/tags.scm");
const JAVA_TAGS: &str = include_str!("../../queries/java/tags.scm");

impl Lang {
    pub fn all() -> [Lang; 3] {
        [Lang::Python, Lang::TypeScript, Lang::Java]
    }

    pub fn name(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::TypeScript => "typescript",
            Lang::Java => "java",
        }
    }

    pub fn from_name(name: &str) -> Option<Lang> {
        Lang::all().into_iter().find(|l| l.name() == name)
    }

    /// The descriptor embedded from `grammars/`. The files are part of the binary and
    /// checked by a unit test, so a parse failure here is a build defect.
    pub fn descriptor(self) -> &'static Descriptor {
        static ALL: OnceLock<Vec<Descriptor>> = OnceLock::new();
        let all = ALL.get_or_init(|| {
            [PYTHON_TOML, TYPESCRIPT_TOML, JAVA_TOML]
                .iter()
                .map(|text| {
                    #[allow(clippy::expect_used)]
                    toml::from_str(text).expect("embedded grammar descriptor is valid TOML")
                })
                .collect()
        });
        &all[self as usize]
    }

    /// The embedded tags query, or the one in `override_dir/<lang>/tags.scm` when given.
    pub fn tags_query(self, override_dir: Option<&Path>) -> std::io::Result<String> {
        if let Some(dir) = override_dir {
            let p = dir.join(self.name()).join("tags.scm");
            if p.exists() {
                return std::fs::read_to_string(p);
            }
        }
        Ok(match self {
            Lang::Python => PYTHON_TAGS,
            Lang::TypeScript => TYPESCRIPT_TAGS,
            Lang::Java => JAVA_TAGS,
        }
        .to_string())
    }

    /// The language of a path, by extension.
    pub fn of_path(path: &Path) -> Option<Lang> {
        let ext = path.extension()?.to_str()?;
        let ext = ext.to_ascii_lowercase();
        Lang::all().into_iter().find(|l| l.descriptor().extensions.contains(&ext))
    }

    /// The tree-sitter grammar for a file of this language.
    pub fn ts_language(self, path: &str) -> tree_sitter::Language {
        match self {
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::TypeScript => {
                if path.ends_with(".ts") || path.ends_with(".mts") || path.ends_with(".cts") {
                    tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into()
                } else {
                    tree_sitter_typescript::LANGUAGE_TSX.into()
                }
            }
            Lang::Java => tree_sitter_java::LANGUAGE.into(),
        }
    }
}

/// Is `rel_path` (relative, `/`-separated) a test file by the language's conventions?
pub fn is_test_path(tests: &TestConventions, rel_path: &str) -> bool {
    let mut parts: Vec<&str> = rel_path.split('/').collect();
    let file = parts.pop().unwrap_or("");
    if tests.files.iter().any(|g| glob_match(g, file)) {
        return true;
    }
    parts.iter().any(|d| tests.dirs.iter().any(|t| t == d))
}

/// A tiny glob for file names: `*` matches any run of characters.
fn glob_match(pattern: &str, name: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('*').collect();
    if pieces.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &pieces[1..pieces.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// The names Python's `builtins` module defines (functions, types, exceptions, constants):
/// a free name in a snippet that is one of these needs no import, and a bare call of one
/// that the code does not bind is never guessed at.
pub const PYTHON_BUILTINS: &[&str] = &[
    "__import__",
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "ConnectionError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EnvironmentError",
    "Exception",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_parse_and_queries_compile() {
        for lang in Lang::all() {
            let d = lang.descriptor();
            assert_eq!(d.name, lang.name());
            let q = lang.tags_query(None).unwrap();
            for path in ["a.ts", "a.tsx"] {
                tree_sitter::Query::new(&lang.ts_language(path), &q).unwrap_or_else(|e| panic!("{}: {e}", lang.name()));
            }
        }
    }

    #[test]
    fn test_paths() {
        let py = &Lang::Python.descriptor().tests;
        assert!(is_test_path(py, "pkg/tests/helpers.py"));
        assert!(is_test_path(py, "test_models.py"));
        assert!(!is_test_path(py, "pkg/testing.py"));
        let ts = &Lang::TypeScript.descriptor().tests;
        assert!(is_test_path(ts, "src/a.test.ts"));
        assert!(!is_test_path(ts, "src/a.ts"));
        let java = &Lang::Java.descriptor().tests;
        assert!(is_test_path(java, "src/test/java/a/FooTest.java"));
        assert!(!is_test_path(java, "src/main/java/a/Foo.java"));
    }
}
