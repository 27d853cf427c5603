//! How the issue's Python code becomes the body of a test, in the key-free mode: code
//! found without fences, the names the reporter imported earlier and left out, set-up
//! order, the value the prose says is wrong turned into the assertion, and the issues
//! whose direction is the wrong way round (the error shown is the old, right behaviour).
//!
//! Where the test goes and its framework form are `synth::build`'s; this module only
//! rewrites the snippet's code and says when no honest test can be built from it.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use crate::localize::IssueFacts;
use crate::store::Store;

/// Names every module (or method) has besides Python's builtins: never free.
const MODULE_NAMES: &[&str] = &["__builtins__", "__class__", "__doc__", "__file__", "__name__", "cls", "self"];

/// Module aliases by convention, when neither the issue nor the repository shows one.
const CONVENTIONAL: &[(&str, &str)] = &[
    ("np", "import numpy as np"),
    ("pd", "import pandas as pd"),
    ("plt", "import matplotlib.pyplot as plt"),
    ("mpl", "import matplotlib as mpl"),
    ("sns", "import seaborn as sns"),
    ("so", "import seaborn.objects as so"),
    ("xr", "import xarray as xr"),
    ("nx", "import networkx as nx"),
];

/// Standard-library modules an issue's session often uses without showing its import
/// (every Python has them). Taken only for a free name used as a module (`os.getcwd()`,
/// `json.dumps`): a free name used otherwise is a variable the issue left out.
const STDLIB_MODULES: &[&str] = &[
    "abc",
    "argparse",
    "array",
    "ast",
    "asyncio",
    "base64",
    "bisect",
    "calendar",
    "codecs",
    "collections",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "ctypes",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "gc",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "html",
    "http",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "locale",
    "logging",
    "math",
    "multiprocessing",
    "numbers",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "platform",
    "pprint",
    "random",
    "re",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "sys",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "traceback",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uuid",
    "warnings",
    "weakref",
    "xml",
    "zipfile",
    "zoneinfo",
];

/// Standard-library names an issue uses without their import, when used as written here
/// (called, or as a base or annotation): the one module that defines each.
const STDLIB_NAMES: &[(&str, &str)] = &[
    ("Decimal", "from decimal import Decimal"),
    ("Fraction", "from fractions import Fraction"),
    ("Path", "from pathlib import Path"),
    ("PurePath", "from pathlib import PurePath"),
    ("OrderedDict", "from collections import OrderedDict"),
    ("defaultdict", "from collections import defaultdict"),
    ("namedtuple", "from collections import namedtuple"),
    ("Counter", "from collections import Counter"),
    ("deque", "from collections import deque"),
    ("partial", "from functools import partial"),
    ("reduce", "from functools import reduce"),
    ("dataclass", "from dataclasses import dataclass"),
    ("Enum", "from enum import Enum"),
    ("IntEnum", "from enum import IntEnum"),
    ("StringIO", "from io import StringIO"),
    ("BytesIO", "from io import BytesIO"),
    ("deepcopy", "from copy import deepcopy"),
    ("timedelta", "from datetime import timedelta"),
    ("timezone", "from datetime import timezone"),
];

/// How the code uses a free name first: as a module (`name.attr`), or otherwise.
fn used_as_module(code: &str, name: &str) -> bool {
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(i) = code[from..].find(name) {
        let at = from + i;
        let before = at.checked_sub(1).map(|k| b[k]);
        let word = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
        let after = b.get(at + name.len()).copied();
        if !word(before) && before != Some(b'.') && !word(after) {
            return after == Some(b'.');
        }
        from = at + name.len();
    }
    false
}

/// The import of a free name from the standard library: a module used as one
/// ([`STDLIB_MODULES`]), `datetime(...)`/`date(...)` called (the classes), or a name of
/// [`STDLIB_NAMES`].
fn stdlib_import(code: &str, name: &str) -> Option<String> {
    if used_as_module(code, name) {
        return STDLIB_MODULES.contains(&name).then(|| format!("import {name}"));
    }
    match name {
        "datetime" | "date" => Some(format!("from datetime import {name}")),
        _ => STDLIB_NAMES.iter().find(|(n, _)| *n == name).map(|(_, s)| s.to_string()),
    }
}

fn is_builtin(n: &str) -> bool {
    crate::lang::PYTHON_BUILTINS.contains(&n)
        || MODULE_NAMES.contains(&n)
        || n.ends_with("Error") && n.chars().next().is_some_and(char::is_uppercase)
        || matches!(
            n,
            "Exception" | "BaseException" | "StopIteration" | "KeyboardInterrupt" | "GeneratorExit" | "SystemExit"
        )
        || n.ends_with("Warning") && n.chars().next().is_some_and(char::is_uppercase)
}

fn parse(code: &str) -> Option<tree_sitter::Tree> {
    let mut p = tree_sitter::Parser::new();
    p.set_language(&tree_sitter_python::LANGUAGE.into()).ok()?;
    p.parse(code, None)
}

/// Does the code parse as Python without a syntax error?
pub fn parses(code: &str) -> bool {
    parse(code).is_some_and(|t| !t.root_node().has_error())
}

/// The names the code uses but never binds, in order of first use, builtins left out.
/// Scopes are flattened: a name bound anywhere counts as bound everywhere (a snippet is
/// short; a name bound in one function and used in another is rare and then harmless).
pub fn free_names(code: &str) -> Vec<String> {
    let Some(tree) = parse(code) else { return Vec::new() };
    let src = code.as_bytes();
    let mut bound: HashSet<String> = HashSet::new();
    let mut used: Vec<String> = Vec::new();
    let mut stack = vec![tree.root_node()];
    while let Some(n) = stack.pop() {
        let mut c = n.walk();
        for ch in n.children(&mut c) {
            stack.push(ch);
        }
        if n.kind() != "identifier" {
            continue;
        }
        let Ok(name) = n.utf8_text(src) else { continue };
        match role(n) {
            Role::Bind => {
                bound.insert(name.to_string());
            }
            Role::Use => {
                if !used.iter().any(|u| u == name) {
                    used.push(name.to_string());
                }
            }
            Role::Neither => {}
        }
    }
    // Order of first use in the text: the walk is depth first, not in source order.
    let mut out: Vec<(usize, String)> = used
        .into_iter()
        .filter(|u| !bound.contains(u) && !is_builtin(u))
        .map(|u| (first_word(code, &u).unwrap_or(usize::MAX), u))
        .collect();
    out.sort();
    out.into_iter().map(|(_, u)| u).collect()
}

fn first_word(code: &str, w: &str) -> Option<usize> {
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(i) = code[from..].find(w) {
        let at = from + i;
        let before = at.checked_sub(1).map(|k| b[k]);
        let after = b.get(at + w.len()).copied();
        let word = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
        if !word(before) && !word(after) && before != Some(b'.') {
            return Some(at);
        }
        from = at + w.len();
    }
    None
}

enum Role {
    Bind,
    Use,
    Neither,
}

/// What an identifier node does: binds a name, uses one, or is neither (an attribute's
/// name, a keyword argument's name, a name inside an import path).
fn role(n: tree_sitter::Node) -> Role {
    let Some(p) = n.parent() else { return Role::Use };
    let is_field = |field: &str| p.child_by_field_name(field).is_some_and(|f| f.id() == n.id());
    match p.kind() {
        "attribute" if is_field("attribute") => Role::Neither,
        "keyword_argument" if is_field("name") => Role::Neither,
        "function_definition" | "class_definition" if is_field("name") => Role::Bind,
        "parameters"
        | "lambda_parameters"
        | "default_parameter"
        | "typed_parameter"
        | "typed_default_parameter"
        | "list_splat_pattern"
        | "dictionary_splat_pattern"
        | "global_statement"
        | "nonlocal_statement" => {
            if p.kind().starts_with("default") || p.kind() == "typed_default_parameter" {
                if is_field("name") {
                    Role::Bind
                } else {
                    Role::Use
                }
            } else {
                Role::Bind
            }
        }
        "aliased_import" => {
            if is_field("alias") {
                Role::Bind
            } else {
                Role::Neither
            }
        }
        "dotted_name" => {
            // `import a.b` binds `a`; `from m import a` binds `a`; the module of a
            // `from` and the rest of a path bind nothing.
            let Some(stmt) = p.parent() else { return Role::Neither };
            let first = p.named_child(0).is_some_and(|f| f.id() == n.id());
            match stmt.kind() {
                "import_statement" if first => Role::Bind,
                "import_from_statement" => {
                    let is_module = stmt.child_by_field_name("module_name").is_some_and(|m| m.id() == p.id());
                    if is_module || !first {
                        Role::Neither
                    } else {
                        Role::Bind
                    }
                }
                "aliased_import" => Role::Neither,
                _ => Role::Neither,
            }
        }
        "as_pattern_target" => Role::Bind,
        "as_pattern" | "except_clause" if is_field("alias") => Role::Bind,
        "named_expression" if is_field("name") => Role::Bind,
        "assignment" | "for_statement" | "for_in_clause" if is_field("left") => Role::Bind,
        "augmented_assignment" if is_field("left") => Role::Use,
        "pattern_list" | "tuple_pattern" | "list_pattern" => Role::Bind,
        "tuple" | "list" if in_binding_target(p) => Role::Bind,
        _ => Role::Use,
    }
}

/// A tuple or list that is (inside) the target of an assignment or a `for`.
fn in_binding_target(mut n: tree_sitter::Node) -> bool {
    while let Some(p) = n.parent() {
        match p.kind() {
            "tuple" | "list" | "parenthesized_expression" | "pattern_list" => n = p,
            "assignment" | "for_statement" | "for_in_clause" => {
                return p.child_by_field_name("left").is_some_and(|l| l.id() == n.id());
            }
            _ => return false,
        }
    }
    false
}

/// Import statements written anywhere in the issue (prose, other blocks, sessions),
/// by the name each binds.
fn issue_imports(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    // Lines, and the code spans inside lines (`from x import y` written in a sentence).
    let mut pieces: Vec<&str> = text.lines().collect();
    for line in text.lines() {
        let mut parts = line.split('`');
        parts.next();
        pieces.extend(parts.step_by(2));
    }
    for line in pieces {
        let t = line.trim().trim_start_matches(">>> ").trim_start_matches("... ").trim();
        let t = t.split('#').next().unwrap_or("").trim().trim_matches('`');
        if let Some(rest) = t.strip_prefix("import ") {
            for part in rest.split(',') {
                let part = part.trim();
                let (module, alias) = match part.split_once(" as ") {
                    Some((m, a)) => (m.trim(), a.trim()),
                    None => (part, part.split('.').next().unwrap_or(part)),
                };
                if is_ident(alias) && module.split('.').all(is_ident) {
                    let stmt = if alias == module.split('.').next().unwrap_or("") && !part.contains(" as ") {
                        format!("import {module}")
                    } else {
                        format!("import {module} as {alias}")
                    };
                    out.entry(alias.to_string()).or_insert(stmt);
                }
            }
        } else if let Some(rest) = t.strip_prefix("from ") {
            let Some((module, names)) = rest.split_once(" import ") else { continue };
            let module = module.trim();
            if !module.split('.').all(|s| s.is_empty() || is_ident(s)) {
                continue;
            }
            for part in names.trim_matches(|c| c == '(' || c == ')' || c == ' ').split(',') {
                let part = part.trim().trim_matches(|c| c == '(' || c == ')');
                let (name, alias) = match part.split_once(" as ") {
                    Some((n, a)) => (n.trim(), a.trim()),
                    None => (part, part),
                };
                if is_ident(name) && is_ident(alias) {
                    let stmt = if name == alias {
                        format!("from {module} import {name}")
                    } else {
                        format!("from {module} import {name} as {alias}")
                    };
                    out.entry(alias.to_string()).or_insert(stmt);
                }
            }
        }
    }
    out
}

pub(crate) fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The dotted module of a repository file: `src/pkg/a/__init__.py` gives `pkg.a`.
fn module_of(path: &str) -> Option<String> {
    let p = path.strip_suffix(".py")?;
    let p = p.strip_prefix("src/").or_else(|| p.strip_prefix("lib/")).unwrap_or(p);
    let p = p.strip_suffix("/__init__").unwrap_or(p);
    let parts: Vec<&str> = p.split('/').collect();
    parts.iter().all(|s| is_ident(s)).then(|| parts.join("."))
}

/// How the repository imports each of `names`: its most frequent import of that name
/// (absolute modules only), or a top-level function or class of that name that only one
/// non-test module defines.
fn repo_imports(store: &Store, names: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if names.is_empty() {
        return out;
    }
    if let Ok(rows) = crate::graph::import_counts(store, names) {
        let mut best: BTreeMap<String, (i64, String)> = BTreeMap::new();
        for (module, name, alias, n) in &rows {
            let (module, name, alias, n) = (module.as_str(), name.as_str(), alias.as_str(), *n);
            if module.starts_with('.') || module.is_empty() || name == "*" || !module.split('.').all(is_ident) {
                continue;
            }
            let (bound, stmt) = match (name, alias) {
                ("", "") => (module.to_string(), format!("import {module}")),
                ("", a) => (a.to_string(), format!("import {module} as {a}")),
                (nm, "") => (nm.to_string(), format!("from {module} import {nm}")),
                // `from m import name as short` still says where `name` comes from.
                (nm, a) if !names.iter().any(|n| n == a) => (nm.to_string(), format!("from {module} import {nm}")),
                (nm, a) => (a.to_string(), format!("from {module} import {nm} as {a}")),
            };
            if !names.contains(&bound) {
                continue;
            }
            let slot = best.entry(bound).or_insert((0, String::new()));
            if n > slot.0 || n == slot.0 && stmt < slot.1 {
                *slot = (n, stmt);
            }
        }
        out.extend(best.into_iter().map(|(k, (_, s))| (k, s)));
    }
    let rest: Vec<String> = names.iter().filter(|n| !out.contains_key(*n)).cloned().collect();
    if rest.is_empty() {
        return out;
    }
    if let Ok(rows) = crate::graph::top_level_definitions(store, &rest) {
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, file) in rows {
            by.entry(name).or_default().push(file);
        }
        for (name, files) in by {
            if let [one] = files.as_slice() {
                if let Some(m) = module_of(one) {
                    out.insert(name.clone(), format!("from {m} import {name}"));
                }
            }
        }
    }
    out
}

/// A package at the repository's top (or under `src/`) named `name`.
fn repo_package(root: &Path, name: &str) -> bool {
    is_ident(name)
        && ["", "src/", "lib/"].iter().any(|d| {
            root.join(format!("{d}{name}/__init__.py")).is_file() || root.join(format!("{d}{name}.py")).is_file()
        })
}

/// A top-level one-line assignment of `name` in the issue's other code (blocks and
/// inline spans): `app = Flask(__name__)` shown in the prose.
fn issue_assignment(facts: &IssueFacts, name: &str, code: &str) -> Option<String> {
    let mut spans: Vec<String> =
        facts.code_blocks.iter().flat_map(|(_, b)| b.lines().map(str::to_string).collect::<Vec<_>>()).collect();
    let mut rest = facts.prose.as_str();
    while let Some(i) = rest.find('`') {
        let after = &rest[i + 1..];
        let Some(j) = after.find('`') else { break };
        spans.push(after[..j].to_string());
        rest = &after[j + 1..];
    }
    spans.extend(facts.prose.lines().map(str::to_string));
    spans.into_iter().find(|l| {
        let t = l.trim_end();
        !t.starts_with(' ') && !t.starts_with('\t') && !code.contains(t) && {
            let lhs = t.split_once('=').map(|(a, b)| (a.trim(), b)).filter(|(_, b)| !b.starts_with('='));
            lhs.is_some_and(|(a, b)| a == name && !b.trim().is_empty()) && parses(t)
        }
    })
}

/// Resolve the snippet's free names and put an import (or the issue's assignment) for
/// each before the first top-level statement that uses it. Names nothing resolves are
/// left: the run's NameError then rejects the test, as it should. `environment_modules`
/// are names found importable where the test runs (see [`module_candidates`]); they are
/// taken last, and only for a name used as a module.
pub fn add_missing_names(
    code: &str,
    facts: &IssueFacts,
    raw: &str,
    store: Option<&Store>,
    root: &Path,
    environment_modules: &[String],
) -> String {
    let mut code = code.to_string();
    for _round in 0..2 {
        let free = free_names(&code);
        if free.is_empty() {
            break;
        }
        let from_issue = issue_imports(raw);
        let from_repo = store.map(|s| repo_imports(s, &free)).unwrap_or_default();
        let mut added = false;
        for name in &free {
            let stmt = from_issue
                .get(name)
                .cloned()
                .or_else(|| from_repo.get(name).cloned())
                .or_else(|| repo_package(root, name).then(|| format!("import {name}")))
                .or_else(|| CONVENTIONAL.iter().find(|(a, _)| a == name).map(|(_, s)| s.to_string()))
                .or_else(|| issue_assignment(facts, name, &code))
                .or_else(|| stdlib_import(&code, name))
                .or_else(|| {
                    (environment_modules.contains(name) && used_as_module(&code, name))
                        .then(|| format!("import {name}"))
                });
            if let Some(stmt) = stmt {
                code = insert_before_first_use(&code, name, &stmt);
                added = true;
            }
        }
        if !added {
            break;
        }
    }
    code
}

/// The free names nothing here resolved that the code uses as modules (`name.attr`),
/// each with the attributes it reads from it (`scipy.special`: `special`): the names to
/// look up in the environment the test runs in. A name counts as found there only when
/// it imports and has every one of those attributes (or submodules), so a variable the
/// issue left out is not taken for a module that happens to share its name.
pub fn module_candidates(code: &str) -> Vec<(String, Vec<String>)> {
    const MAX: usize = 8;
    let b = code.as_bytes();
    let word = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
    let mut out = Vec::new();
    for name in free_names(code) {
        if !is_ident(&name) || MODULE_NAMES.contains(&name.as_str()) || !used_as_module(code, &name) {
            continue;
        }
        let mut attrs: Vec<String> = Vec::new();
        let mut from = 0;
        while let Some(i) = code[from..].find(name.as_str()) {
            let at = from + i;
            from = at + name.len();
            let before = at.checked_sub(1).map(|k| b[k]);
            if word(before) || before == Some(b'.') || b.get(from) != Some(&b'.') {
                continue;
            }
            let attr: String =
                code[from + 1..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if is_ident(&attr) && !attrs.contains(&attr) {
                attrs.push(attr);
            }
        }
        if !attrs.is_empty() {
            out.push((name, attrs));
        }
        if out.len() == MAX {
            break;
        }
    }
    out
}

/// Insert `stmt` before the top-level statement that first uses `name` (so set-up code
/// above it, like `settings.configure()`, still runs first); at the top when that
/// statement is in the leading import block.
fn insert_before_first_use(code: &str, name: &str, stmt: &str) -> String {
    let lines: Vec<&str> = code.lines().collect();
    let at = first_word(code, name).map(|b| code[..b].matches('\n').count()).unwrap_or(0);
    // Back to the start of the top-level statement holding that line.
    let mut start = at.min(lines.len());
    while start > 0
        && lines
            .get(start)
            .is_some_and(|l| l.starts_with([' ', '\t']) || l.trim().is_empty() || l.trim_start().starts_with(')'))
    {
        start -= 1;
    }
    let mut out: Vec<String> = lines[..start].iter().map(|s| s.to_string()).collect();
    out.push(stmt.to_string());
    out.extend(lines[start..].iter().map(|s| s.to_string()));
    out.join("\n") + "\n"
}

/// The leading import block (imports, with parenthesized continuations, blank lines and
/// comments among them) and the rest, in order. Only the leading block may move to a
/// module's top: an import after code (after `settings.configure()`) must stay after it.
pub fn leading_imports(code: &str) -> (Vec<String>, Vec<String>) {
    let lines: Vec<&str> = code.lines().collect();
    let mut i = 0;
    let mut last_import_end = 0;
    while i < lines.len() {
        let t = lines[i];
        if t.starts_with("import ") || t.starts_with("from ") && t.contains(" import") {
            let mut j = i;
            if t.contains('(') && !t.contains(')') {
                while j + 1 < lines.len() && !lines[j].contains(')') {
                    j += 1;
                }
            }
            while lines[j].trim_end().ends_with('\\') && j + 1 < lines.len() {
                j += 1;
            }
            i = j + 1;
            last_import_end = i;
        } else if t.trim().is_empty() || t.trim_start().starts_with('#') {
            i += 1;
        } else {
            break;
        }
    }
    let head: Vec<String> =
        lines[..last_import_end].iter().filter(|l| !l.trim().is_empty()).map(|s| s.to_string()).collect();
    let rest: Vec<String> = lines[last_import_end..].iter().map(|s| s.to_string()).collect();
    (head, rest)
}

/// Is the snippet a test module itself (top-level `def test_*`, `class Test*` or a
/// `TestCase` subclass)? Then it is written as a module, not wrapped in a function.
pub fn is_test_module(code: &str) -> bool {
    code.lines().any(|l| {
        l.starts_with("def test")
            || l.starts_with("async def test")
            || l.starts_with("class Test")
            || l.starts_with("class ") && l.contains("TestCase")
    })
}

/// Python code pasted without fences: the first run of lines that reads as code (an
/// import, a definition, a statement, or an indented continuation) and parses as Python
/// once dedented. Tab-indented Trac text and whole test classes count.
pub fn unfenced_python(prose: &str) -> Option<String> {
    let lines: Vec<&str> = prose.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        // The source line a traceback prints under each frame is not the reporter's code.
        let after_frame = i > 0 && crate::localize::issue::is_frame_line(lines[i - 1]);
        if after_frame || !opens_code(lines[i].trim()) {
            i += 1;
            continue;
        }
        let base = indent_of(lines[i]);
        let mut j = i + 1;
        while j < lines.len() {
            let l = lines[j];
            let t = l.trim();
            if t.is_empty() {
                // A blank line ends the run unless code carries on after it.
                if lines
                    .get(j + 1)
                    .is_some_and(|n| !n.trim().is_empty() && (indent_of(n) > base || opens_code(n.trim())))
                {
                    j += 1;
                    continue;
                }
                break;
            }
            if indent_of(l) > base || opens_code(t) || t.starts_with(')') || t.starts_with(']') || t.starts_with('}') {
                j += 1;
            } else {
                break;
            }
        }
        let block = dedent(&lines[i..j]);
        let calls_or_defines = block.contains('(') || block.contains("import ") || block.contains("class ");
        if calls_or_defines && block.lines().count() >= 1 && parses(&block) && !block.trim().is_empty() {
            return Some(block);
        }
        i = j.max(i + 1);
    }
    None
}

fn indent_of(l: &str) -> usize {
    l.chars().take_while(|c| *c == ' ' || *c == '\t').map(|c| if c == '\t' { 4 } else { 1 }).sum()
}

fn dedent(lines: &[&str]) -> String {
    let expanded: Vec<String> = lines
        .iter()
        .map(|l| {
            let n = l.chars().take_while(|c| *c == ' ' || *c == '\t').count();
            let (ws, rest) = l.split_at(l.char_indices().nth(n).map(|(i, _)| i).unwrap_or(l.len()));
            ws.replace('\t', "    ") + rest.trim_end()
        })
        .collect();
    let min = expanded.iter().filter(|l| !l.trim().is_empty()).map(|l| indent_of(l)).min().unwrap_or(0);
    expanded.iter().map(|l| if l.len() >= min { &l[min..] } else { l.trim() }).collect::<Vec<_>>().join("\n") + "\n"
}

/// A line that starts Python code: a statement keyword, a decorator, an assignment or a
/// call of a (dotted) name. Prose (a sentence: words with spaces and no operator) never does.
fn opens_code(t: &str) -> bool {
    const OPENERS: &[&str] = &[
        "import ",
        "from ",
        "def ",
        "class ",
        "@",
        "for ",
        "while ",
        "if ",
        "with ",
        "try:",
        "assert ",
        "raise ",
        "return ",
        "print(",
        "async def ",
        ">>> ",
    ];
    if t.starts_with(">>>") {
        return false; // sessions are read as sessions
    }
    if t.starts_with("from ") && !t.contains(" import ") {
        return false;
    }
    if OPENERS.iter().any(|o| t.starts_with(o)) {
        return parses_as_start(t);
    }
    // `name = ...`, `name.attr(...)`, `name(...)`
    let head: String = t
        .chars()
        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '\'' | '"' | ',' | ' '))
        .collect();
    let after = &t[head.len()..];
    let head = head.trim();
    let simple = !head.is_empty()
        && head.split([',', ' ']).filter(|s| !s.is_empty()).count() <= 3
        && head.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_');
    simple
        && (after.starts_with('(') || after.starts_with('=') && !after.starts_with("==") || after.starts_with("+="))
        && parses_as_start(t)
}

/// A line that could begin valid code: it parses alone, or with a body added when it
/// opens a block.
fn parses_as_start(t: &str) -> bool {
    if t.ends_with(':') {
        return parses(&format!("{t}\n    pass\n"));
    }
    if t.ends_with('(') || t.ends_with('[') || t.ends_with('{') || t.ends_with(',') || t.ends_with('\\') {
        return true;
    }
    parses(t)
}

/// Values the prose gives for the code's result: `expected` (what it should be) and
/// `observed` (what it is today), as written (a quoted literal keeps its quotes).
/// `printed` holds the values read from labelled lines (`output: X`, `Expected: X`): text
/// a run printed, a value even when it is no Python literal.
#[derive(Debug, Default, PartialEq)]
pub struct ProseValues {
    pub expected: Vec<String>,
    pub observed: Vec<String>,
    pub printed: Vec<String>,
}

const EXPECT_CUES: &[&str] =
    &["expect", "expected", "should", "ought", "correct", "want", "desired", "supposed", "instead of"];
const CONTRAST: &[&str] = &[
    "but",
    "instead",
    "wrong",
    "incorrect",
    "unexpected",
    "unexpectedly",
    "however",
    "actual",
    "actually",
    "bug",
    "buggy",
    "broken",
    "invalid",
];
const OBSERVE_CUES: &[&str] = &[
    "get", "got", "gets", "returns", "returned", "gives", "gave", "output", "outputs", "prints", "printed", "becomes",
    "result", "actual", "but", "instead", "is", "shows", "yields",
];

/// Labels of a line that gives a value after them (`output: 3`, `Expected: 2.5`,
/// `Actual result: 3`): the words before the colon give its direction like a sentence's.
const VALUE_LABELS: &[&str] = &["output:", "expected:", "actual:", "result:"];

/// Words of a short heading-like line ("Expected behavior", "**Actual output**", "Bug
/// generation slug", "Improvement after correction") that say whether the values under
/// it are what the code should give or what it gives today.
const EXPECT_SECTION: &[&str] = &[
    "expected",
    "expect",
    "expectation",
    "desired",
    "should",
    "correct",
    "correction",
    "corrected",
    "fixed",
    "wanted",
];
const OBSERVE_SECTION: &[&str] = &["actual", "current", "currently", "observed", "bug", "buggy", "wrong", "incorrect"];

/// A heading-like line: at most six words with no code span and nothing code-like (`=`,
/// brackets), a Markdown heading or emphasis, or words before a colon. `cue` is the way
/// it points the values under it when it names one direction only; `markdown` when it is
/// a Markdown heading or a line in bold, which ends the section above it.
struct Heading {
    markdown: bool,
    cue: Option<bool>,
}

/// The words of a text, lowercased (letters and digits; everything else separates).
fn lower_words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

fn heading(line: &str) -> Option<Heading> {
    let trimmed = line.trim();
    let markdown =
        trimmed.starts_with('#') || trimmed.len() > 4 && trimmed.starts_with("**") && trimmed.ends_with("**");
    let t = trimmed.trim_start_matches('#').trim_matches(|c: char| c == '*' || c == '_' || c.is_whitespace());
    let t = t.strip_suffix(':').unwrap_or(t).trim_end_matches(['*', '_']);
    let words = lower_words(t);
    if words.is_empty() || words.len() > 6 || t.contains(['`', ':', '=', '(', ')', '[', ']', '{', '}']) {
        return None;
    }
    let expect = words.iter().any(|w| EXPECT_SECTION.contains(&w.as_str()));
    let observe = words.iter().any(|w| OBSERVE_SECTION.contains(&w.as_str()));
    let cue = match (expect, observe) {
        (true, false) => Some(true),
        (false, true) => Some(false),
        _ => None,
    };
    Some(Heading { markdown, cue })
}

/// Read the prose's `expected` and `observed` values: each code span takes its direction
/// from the nearest cue word before it in its sentence ("I would expect `X` but instead I
/// get `Y`"); the value after a label ([`VALUE_LABELS`]) from the label's words
/// ("Expected result: X"), else its sentence's, else the heading-like line above it
/// ("Expected output", "Bug ..." then "output: X").
pub fn prose_values(prose: &str) -> ProseValues {
    let mut v = ProseValues::default();
    let mut section: Option<bool> = None;
    for line in prose.lines() {
        match heading(line) {
            // A Markdown heading starts a section, whichever way it points ("### Steps
            // to reproduce" ends "### Expected behavior").
            Some(h) if h.markdown => {
                section = h.cue;
                continue;
            }
            // A plain short line ("Bug generation slug", "Example:") sets the way only
            // when it names one.
            Some(Heading { cue: Some(cue), .. }) => {
                section = Some(cue);
                continue;
            }
            _ => {}
        }
        // Code spans in order, with the text before each.
        let mut rest = line;
        let mut before = String::new();
        let mut found = false;
        while let Some(i) = rest.find('`') {
            let after = &rest[i + 1..];
            let Some(j) = after.find('`') else { break };
            before.push_str(&rest[..i]);
            let value = after[..j].trim().to_string();
            classify(&before, value, &mut v);
            found = true;
            before.push_str(&after[..j]);
            rest = &after[j + 1..];
        }
        if !found {
            // ASCII lowering keeps byte offsets: they index `line`.
            let low = line.to_ascii_lowercase();
            let label = VALUE_LABELS.iter().filter_map(|l| low.find(l).map(|k| (k, l.len()))).min();
            if let Some((k, n)) = label {
                // Past the emphasis that closes a bold label (`**Expected:** 2.5`).
                let value = line[k + n..].trim_start_matches(['*', '_']).trim().to_string();
                if !value.is_empty() && !value.contains(' ') {
                    // The label's own words first ("Expected result", "Actual output"),
                    // then its sentence's cue words, then the heading above.
                    let label = lower_words(&line[..k + n - 1]);
                    let near = &label[label.len().saturating_sub(3)..];
                    let way = if near.iter().any(|w| EXPECT_SECTION.contains(&w.as_str())) {
                        Some(true)
                    } else if near.iter().any(|w| OBSERVE_SECTION.contains(&w.as_str())) {
                        Some(false)
                    } else {
                        direction(&line[..k + n - 1])
                    };
                    match way.or(section) {
                        Some(true) => v.expected.push(value.clone()),
                        Some(false) => v.observed.push(value.clone()),
                        None => continue,
                    }
                    v.printed.push(value);
                }
            }
        }
    }
    v
}

fn classify(before: &str, value: String, v: &mut ProseValues) {
    if value.is_empty() || value.contains('\n') {
        return;
    }
    match direction(before) {
        Some(true) => v.expected.push(value),
        Some(false) => v.observed.push(value),
        None => {}
    }
}

/// Which way the sentence that ends with `before` points the value after it: the nearest
/// cue word before it says (`Some(true)`: what it should be; `Some(false)`: what it is
/// today, only where the sentence says it is wrong); None when no cue says.
fn direction(before: &str) -> Option<bool> {
    // The sentence the value is in.
    let sentence = before.rsplit(['.', '!', '?', ';']).next().unwrap_or(before);
    let words = lower_words(sentence);
    for (k, w) in words.iter().enumerate().rev().take(10) {
        let pair = words.get(k + 1).map(|n| format!("{w} {n}"));
        if pair.as_deref() == Some("instead of") || EXPECT_CUES.contains(&w.as_str()) {
            return Some(true);
        }
        if OBSERVE_CUES.contains(&w.as_str()) {
            // What it does today counts only where the sentence says it is wrong: "it
            // returns `X`" alone may describe the right behaviour.
            return CONTRAST.iter().any(|c| words.iter().any(|x| x == c)).then_some(false);
        }
    }
    None
}

/// The code's last top-level expression (a bare expression or the argument of a
/// `print`), with the line it is on.
fn final_expression(code: &str) -> Option<(usize, String)> {
    let lines: Vec<&str> = code.lines().collect();
    let (k, last) =
        lines.iter().enumerate().rev().find(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))?;
    if last.starts_with([' ', '\t']) {
        return None;
    }
    let t = last.trim();
    let expr = match t.strip_prefix("print(").and_then(|r| r.strip_suffix(')')) {
        Some(inner) => inner.trim().to_string(),
        None => t.to_string(),
    };
    let tree = parse(&expr)?;
    let root = tree.root_node();
    let stmt = root.named_child(0)?;
    (root.named_child_count() == 1
        && stmt.kind() == "expression_statement"
        && !root.has_error()
        && stmt.named_child_count() == 1
        && stmt
            .named_child(0)
            .is_some_and(|e| !matches!(e.kind(), "assignment" | "augmented_assignment" | "yield" | "await")))
    .then_some((k, expr))
}

/// A Python literal: a number, a quoted string, True/False/None, or a bracketed
/// collection that parses and calls nothing.
fn literal(v: &str) -> bool {
    let v = v.trim();
    if matches!(v, "True" | "False" | "None") || v.parse::<f64>().is_ok() {
        return true;
    }
    let quoted = v.len() >= 2 && (v.starts_with('\'') && v.ends_with('\'') || v.starts_with('"') && v.ends_with('"'));
    let bracketed = v.starts_with(['[', '(', '{']) && v.ends_with([']', ')', '}']);
    quoted || bracketed && parses(v) && !v.chars().any(|c| c.is_alphabetic() && !v.contains('\'') && !v.contains('"'))
}

/// The text of a value as a Python string literal: a quoted literal's contents, else the
/// text itself (what `str()` of the value prints).
fn text_of(value: &str) -> String {
    let v = value.trim();
    let quoted = v.len() >= 2 && (v.starts_with('\'') && v.ends_with('\'') || v.starts_with('"') && v.ends_with('"'));
    let inner = if quoted { &v[1..v.len() - 1] } else { v };
    format!("{inner:?}").replace("\\\\n", "\\n")
}

/// Turn the value the prose talks about into the assertion: the snippet's final
/// expression must no longer print what the issue says it prints today (compared
/// without whitespace), or, when the issue gives only what it should be, must print that.
/// None when the prose gives no value, or the code ends in no expression.
pub fn final_assertion(code: &str, values: &ProseValues) -> Option<String> {
    let (k, expr) = final_expression(code)?;
    // An expected value must be a literal (`'a-b'`, `2.5`, `None`, `[1, 2]`): "I expected
    // `f()` to raise" names code, not a value. What it gives today may be printed text
    // (`Max(2, x)`) when the prose also says what it should be.
    // Text an `output:` line shows is what the run printed: a value as it is.
    let printed = |v: &String| values.printed.contains(v);
    let expected = values.expected.iter().find(|e| !expr.contains(e.as_str()) && (literal(e) || printed(e)));
    let observed = values.observed.iter().find(|o| {
        !values.expected.contains(o)
            && !expr.contains(o.as_str())
            && (literal(o) || expected.is_some() && !o.contains(' '))
    });
    let lines: Vec<&str> = code.lines().collect();
    let mut out: String = lines[..k].iter().map(|l| format!("{l}\n")).collect();
    let norm = "\"\".join(str(_value).split())";
    out.push_str(&format!("_value = {expr}\n"));
    match (observed, expected) {
        (Some(o), _) => {
            out.push_str(&format!("assert {norm} != \"\".join({}.split()), \"still \" + repr(_value)\n", text_of(o)))
        }
        (None, Some(e)) => out.push_str(&format!(
            "assert {norm} == \"\".join({}.split()), repr(_value) + \", the issue expects \" + {}\n",
            text_of(e),
            text_of(e)
        )),
        (None, None) => return None,
    }
    Some(out)
}

/// Phrases that say the error does not happen (today, or any more): "no longer raises",
/// "does not raise", "passes silently", "without an error"; or that what the issue shows
/// is not today's behaviour ("this changed in 1.7").
const SILENT_CUES: &[&str] = &[
    "no longer raise",
    "no longer throw",
    "no longer fail",
    "no longer error",
    "n't raise",
    "not raise",
    "n't throw",
    "not throw",
    "not raised",
    "n't raised",
    "not thrown",
    "never raise",
    "without raising",
    "without an error",
    "without error",
    "without any error",
    "without an exception",
    "without exception",
    "no error",
    "no exception",
    "silently",
    "now return",
    "now it return",
    "now just return",
    "now simply return",
    "now it just return",
    "now it simply return",
    "it now return",
    "now quietly",
    // The behaviour shown is not today's: "this changed in 1.7".
    "changes in",
    "changed in",
    "changed since",
    "changed with",
    "has changed",
    "have changed",
    "was changed",
    "behaviour changed",
    "behavior changed",
    "this changed",
];

/// Phrases that say the error is today's (the bug): it started raising, or what used
/// to work no longer does.
const CURRENT_CUES: &[&str] = &[
    "now raise",
    "now fail",
    "now crash",
    "now throw",
    "now error",
    "started raising",
    "starts raising",
    "began raising",
    "start raising",
    "started to raise",
    "started failing",
    "started to fail",
];

/// Phrases that say the code used to work: whatever error the issue shows is today's.
const WORKED_CUES: &[&str] = &[
    "used to work",
    "worked",
    "was working",
    "used to pass",
    "was fine",
    "were fine",
    "no longer work",
    "stopped working",
    "n't work anymore",
    "not work anymore",
    "n't work any more",
    "not work any more",
];

/// Phrases that say the error is not wanted: "it should not raise".
const UNWANTED_CUES: &[&str] = &[
    "should not",
    "shouldn't",
    "should never",
    "must not",
    "mustn't",
    "expect no ",
    "expected no ",
    "expect it not",
    "expected it not",
    "not expect",
    "n't expect",
    "not supposed",
    "n't supposed",
    "should be no ",
];

/// Words that put the error in the past, as the behaviour it used to have.
const OLD_CUES: &[&str] = &[
    "used to",
    "previously",
    "in the past",
    "before upgrading",
    "prior to",
    "no longer",
    "anymore",
    "any more",
    "was raised",
    "were raised",
];

/// Words that say what should happen.
const WANT_CUES: &[&str] =
    &["should", "expect", "ought", "supposed to", "would like", "want", "correct behavio", "desired", "instead of"];

/// The sentences of a text: split at ". " (not at the dots of a version number or a
/// dotted name), "!", "?" and line ends; pieces untrimmed, empty ones kept.
pub(crate) fn sentences(text: &str) -> Vec<String> {
    text.replace(". ", "\n").split(['\n', '!', '?']).map(str::to_string).collect()
}

/// Which way the error an issue names points, read from its prose.
#[derive(Debug, Clone, PartialEq)]
pub enum Direction {
    /// The error is today's failure: a test expects it (the common case).
    Current,
    /// The error is the behaviour the issue wants (back): it used to be raised, or should
    /// be, and the prose says it is not raised today. A test asserts it is raised.
    Restore { kind: String },
    /// The error is shown as the old behaviour, but the prose does not say what happens
    /// now, or names no error class: no test can be built the right way round.
    Unclear(String),
}

/// An exception class named in a sentence, the first one: a name ending in `Error` or
/// `Exception` (`ValueError`, `django.core.exceptions.FieldError`), or, in a sentence
/// about raising, a class name in a code span (`` raised `OutOfStock` ``).
fn exception_named(sentence: &str) -> Option<String> {
    let class_like = |w: &str| {
        w.split('.').all(is_ident)
            && w.rsplit('.').next().and_then(|l| l.chars().next()).is_some_and(char::is_uppercase)
    };
    let by_suffix = sentence
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .map(|w| w.trim_matches('.'))
        .find(|w| {
            let last = w.rsplit('.').next().unwrap_or(w);
            class_like(w) && (last.ends_with("Error") || last.ends_with("Exception"))
        });
    if let Some(w) = by_suffix {
        return Some(w.to_string());
    }
    let low = sentence.to_lowercase();
    if !(low.contains("raise") || low.contains("throw")) {
        return None;
    }
    sentence
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::trim)
        .find(|w| class_like(w) && w.rsplit('.').next().is_some_and(|l| l.chars().any(char::is_lowercase)))
        .map(str::to_string)
}

/// Does a sentence restate an error message: two or more of its words (a message of one
/// word: that word)?
fn restates(sentence: &str, message_words: &[String]) -> bool {
    let words: Vec<&str> = sentence.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
    let hits = message_words.iter().filter(|w| words.contains(&w.as_str())).count();
    !message_words.is_empty() && hits >= message_words.len().min(2)
}

/// Read the direction of the issue's error from its prose (title included): does the
/// issue report it as what happens today, or as what used to happen (or should) and no
/// longer does? Each sentence about an error is one of: the error is unwanted ("should
/// not raise"), wanted ("should raise"), absent today ("no longer raises", "passes
/// silently"), today's ("now raises", "used to work"), or the old behaviour ("in 2.3 this
/// raised", "used to raise"). Today's wins; wanted or old plus absent today is
/// [`Direction::Restore`]; old alone is [`Direction::Unclear`].
pub fn error_direction(facts: &IssueFacts) -> Direction {
    let shown = facts.exceptions.last().map(|e| e.kind.clone());
    // The words of the shown error's message: a sentence that restates it ("had no
    // `lid` attribute") is about that error.
    let message_words: Vec<String> = facts
        .exceptions
        .last()
        .map(|e| {
            e.message
                .to_lowercase()
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| w.len() >= 3 && !matches!(*w, "the" | "and" | "has" | "for" | "not" | "object" | "with"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let short_of = |k: &str| k.rsplit('.').next().unwrap_or(k).to_lowercase();
    let (mut current, mut wanted, mut old, mut silent) = (false, false, false, false);
    let mut named: Option<String> = None;
    for raw in sentences(&facts.prose) {
        let s = raw.to_lowercase();
        if s.trim().is_empty() {
            continue;
        }
        let about_error = s.contains("error")
            || s.contains("exception")
            || s.contains("raise")
            || s.contains("throw")
            || shown.as_deref().is_some_and(|k| s.contains(&short_of(k)))
            || restates(&s, &message_words);
        let negated = SILENT_CUES.iter().any(|c| s.contains(c))
            || (s.contains("anymore") || s.contains("any more"))
                && (s.contains("n't") || s.contains(" not ") || s.contains(" no "))
                && about_error;
        let wants = WANT_CUES.iter().any(|c| s.contains(c));
        let was = OLD_CUES.iter().any(|c| s.contains(c)) || version_then(&s);
        let any = |cues: &[&str]| cues.iter().any(|c| s.contains(c));
        if about_error && (any(UNWANTED_CUES) || any(CURRENT_CUES)) || any(WORKED_CUES) {
            current = true;
        } else if negated {
            silent = true;
            old |= was;
            wanted |= wants && about_error;
        } else if wants && about_error {
            wanted = true;
        } else if was && about_error {
            old = true;
        } else {
            continue;
        }
        if named.is_none() && (wants || was || negated) {
            named = exception_named(&raw);
        }
    }
    if current {
        return Direction::Current;
    }
    let kind = shown.or(named);
    match (old || wanted, silent, kind) {
        (true, true, Some(kind)) => Direction::Restore { kind },
        (true, true, None) => Direction::Unclear(
            "the issue says an error used to be raised (or should be) and is not today, but names no error class to expect".into(),
        ),
        (true, false, Some(kind)) if old => Direction::Unclear(format!(
            "the issue shows {} as the behaviour it used to have, not the failure it reports now, and does not say what happens today",
            kind.rsplit('.').next().unwrap_or(&kind)
        )),
        _ => Direction::Current,
    }
}

/// Is the error the issue shows the old behaviour (so a test expecting it today would be
/// inverted)? The reason, when the direction is not today's failure.
pub fn shows_old_behaviour(facts: &IssueFacts) -> Option<String> {
    match error_direction(facts) {
        Direction::Current => None,
        Direction::Restore { kind } => Some(format!(
            "the issue shows {} as the behaviour it used to have (or should have), not the failure it reports now",
            kind.rsplit('.').next().unwrap_or(&kind)
        )),
        Direction::Unclear(why) => Some(why),
    }
}

/// "in 1.6.2 this raised ..." / "with version 2.0 it gave an error": a version and a
/// past tense of raising.
fn version_then(s: &str) -> bool {
    let has_version = s.split_whitespace().any(|w| {
        let w = w.trim_start_matches('v').trim_matches(|c: char| !c.is_ascii_digit());
        w.split('.').count() >= 2 && w.split('.').all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    });
    has_version
        && (s.contains(" raised")
            || s.contains(" threw")
            || s.contains(" gave ")
            || s.contains(" was ")
            || s.contains(" had "))
        && !s.contains(" now ")
}

/// The snippet's statements after its leading imports, run so that the error the issue
/// wants back must be raised: `try: ... except Kind: pass`, else an `AssertionError`
/// saying it was not raised. The class is bound first, outside the `try`, so a class
/// nothing resolves fails the set-up today (NameError) rather than only after the fix.
pub fn restore_assertion(code: &str, kind: &str) -> (String, String) {
    let short = kind.rsplit('.').next().unwrap_or(kind);
    let (head, rest) = leading_imports(code);
    let mut out: String = head.iter().map(|l| format!("{l}\n")).collect();
    let class = match kind.rsplit_once('.') {
        Some((module, name)) if module.split('.').all(is_ident) => {
            out.push_str(&format!("from {module} import {name}\n"));
            name.to_string()
        }
        _ => short.to_string(),
    };
    out.push_str(&format!("_wanted = {class}  # the error the issue says this should raise\ntry:\n"));
    let body: Vec<&String> = rest.iter().skip_while(|l| l.trim().is_empty()).collect();
    for l in &body {
        if l.trim().is_empty() {
            out.push('\n');
        } else {
            out.push_str(&format!("    {l}\n"));
        }
    }
    if body.iter().all(|l| l.trim().is_empty()) {
        out.push_str("    pass\n");
    }
    let message = format!("{short} not raised");
    out.push_str(&format!(
        "except _wanted:\n    pass\nelse:\n    raise AssertionError(\"{message}: the issue says this should raise it\")\n"
    ));
    (out, message)
}

/// Does the prose present the example as several files (`test_a.py`, `conftest.py`
/// named before two or more code blocks)? Then it is not one function's body.
pub fn multi_file_names(raw: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut last_name: Option<String> = None;
    let mut in_block = false;
    for line in raw.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            if !in_block {
                if let Some(n) = last_name.take() {
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
            in_block = !in_block;
            continue;
        }
        if in_block {
            if let Some(n) = t.strip_prefix("# content of ").or_else(|| t.strip_prefix("# ")).map(str::trim) {
                if n.ends_with(".py") && is_ident(n.trim_end_matches(".py")) && !names.contains(&n.to_string()) {
                    names.push(n.to_string());
                }
            }
            continue;
        }
        if !t.is_empty() {
            last_name = t
                .split(|c: char| c.is_whitespace() || matches!(c, '`' | '*' | ':' | '(' | ')' | ','))
                .find(|w| w.ends_with(".py") && is_ident(w.trim_end_matches(".py")))
                .map(str::to_string);
        }
    }
    names
}

/// Rewrite a Python snippet's code into a test body, or say why no honest test can be
/// built from it. Other languages pass through unchanged. The failure the test must show
/// comes back when the body decides it ([`Direction::Restore`]: "X not raised"); else
/// the caller takes the issue's error or the snippet's assertion.
pub fn prepare(
    snippet: &super::synth::Snippet,
    facts: &IssueFacts,
    raw: &str,
    store: Option<&Store>,
    root: &Path,
    environment_modules: &[String],
) -> Result<(super::synth::Snippet, Option<super::Expected>), String> {
    if snippet.dialect != "python" {
        return Ok((snippet.clone(), None));
    }
    let files = multi_file_names(raw);
    if files.len() >= 2 {
        return Err(format!(
            "the issue's example is {} files ({}): key-free mode builds one test file, and merging them changes what the code does",
            files.len(),
            files.join(", ")
        ));
    }
    let direction = error_direction(facts);
    if let Direction::Unclear(why) = &direction {
        return Err(format!("{why}: a test expecting it today would be inverted"));
    }
    let mut code = add_missing_names(&snippet.code, facts, raw, store, root, environment_modules);
    let checks_raise = |c: &str| c.contains("raises(") || c.contains("assertRaises");
    let asserts =
        code.lines().any(|l| l.trim_start().starts_with("assert ") || l.trim_start().starts_with("self.assert"));
    let mut expected = None;
    match direction {
        Direction::Restore { kind } if !checks_raise(&code) && !is_test_module(&code) => {
            let (wrapped, message) = restore_assertion(&code, &kind);
            // The class of a bare name (`FieldError`) is imported like any other free name.
            code = add_missing_names(&wrapped, facts, raw, store, root, environment_modules);
            expected = Some(super::Expected { kind: "AssertionError".into(), message: Some(message) });
        }
        // The code already expects the error (a session's traceback before its last
        // statement becomes `pytest.raises`; a test the issue pasted): that is the right
        // direction, and today it fails because nothing is raised.
        Direction::Restore { kind } => {
            let short = kind.rsplit('.').next().unwrap_or(&kind);
            let expects =
                |k: &str| code.contains(&format!("raises({k})")) || code.contains(&format!("assertRaises({k}"));
            expected = Some(if expects(short) || expects("Exception") && code.contains("pytest.raises(Exception)") {
                if code.contains("pytest.raises(") {
                    super::Expected { kind: "Failed".into(), message: Some("DID NOT RAISE".into()) }
                } else {
                    super::Expected { kind: "AssertionError".into(), message: Some(format!("{short} not raised")) }
                }
            } else {
                return Err(format!(
                    "the issue wants {short} raised again, and its code checks for other errors: key-free mode does not rewrite that check"
                ));
            });
        }
        // The session says what the code must give today (`DID NOT RAISE`).
        _ if snippet.expected.is_some() => expected = snippet.expected.clone(),
        _ if facts.exceptions.is_empty() && !asserts => {
            if let Some(c) = final_assertion(&code, &prose_values(&facts.prose)) {
                code = c;
            }
        }
        _ => {}
    }
    Ok((super::synth::Snippet { code, ..snippet.clone() }, expected))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_names_skip_bindings_attributes_and_builtins() {
        let code = "import os\nfrom a.b import c as d\nx = sympy.Symbol('x')\nfor i, j in pairs:\n    print(len(i), j, d)\ndef f(p, q=np.nan, *r, **s):\n    return p + q + helper(key=1)\nobj.attr.method()\n";
        assert_eq!(free_names(code), vec!["sympy", "pairs", "np", "helper", "obj"]);
    }

    #[test]
    fn names_come_from_the_issues_other_code_and_conventions() {
        let raw = "Login breaks\n\nMy app is built as `app = Server(__name__)` with `from webkit import Server`.\n\n```python\nclient = app.client()\nprint(np.zeros(2), client.get('/'))\n```\n";
        let facts = crate::localize::read_issue(raw);
        let dir = tempfile::tempdir().unwrap();
        let code = add_missing_names(&facts.code_blocks[0].1, &facts, raw, None, dir.path(), &[]);
        assert_eq!(
            code,
            "from webkit import Server\napp = Server(__name__)\nclient = app.client()\nimport numpy as np\nprint(np.zeros(2), client.get('/'))\n"
        );
    }

    #[test]
    fn standard_library_names_the_session_left_unimported_are_imported() {
        let raw = "Rounding is off\n\n```python\nwith tempfile.TemporaryDirectory() as d:\n    p = Path(d) / 'x'\n    print(json.dumps(str(Decimal('1.10'))), datetime(2020, 1, 1), os.getcwd())\n```\n";
        let facts = crate::localize::read_issue(raw);
        let dir = tempfile::tempdir().unwrap();
        let code = add_missing_names(&facts.code_blocks[0].1, &facts, raw, None, dir.path(), &[]);
        for want in [
            "import tempfile\n",
            "from pathlib import Path\n",
            "import json\n",
            "from decimal import Decimal\n",
            "from datetime import datetime\n",
            "import os\n",
        ] {
            assert!(code.contains(want), "{want:?} missing:\n{code}");
        }
        assert!(parses(&code), "{code}");
        // A free name used as a variable is not taken for a module of the same name, nor a
        // module used as a name (`string` passed, not `string.x`).
        let code =
            add_missing_names("print(string, code.strip(), path.join('a'))\n", &facts, raw, None, dir.path(), &[]);
        assert!(!code.contains("import"), "{code}");
    }

    #[test]
    fn leading_imports_stop_at_code() {
        let code = "import os\nfrom x import (\n    a,\n    b,\n)\n\nfrom django.conf import settings\nsettings.configure()\nfrom django.db import models\nclass M(models.Model):\n    pass\n";
        let (head, rest) = leading_imports(code);
        assert_eq!(
            head,
            vec!["import os", "from x import (", "    a,", "    b,", ")", "from django.conf import settings"]
        );
        assert_eq!(rest[1], "from django.db import models");
        assert_eq!(rest[0], "settings.configure()");
    }

    #[test]
    fn prose_gives_expected_and_observed() {
        let v = prose_values("Running it I would expect `'A[b, 2]'` here, but instead I get `'A(2, b)'`.\n");
        assert_eq!(v.expected, vec!["'A[b, 2]'"]);
        assert_eq!(v.observed, vec!["'A(2, b)'"]);
        let v = prose_values("The output is wrong: `--foo-bar-`\n");
        assert_eq!(v.observed, vec!["--foo-bar-"]);
        // What it does, without a word saying it is wrong, is no evidence either way.
        assert_eq!(prose_values("For ints it returns `3`.\n"), ProseValues::default());
    }

    #[test]
    fn an_output_line_takes_the_direction_of_the_heading_above_it() {
        // django-12983's shape (Trac): the same call twice, what it prints under "Bug ...",
        // what it should print under "... after correction".
        let prose = "Make slug() strip dashes\nBug generation slug\nExample:\nfrom shop import text\ntext.slug(\"___This is a test ---\")\noutput: ___this-is-a-test-\nImprovement after correction\nfrom shop import text\ntext.slug(\"___This is a test ---\")\noutput: this-is-a-test\n";
        let v = prose_values(prose);
        assert_eq!(v.observed, ["___this-is-a-test-"]);
        assert_eq!(v.expected, ["this-is-a-test"]);
        assert_eq!(v.printed, ["___this-is-a-test-", "this-is-a-test"]);
        let out = final_assertion("from shop import text\ntext.slug(\"___This is a test ---\")\n", &v).unwrap();
        assert!(out.ends_with("_value = text.slug(\"___This is a test ---\")\nassert \"\".join(str(_value).split()) != \"\".join(\"___this-is-a-test-\".split()), \"still \" + repr(_value)\n"), "{out}");
        // GitHub's template headings, the expected value alone: printed text is a value.
        let v = prose_values("### Expected behavior\noutput: 3.5\n### Actual behavior\nIt hangs.\n");
        assert_eq!((v.expected.as_slice(), v.observed.len()), (["3.5".to_string()].as_slice(), 0));
        let v = prose_values("**Expected output:**\noutput: a-b\n");
        let out = final_assertion("f('a b')\n", &v).unwrap();
        assert!(out.contains("== \"\".join(\"a-b\".split())"), "{out}");
        // Under no heading, or one naming both ways, an output line is no evidence.
        assert_eq!(prose_values("Example:\noutput: x-y\n"), ProseValues::default());
        assert_eq!(prose_values("Expected vs actual\noutput: x-y\n"), ProseValues::default());
        // Labels other than `output:` give their own direction.
        let v = prose_values("Expected: 2.5\nActual: 3\n");
        assert_eq!(
            (v.expected.as_slice(), v.observed.as_slice()),
            (["2.5".to_string()].as_slice(), ["3".to_string()].as_slice())
        );
        let v = prose_values("* **Expected result:** ab-cd\n* **Actual result:** -ab-cd-\n");
        assert_eq!(
            (v.expected.as_slice(), v.observed.as_slice()),
            (["ab-cd".to_string()].as_slice(), ["-ab-cd-".to_string()].as_slice())
        );
        // A result without a word saying which way is no evidence.
        assert_eq!(prose_values("result: 3\n"), ProseValues::default());
        // Text whose lowercase is longer than itself is read without a panic.
        assert_eq!(prose_values("İİİ Output: x\n").printed, Vec::<String>::new());
        // A Markdown heading that names no way ends the section above it; a line of code
        // is no heading.
        assert_eq!(
            prose_values("### Expected behavior\nIt works.\n### Steps to reproduce\noutput: x-y\n"),
            ProseValues::default()
        );
        assert_eq!(prose_values("expected = slug(a)\noutput: x-y\n"), ProseValues::default());
        // A line saying more than a heading does not set one.
        assert_eq!(
            prose_values("This call should be made by the user when they set up the app\noutput: x-y\n"),
            ProseValues::default()
        );
    }

    #[test]
    fn final_expression_becomes_the_assertion() {
        let v = ProseValues {
            expected: vec!["'A[b, 2]'".into()],
            observed: vec!["'A(2, b)'".into()],
            ..Default::default()
        };
        let out = final_assertion("b = sym('b')\nprint(render(A(b, 2)))\n", &v).unwrap();
        assert!(out.starts_with("b = sym('b')\n_value = render(A(b, 2))\nassert \"\".join(str(_value).split()) != \"\".join(\"A(2, b)\".split())"), "{out}");
        // Code is not a value.
        let v = ProseValues { expected: vec!["load()".into()], observed: vec!["3 items".into()], ..Default::default() };
        assert!(final_assertion("m = load()\nm.tags\n", &v).is_none());
        let v = ProseValues { expected: vec!["None".into()], observed: vec![], ..Default::default() };
        let out = final_assertion("m = load()\nm.tags\n", &v).unwrap();
        assert!(
            out.contains("_value = m.tags\nassert \"\".join(str(_value).split()) == \"\".join(\"None\".split())"),
            "{out}"
        );
        assert!(final_assertion("x = 1\n", &v).is_none());
        assert!(final_assertion("for a in b:\n    a\n", &v).is_none());
    }

    #[test]
    fn unfenced_code_is_found_and_prose_is_not() {
        let prose =
            "Steps to see it\nRun this:\n\tfrom shop.util import slug\n\tslug('__A b --')\nIt returns the dashes.\n";
        assert_eq!(unfenced_python(prose).unwrap(), "from shop.util import slug\nslug('__A b --')\n");
        let prose = "Some words here.\nclass TestThing(unittest.TestCase):\n    def test_it(self):\n        self.assertEqual(f(1), 2)\n\nThanks!\n";
        let got = unfenced_python(prose).unwrap();
        assert!(
            got.starts_with("class TestThing(unittest.TestCase):\n    def test_it(self):") && is_test_module(&got),
            "{got}"
        );
        assert_eq!(
            unfenced_python("It fails when I import things from the module.\nThe result (see above) is wrong.\n"),
            None
        );
    }

    #[test]
    fn old_behaviour_is_recognised() {
        let f = crate::localize::read_issue("Attribute access changed\n\nIn 2.3.1 this raised `AttributeError`, which is right. Since 2.4 it returns None silently.\n\nAttributeError: 'Box' object has no attribute 'lid'\n");
        assert!(shows_old_behaviour(&f).is_some());
        let f = crate::localize::read_issue(
            "Crash on load\n\nLoading a box raises an error:\n\nAttributeError: 'Box' object has no attribute 'lid'\n",
        );
        assert!(shows_old_behaviour(&f).is_none());
    }

    fn direction(text: &str) -> Direction {
        error_direction(&crate::localize::read_issue(text))
    }

    #[test]
    fn the_prose_gives_the_direction_of_the_error() {
        let restore = |k: &str| Direction::Restore { kind: k.into() };
        // The error is the old, right behaviour and the prose says what happens now.
        assert_eq!(
            direction("Attribute access changed\n\nIn 2.3.1 this raised `AttributeError`, which is right. Since 2.4 it returns None silently.\n\nAttributeError: 'Box' object has no attribute 'lid'\n"),
            restore("AttributeError")
        );
        assert_eq!(
            direction("Negative index accepted\n\nSince 0.9 `Grid.cell(-1)` no longer raises IndexError, it wraps around to the last cell.\n"),
            restore("IndexError")
        );
        // Wanted rather than old, named only in the prose, with its module.
        assert_eq!(
            direction("Empty names pass\n\n`register('')` should raise `registry.errors.BadNameError`, but it silently stores an empty key.\n"),
            restore("registry.errors.BadNameError")
        );
        assert_eq!(
            direction("Version 1.4.0 raised `OutOfStock` when the shelf was empty. Now it just returns 0.\n"),
            restore("OutOfStock")
        );
        // The sentence before the session restates its error in the past; the next says it changed.
        assert_eq!(
            direction("Grid cells appeared\n\nIn release 4.2.0 grids had no `cells` attribute:\n\n```python\n>>> Grid(2).cells\nTraceback (most recent call last):\n  File \"<stdin>\", line 1, in <module>\nAttributeError: 'Grid' object has no attribute 'cells'\n```\n\nThis changed in 4.3, where `Grid(2).cells` is an empty list.\n"),
            restore("AttributeError")
        );
        // Old, and nothing about today: no direction to build.
        assert!(matches!(
            direction("Lookup of missing keys\n\nIn 3.0 this raised a KeyError.\n\nKeyError: 'x'\n"),
            Direction::Unclear(_)
        ));
        // An error wanted back, but no class to expect.
        assert!(matches!(
            direction("Bad input accepted\n\nIt used to raise an error for this input, now it passes silently.\n"),
            Direction::Unclear(_)
        ));
        // Today's failure, however the past is mentioned.
        for text in [
            "Regression\n\nThis used to work in 1.2, but since 1.3 it raises:\n\nTypeError: unsupported operand\n",
            "Regression\n\nIn 1.2 it worked. In 1.3 it now raises TypeError.\n\nTypeError: unsupported operand\n",
            "Crash\n\nSaving doesn't work anymore, it throws a RuntimeError.\n\nRuntimeError: closed\n",
            "Crash\n\nThis should not raise a KeyError. It raises one when the list is empty.\n\nKeyError: 'a'\n",
            "Crash on load\n\nLoading a box raises an error:\n\nAttributeError: 'Box' object has no attribute 'lid'\n",
            "Wrong total\n\nThe total is 3 instead of 4. No error is raised.\n",
            "Defaults\n\nIn 2.0 the default changed. Since then calling `f()` raises ValueError.\n\nValueError: bad default\n",
            "Confusing error\n\nIn 1.5 this raised a clear ValueError. It was changed in 1.6 and now raises a TypeError.\n\nTypeError: x\n",
            "Index error\n\nPreviously the list index was fine. With 2.0:\n\nIndexError: list index out of range\n",
        ] {
            assert_eq!(direction(text), Direction::Current, "{text}");
        }
    }

    #[test]
    fn the_error_wanted_back_is_asserted_raised() {
        let (code, message) = restore_assertion("from m import f\n\nx = f(-1)\nprint(x)\n", "ValueError");
        assert_eq!(message, "ValueError not raised");
        assert!(
            code.starts_with("from m import f\n_wanted = ValueError  # ")
                && code.contains("\ntry:\n    x = f(-1)\n    print(x)\nexcept _wanted:\n    pass\nelse:\n    raise AssertionError(\"ValueError not raised: "),
            "{code}"
        );
        assert!(parses(&code), "{code}");
        // A class with its module is imported from there, with the other leading imports.
        let (code, message) = restore_assertion("import shop\nshop.take(0)\n", "shop.errors.OutOfStock");
        assert_eq!(message, "OutOfStock not raised");
        assert!(code.starts_with("import shop\nfrom shop.errors import OutOfStock\n_wanted = OutOfStock"), "{code}");
        assert_eq!(leading_imports(&code).0, vec!["import shop", "from shop.errors import OutOfStock"]);
    }

    #[test]
    fn module_candidates_are_free_names_used_as_modules_with_their_attributes() {
        let code = "import os\nx = numpy.zeros(3)\ny = scipy.special.gamma(x) + scipy.stats.norm(numpy.pi)\nz = frame(data.shape, os.sep)\n";
        assert_eq!(
            module_candidates(code),
            vec![
                ("numpy".to_string(), vec!["zeros".to_string(), "pi".to_string()]),
                ("scipy".to_string(), vec!["special".to_string(), "stats".to_string()]),
                ("data".to_string(), vec!["shape".to_string()]),
            ]
        );
        // Found in the environment, a name used as a module is imported last of all
        // sources; a name used otherwise is not.
        let raw = "Zeros\n\n```python\nprint(numpy.zeros(2), frame)\n```\n";
        let facts = crate::localize::read_issue(raw);
        let dir = tempfile::tempdir().unwrap();
        let env = ["numpy".to_string(), "frame".to_string()];
        let code = add_missing_names(&facts.code_blocks[0].1, &facts, raw, None, dir.path(), &env);
        assert_eq!(code, "import numpy\nprint(numpy.zeros(2), frame)\n");
    }

    #[test]
    fn multi_file_examples_are_seen() {
        let raw =
            "Two modules:\n\n`test_one.py`:\n```python\nimport x\n```\nand test_two.py\n```python\nimport y\n```\n";
        assert_eq!(multi_file_names(raw), vec!["test_one.py", "test_two.py"]);
    }
}
