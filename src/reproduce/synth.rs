//! Tests built from what an issue carries: a code block or a doctest session becomes a
//! test in the repository's framework, unchanged but for the wrapping it needs.

use std::path::Path;

use super::conventions::Conventions;
use super::form::{js_test_dir, python_test_path, star_import_cleanup, PyForm};
use crate::lang::Lang;
use crate::localize::IssueFacts;

/// Runnable code found in an issue.
#[derive(Debug, Clone, PartialEq)]
pub struct Snippet {
    pub lang: Lang,
    /// `js` for JavaScript, `python`, `java`.
    pub dialect: &'static str,
    pub code: String,
    pub from_doctest: bool,
    /// The failure the code must give today when the session says it (a call marked
    /// wrong next to one that raises: `DID NOT RAISE`); else it is read from the issue.
    pub expected: Option<super::Expected>,
}

pub(crate) fn is_traceback_text(s: &str) -> bool {
    s.contains("Traceback (most recent call last)")
        || s.lines().any(|l| {
            let t = l.trim_start();
            // pytest's report: `E   AssertionError: ...`, `>       assert x`.
            t.starts_with("File \"")
                || t.starts_with("at ") && t.contains(".java:")
                || t.starts_with("E   ")
                || t.starts_with(">   ")
        })
}

/// The statements of every doctest session (`>>> ` and `... ` lines, or IPython's `In [n]:`,
/// `...:` and `Out[n]:`), in order; an output ends at a blank line, a prompt or a fence. A one-line expression whose shown output is a Python
/// literal becomes an assertion of that output; a statement whose output is a traceback,
/// or anything else, is run as is.
///
/// The bug shown: a statement the issue marks wrong (a trailing `<---` or a comment such
/// as `# wrong`), or one a sentence that says something is wrong quotes whole ("ccode(sinc(x))
/// doesn't work"), when its shown output is a literal. Its assertion is that the answer
/// changes, and the session ends there (what follows is what it could print). When an
/// earlier statement of the session calls the same function and raises, the marked one
/// is expected to raise the same (the call that is handled next to the one that is not):
/// then the second value is the failure the test must give today, `DID NOT RAISE`.
/// Without a bug shown, the session's last statement, a check shown `True` or `False` that
/// the prose calls wrong (`wrong_in_prose`), is the bug: its assertion is that the answer
/// changes.
fn doctest_statements(text: &str, prose: &str) -> Option<(String, Option<super::Expected>)> {
    let lines: Vec<&str> = text.lines().collect();
    let is_prompt = |n: &str| n.starts_with(">>>") || n.starts_with("...") || ipython_prompt(n).is_some();
    // (code, the exception its shown output ends with, when that is a traceback)
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    let mut expected = None;
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        let stmt = t.strip_prefix(">>> ").or_else(|| (t == ">>>").then_some("")).or_else(|| ipython_prompt(t));
        let cont = t.strip_prefix("... ").or_else(|| (t == "...").then_some("")).or_else(|| ipython_continuation(t));
        i += 1;
        let Some(raw) = stmt.or(cont) else { continue };
        let (s, marked) = strip_wrong_marker(raw);
        // The output: the lines up to the next prompt or blank line (IPython may put a
        // blank line before its `Out[n]:`).
        let mut output: Vec<&str> = Vec::new();
        if stmt.is_some() && ipython_prompt(t).is_some() {
            let mut j = i;
            while lines.get(j).is_some_and(|l| l.trim().is_empty()) {
                j += 1;
            }
            if lines.get(j).is_some_and(|l| ipython_output(l.trim_start()).is_some()) {
                i = j;
            }
        }
        while i < lines.len() {
            let n = lines[i].trim_start();
            // In a traceback, a lone `...` is doctest's elision, not a prompt.
            let elision = n == "..." && output.first().is_some_and(|o| o.starts_with("Traceback"));
            // A fence closes the session's block: what follows it is prose.
            if !elision && (n.is_empty() || is_prompt(n)) || n.starts_with("```") || n.starts_with("~~~") {
                break;
            }
            output.push(ipython_output(n).unwrap_or(n));
            i += 1;
        }
        let next_is_cont = lines.get(i).is_some_and(|l| {
            let l = l.trim_start();
            l.starts_with("...") && ipython_prompt(l).is_none()
        });
        let raised = (output.first().is_some_and(|o| o.starts_with("Traceback")) && stmt.is_some() && !next_is_cont)
            .then(|| traceback_kind(&output));
        let last_prompt = !lines[i..].iter().any(|l| {
            let l = l.trim_start();
            l.starts_with(">>>") || ipython_prompt(l).is_some()
        });
        let one_expression = stmt.is_some() && !next_is_cont && is_expression(s);
        match (one_expression, output.as_slice()) {
            (true, [one]) if is_literal(one) && (marked || quoted_as_wrong(s, prose)) => {
                let shown = s.replace(['"', '\\'], "'");
                let sibling = callee(s).and_then(|f| {
                    out.iter().rev().find_map(|(c, r)| r.as_ref().filter(|_| callee(c) == Some(f)).cloned())
                });
                match sibling {
                    Some(kind) => {
                        let kind = exception_to_expect(&kind);
                        out.push((
                            format!("# The issue marks `{shown}` (shown giving {one}) as not handled like the call above\nwith pytest.raises({kind}):\n    {s}"),
                            None,
                        ));
                        expected =
                            Some(super::Expected { kind: "Failed".into(), message: Some("DID NOT RAISE".into()) });
                    }
                    None => {
                        // The message is a double-quoted string: the literal's own quotes
                        // and backslashes are escaped, so it reads as the issue shows it.
                        let said = py_escape(one);
                        out.push((format!("assert ({s}) != {one}, \"the issue shows `{shown}` giving {said}\""), None))
                    }
                }
                // What follows the bug shown is another example or what it could print.
                break;
            }
            (true, [one]) if last_prompt && matches!(*one, "True" | "False") && wrong_in_prose(s, prose) => out.push((
                format!("assert ({s}) != {one}, \"the issue shows `{}` giving {one}\"", s.replace(['"', '\\'], "'")),
                None,
            )),
            (true, [one]) if is_literal(one) => out.push((format!("assert ({s}) == {one}"), None)),
            _ => out.push((s.to_string(), raised)),
        }
    }
    // A traceback shown before the session's last statement is context (the call that
    // rightly raises, next to the one that does not): the test expects it, so it does
    // not stop there. The last statement's traceback is the reported failure: run as is.
    let last = out.iter().rposition(|(c, _)| !c.trim().is_empty());
    let mut code = String::new();
    let mut uses_raises = expected.is_some();
    for (k, (c, raised)) in out.iter().enumerate() {
        match raised {
            Some(kind) if Some(k) != last && !c.trim_end().ends_with(':') => {
                code.push_str(&format!("with pytest.raises({}):\n    {c}\n", exception_to_expect(kind)));
                uses_raises = true;
            }
            _ => {
                code.push_str(c);
                code.push('\n');
            }
        }
    }
    if uses_raises {
        code = format!("import pytest\n{code}");
    }
    (!code.trim().is_empty()).then_some((code, expected))
}

/// Text made safe inside a double-quoted Python string: backslashes and double quotes
/// escaped.
pub(crate) fn py_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A double-quoted Python string literal holding `s`.
pub(crate) fn py_str(s: &str) -> String {
    format!("\"{}\"", py_escape(s))
}

/// Text from the issue made safe inside a `"""` docstring: backslashes doubled (`\p`, `\N`
/// or `\x` in a title would be an invalid escape, the last two a syntax error) and a
/// triple quote turned to single quotes.
pub(crate) fn docstring_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace("\"\"\"", "'''")
}

/// The class a test expects for an exception a session shows: a builtin by its name,
/// anything else (the project's own, which the test may not import) as `Exception`.
fn exception_to_expect(kind: &str) -> &str {
    if kind.chars().all(|ch| ch.is_alphanumeric() || ch == '_')
        && (kind.ends_with("Error") || kind.ends_with("Exception"))
        && is_builtin_exception(kind)
    {
        kind
    } else {
        "Exception"
    }
}

/// The exception a traceback ends with: its last line that starts with a (dotted) class
/// name and a colon, or is one (`NotImplementedError:` then the message on lines of its
/// own); else what its last line has before a colon.
fn traceback_kind(output: &[&str]) -> String {
    let named = output.iter().rev().find_map(|l| {
        let head = l.split(':').next().unwrap_or("").trim();
        (!head.is_empty() && head.split('.').all(super::body::is_ident)).then(|| head.to_string())
    });
    named.unwrap_or_else(|| {
        output.last().map(|l| l.split(':').next().unwrap_or("").trim().to_string()).unwrap_or_default()
    })
}

/// IPython's prompt: the statement after `In [3]: `.
fn ipython_prompt(t: &str) -> Option<&str> {
    let rest = t.strip_prefix("In [")?;
    let close = rest.find("]:")?;
    if close == 0 || !rest[..close].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let s = &rest[close + 2..];
    Some(s.strip_prefix(' ').unwrap_or(s))
}

/// IPython's continuation: the line after `   ...: `.
fn ipython_continuation(t: &str) -> Option<&str> {
    let dots = t.len() - t.trim_start_matches('.').len();
    let rest = t[dots..].strip_prefix(':').filter(|_| dots >= 3)?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

/// IPython's shown value: what follows `Out[3]: `.
fn ipython_output(t: &str) -> Option<&str> {
    let rest = t.strip_prefix("Out[")?;
    let close = rest.find("]:")?;
    rest[..close].bytes().all(|b| b.is_ascii_digit()).then(|| rest[close + 2..].trim_start())
}

/// A statement without the remark after it that marks it wrong: an arrow (`<---`, `<==`)
/// with words or nothing after it, or a comment with a word that says something is wrong
/// (`# wrong`, `# should be 2`). Whether there was one. Quotes are skipped: `'<--'` and
/// `'#'` in a string are code; `a <--1` (a < --1) is code too.
fn strip_wrong_marker(s: &str) -> (&str, bool) {
    let b = s.as_bytes();
    let mut quote: Option<u8> = None;
    for (k, &c) in b.iter().enumerate() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'#' => {
                    let low = s[k..].to_lowercase();
                    let wrong = low.contains("<-") || WRONG_CUES.iter().any(|w| low.contains(w));
                    return if wrong { (s[..k].trim_end(), true) } else { (s, false) };
                }
                b'<' if matches!(b.get(k + 1..k + 3), Some(b"--") | Some(b"==")) => {
                    let rest = s[k..].trim_start_matches(['<', '-', '=']).trim();
                    if rest.is_empty() || rest.split_whitespace().count() >= 2 {
                        return (s[..k].trim_end(), true);
                    }
                }
                _ => {}
            },
        }
    }
    (s, false)
}

/// Does a sentence that says something is wrong quote the statement whole (spaces
/// aside)? "ccode(sinc(x)) doesn't work" quotes `ccode(sinc(x))`.
fn quoted_as_wrong(stmt: &str, prose: &str) -> bool {
    let squeeze = |t: &str| t.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let s = squeeze(stmt);
    // Short ones (`x`, `f()`) are quoted by chance.
    s.len() >= 6
        && super::body::sentences(prose).iter().any(|sentence| {
            let low = sentence.to_lowercase();
            WRONG_CUES.iter().any(|c| low.contains(c)) && squeeze(sentence).contains(&s)
        })
}

/// The function a one-line call calls: `solve(...)` gives `solve`, `a.b(...)` gives `a.b`.
fn callee(stmt: &str) -> Option<&str> {
    let t = stmt.trim();
    let open = t.find('(')?;
    let f = t[..open].trim();
    (!f.is_empty() && f.split('.').all(super::body::is_ident)).then_some(f)
}

/// Words of a sentence that says something is wrong.
const WRONG_CUES: &[&str] = &[
    "incorrect",
    "wrong",
    "bug",
    "instead",
    "converted to",
    "becomes",
    "turns into",
    "should",
    "unexpected",
    "broken",
    "doesn't work",
    "does not work",
    "don't work",
    "not working",
    "not handled",
];

/// Does a sentence of the prose (the title too) that names one of the check's names say
/// it is wrong? `decoded.extra_tags is None` and "incorrectly serializes extra_tags".
fn wrong_in_prose(check: &str, prose: &str) -> bool {
    let names: Vec<&str> = check
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.len() >= 3 && !matches!(*w, "None" | "True" | "False" | "not" | "and"))
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
        .collect();
    super::body::sentences(prose).iter().any(|sentence| {
        let low = sentence.to_lowercase();
        WRONG_CUES.iter().any(|c| low.contains(c))
            && sentence.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| names.contains(&w))
    })
}

fn is_builtin_exception(k: &str) -> bool {
    matches!(
        k,
        "ValueError"
            | "TypeError"
            | "KeyError"
            | "IndexError"
            | "AttributeError"
            | "NotImplementedError"
            | "ZeroDivisionError"
            | "RuntimeError"
            | "AssertionError"
            | "LookupError"
            | "OverflowError"
            | "RecursionError"
            | "NameError"
            | "OSError"
            | "FileNotFoundError"
            | "StopIteration"
            | "Exception"
    )
}

/// A statement that is an expression: no keyword opens it, no top-level `=` assigns.
fn is_expression(s: &str) -> bool {
    const OPENERS: &[&str] = &[
        "import ", "from ", "def ", "class ", "for ", "while ", "if ", "with ", "try:", "return", "raise ", "assert ",
        "del ", "pass", "print(", "async ", "await ", "global ", "lambda",
    ];
    if s.trim().is_empty() || OPENERS.iter().any(|o| s.starts_with(o)) || s.trim_end().ends_with(':') {
        return false;
    }
    let b = s.as_bytes();
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    for (k, &c) in b.iter().enumerate() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                b'=' if depth == 0 => {
                    let prev = if k > 0 { b[k - 1] } else { b' ' };
                    let next = b.get(k + 1).copied().unwrap_or(b' ');
                    if next != b'=' && !matches!(prev, b'=' | b'!' | b'<' | b'>') {
                        return false;
                    }
                }
                _ => {}
            },
        }
    }
    true
}

/// A shown output that is a Python literal: a number, a quoted string, True, False,
/// None, or a bracketed collection of such.
fn is_literal(s: &str) -> bool {
    let s = s.trim();
    if matches!(s, "True" | "False" | "None") || s.parse::<f64>().is_ok() {
        return true;
    }
    let quoted = |q: char| s.len() >= 2 && s.starts_with(q) && s.ends_with(q);
    if quoted('\'') || quoted('"') {
        return true;
    }
    let bracketed = (s.starts_with('[') && s.ends_with(']'))
        || (s.starts_with('(') && s.ends_with(')'))
        || (s.starts_with('{') && s.ends_with('}'));
    bracketed && !s.contains('<')
}

/// The first runnable snippet in the issue for one of the repository's languages.
pub fn find_snippet(facts: &IssueFacts, raw: &str, repo_langs: &[Lang]) -> Option<Snippet> {
    let py = repo_langs.contains(&Lang::Python);
    let js = repo_langs.contains(&Lang::TypeScript);
    let java = repo_langs.contains(&Lang::Java);
    if py {
        if let Some((code, expected)) = doctest_statements(raw, &facts.prose) {
            return Some(Snippet { lang: Lang::Python, dialect: "python", code, from_doctest: true, expected });
        }
    }
    for (tag, body) in &facts.code_blocks {
        let tag = tag.to_lowercase();
        let tag = tag.split_whitespace().next().unwrap_or("");
        if body.trim().is_empty() || is_traceback_text(body) {
            continue;
        }
        match tag {
            "python" | "py" | "python3" | "pycon" if py => {
                return Some(Snippet {
                    lang: Lang::Python,
                    dialect: "python",
                    code: body.clone(),
                    from_doctest: false,
                    expected: None,
                })
            }
            "js" | "javascript" | "mjs" | "node" if js => {
                return Some(Snippet {
                    lang: Lang::TypeScript,
                    dialect: "js",
                    code: body.clone(),
                    from_doctest: false,
                    expected: None,
                })
            }
            "java" if java => {
                return Some(Snippet {
                    lang: Lang::Java,
                    dialect: "java",
                    code: body.clone(),
                    from_doctest: false,
                    expected: None,
                })
            }
            "" if py && looks_like_python(body) => {
                return Some(Snippet {
                    lang: Lang::Python,
                    dialect: "python",
                    code: body.clone(),
                    from_doctest: false,
                    expected: None,
                })
            }
            _ => {}
        }
    }
    // Code pasted without fences: indented or plain lines that parse as Python.
    if py {
        if let Some(code) = super::body::unfenced_python(&facts.prose) {
            return Some(Snippet { lang: Lang::Python, dialect: "python", code, from_doctest: false, expected: None });
        }
    }
    None
}

/// An untagged block is Python when it parses as Python and imports, defines, asserts
/// or calls something (`x = symbols('x')` then `f(x)`); output and shell sessions do not parse.
fn looks_like_python(body: &str) -> bool {
    let statement_like = body.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with("import ")
            || t.starts_with("from ") && t.contains(" import ")
            || t.starts_with("def ")
            || t.starts_with("assert ")
            || t.starts_with("class ")
    });
    let calls = body.lines().any(|l| !l.trim_start().starts_with('$') && l.contains('(') && l.contains(')'));
    statement_like || calls && super::body::parses(body)
}

/// The languages an issue's code is written in, by its fences and stack frames.
pub fn issue_langs(facts: &IssueFacts) -> Vec<Lang> {
    let mut out = Vec::new();
    for (tag, _) in &facts.code_blocks {
        let l = match tag.to_lowercase().split_whitespace().next().unwrap_or("") {
            "python" | "py" | "python3" | "pycon" => Some(Lang::Python),
            "js" | "javascript" | "ts" | "typescript" | "tsx" | "jsx" | "mjs" => Some(Lang::TypeScript),
            "java" => Some(Lang::Java),
            _ => None,
        };
        if let Some(l) = l {
            if !out.contains(&l) {
                out.push(l);
            }
        }
    }
    for f in &facts.frames {
        let l = Lang::of_path(Path::new(&f.path));
        if let Some(l) = l {
            if !out.contains(&l) {
                out.push(l);
            }
        }
    }
    out
}

fn slug(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
        if out.len() >= max {
            break;
        }
    }
    out.trim_end_matches('_').to_string()
}

/// A generated test: where it goes and what it says.
#[derive(Debug, Clone)]
pub struct TestFile {
    pub path: String,
    pub code: String,
    pub framework: &'static str,
    /// The test in the file to run (node id part or label part), so a run collects
    /// nothing else.
    pub test: Option<String>,
}

/// Where the repository keeps its tests: the first of these directories that exists.
fn test_dir(root: &Path, candidates: &[&str]) -> Option<String> {
    candidates.iter().find(|d| root.join(d).is_dir()).map(|d| d.to_string())
}

/// Build the test for a snippet. `stem` names the file (from the issue's file name),
/// `title` the test.
pub fn build(
    root: &Path,
    conv: &Conventions,
    snippet: &Snippet,
    stem: &str,
    title: &str,
    expected: Option<(&str, Option<&str>)>,
) -> TestFile {
    let name = {
        let s = slug(title, 48);
        if s.is_empty() {
            "issue".to_string()
        } else {
            s
        }
    };
    let what = match expected {
        Some((k, Some(m))) => format!("{k}: {m}"),
        Some((k, None)) => k.to_string(),
        None => "the assertion the issue gives".to_string(),
    };
    let stem = slug(stem, 40);
    match snippet.dialect {
        "python" => {
            // Only the leading imports move up: an import after set-up code stays after it.
            let (imports, body) = super::body::leading_imports(&snippet.code);
            // Where and in what form: the conventions of the suspect code's tests.
            let form = PyForm::of(conv, &stem, &snippet.code);
            let path = python_test_path(root, conv, &stem);
            let mut code = format!(
                "\"\"\"Reproduces: {}\n\nBuilt by reproagent from the code in the issue. Fails today with {};\npasses once the bug is fixed.\n\"\"\"\n\n",
                docstring_text(title),
                docstring_text(&what)
            );
            code.push_str(&form.preamble());
            for i in &imports {
                code.push_str(i);
                code.push('\n');
            }
            code.push_str(&star_import_cleanup(&imports.iter().map(String::as_str).collect::<Vec<_>>()));
            if !imports.is_empty() || !form.preamble().is_empty() {
                code.push_str("\n\n");
            }
            if super::body::is_test_module(&snippet.code) {
                // The issue's code is a test module already: written as it is, run whole.
                for l in &body {
                    code.push_str(l);
                    code.push('\n');
                }
                return TestFile { path, code, framework: form.framework_name(), test: None };
            }
            code.push_str(&form.open(&name));
            let indent = form.indent();
            let mut any = false;
            let body: Vec<&str> = form
                .filter_body(body.iter().map(String::as_str).collect())
                .into_iter()
                .skip_while(|l| l.trim().is_empty())
                .collect();
            for l in body {
                if l.trim().is_empty() {
                    code.push('\n');
                } else {
                    any = true;
                    code.push_str(indent);
                    code.push_str(l);
                    code.push('\n');
                }
            }
            if !any {
                code.push_str(indent);
                code.push_str("pass\n");
            }
            TestFile { path, code, framework: form.framework_name(), test: Some(form.test_id(&name)) }
        }
        "js" => {
            // node:test; the snippet's imports move to the top, relative ones re-rooted
            // from the repository root to the test directory.
            let dir = js_test_dir(root, conv).or_else(|| test_dir(root, &["test", "tests", "__tests__"]));
            let up = dir.as_deref().map(|d| "../".repeat(d.split('/').count())).unwrap_or_else(|| "./".into());
            let file = format!("reproduce-{}.test.mjs", stem.replace('_', "-"));
            let path = dir.map(|d| format!("{d}/{file}")).unwrap_or(file);
            let (imports, body): (Vec<&str>, Vec<&str>) =
                snippet.code.lines().partition(|l| l.trim_start().starts_with("import "));
            let mut code = format!("// Reproduces: {title}\n// Built by reproagent from the code in the issue. Fails today with {what}.\nimport {{ test }} from 'node:test';\n");
            for i in imports {
                code.push_str(&i.replace("'./", &format!("'{up}")).replace("\"./", &format!("\"{up}")));
                code.push('\n');
            }
            code.push_str(&format!("\ntest('{}', async () => {{\n", title.replace('\\', "\\\\").replace('\'', "\\'")));
            for l in body.into_iter().skip_while(|l| l.trim().is_empty()) {
                code.push_str("  ");
                code.push_str(l);
                code.push('\n');
            }
            code.push_str("});\n");
            TestFile { path, code, framework: "node-test", test: None }
        }
        _ => {
            // JUnit 4: the statements in one test method; the snippet's imports, plus
            // every package of the repository on demand.
            let class = format!("Reproduce{}Test", camel(&stem));
            let dir = if root.join("src/test/java").is_dir() || root.join("src/main/java").is_dir() {
                "src/test/java".to_string()
            } else {
                "test".to_string()
            };
            let path = format!("{dir}/{class}.java");
            let (imports, body): (Vec<&str>, Vec<&str>) =
                snippet.code.lines().partition(|l| l.trim_start().starts_with("import "));
            let mut code = format!(
                "// Reproduces: {title}\n// Built by reproagent from the code in the issue. Fails today with {what}.\n"
            );
            for p in java_packages(root) {
                code.push_str(&format!("import {p}.*;\n"));
            }
            // Snippets use the collections without importing them, as in a `main` a
            // reader would complete.
            if !imports.iter().any(|i| i.contains("java.util.*")) {
                code.push_str("import java.util.*;\n");
            }
            for i in imports {
                code.push_str(i.trim());
                code.push('\n');
            }
            code.push_str(&format!("\npublic class {class} {{\n    @org.junit.Test\n    public void reproducesTheIssue() throws Exception {{\n"));
            for l in body.into_iter().skip_while(|l| l.trim().is_empty()) {
                code.push_str("        ");
                code.push_str(l);
                code.push('\n');
            }
            code.push_str("    }\n}\n");
            TestFile { path, code, framework: "junit4", test: None }
        }
    }
}

fn camel(s: &str) -> String {
    s.split('_')
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

/// The packages declared by the repository's Java files.
fn java_packages(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let (files, _) = crate::index::walk(root, false);
    for f in files.iter().filter(|f| f.lang == Lang::Java) {
        if let Some(text) = crate::confine::read_text(root, &f.rel) {
            if let Some(line) = text.lines().find(|l| l.trim_start().starts_with("package ")) {
                let p = line.trim().trim_start_matches("package").trim().trim_end_matches(';').trim().to_string();
                if !p.is_empty() && !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctest_sessions_become_statements_and_assertions() {
        let text = ">>> from d import p\n>>> p('1h')\n3600\n>>> x = p('2h')\n>>> for y in [1]:\n...     p(y)\n>>> p('bad')\nTraceback (most recent call last):\nValueError: bad\n>>> p(unit='s') == 1\nTrue\n";
        assert_eq!(
            doctest_statements(text, "").unwrap().0,
            "import pytest\nfrom d import p\nassert (p('1h')) == 3600\nx = p('2h')\nfor y in [1]:\n    p(y)\nwith pytest.raises(ValueError):\n    p('bad')\nassert (p(unit='s') == 1) == True\n"
        );
    }

    #[test]
    fn the_last_check_the_prose_calls_wrong_is_asserted_to_change() {
        // The shape of django__django-15347: the last check shows the bug, the one before holds.
        let session = ">>> original = Message(10, \"Here\", extra_tags=\"\")\n>>> decoded = MessageDecoder().decode(MessageEncoder().encode(original))\n>>> original.extra_tags == \"\"\nTrue\n>>> decoded.extra_tags is None\nTrue\n";
        let prose = "Messages framework incorrectly serializes/deserializes extra_tags when it's an empty string\nWhen a message is serialised and then deserialised, extra_tags==\"\" is converted to extra_tags==None.\n";
        let code = doctest_statements(session, prose).unwrap().0;
        assert!(code.contains("assert (original.extra_tags == \"\") == True\n"), "{code}");
        assert!(code.ends_with("assert (decoded.extra_tags is None) != True, \"the issue shows `decoded.extra_tags is None` giving True\"\n"), "{code}");
        // Without prose that calls it wrong, the shown answer is what it does: kept.
        let code = doctest_statements(session, "How to round-trip messages\nThis works for me:\n").unwrap().0;
        assert!(code.ends_with("assert (decoded.extra_tags is None) == True\n"), "{code}");
        // Only the last statement is the bug shown.
        let code = doctest_statements(">>> f(1) == 2\nFalse\n>>> g()\n", "f is wrong").unwrap().0;
        assert!(code.starts_with("assert (f(1) == 2) == False\n"), "{code}");
    }

    #[test]
    fn a_traceback_before_the_last_statement_is_expected_not_the_failure() {
        let text = ">>> solve((x - 1,), x, y)\nTraceback (most recent call last):\n...\nNotImplementedError:\nonly finite\n>>> solve((y - 1,), x, y)\n>>> boom()\nTraceback (most recent call last):\nValueError: no\n";
        let (code, expected) = doctest_statements(text, "").unwrap();
        // The class is the traceback's, though its message is on a line of its own.
        assert_eq!(
            code,
            "import pytest\nwith pytest.raises(NotImplementedError):\n    solve((x - 1,), x, y)\nsolve((y - 1,), x, y)\nboom()\n"
        );
        assert_eq!(expected, None);
    }

    #[test]
    fn a_call_marked_wrong_next_to_one_that_raises_must_raise_too() {
        // sympy__sympy-22005: the handled call raises, the one marked `<---` returns.
        let text = "```python\n>>> solve_poly_system((x - 1,), x, y)\nTraceback (most recent call last):\n...\nNotImplementedError:\nonly zero-dimensional systems supported (finite number of solutions)\n>>> solve_poly_system((y - 1,), x, y)  <--- this is not handled correctly\n[(1,)]\n```\n";
        let (code, expected) = doctest_statements(text, "detection of infinite solution request").unwrap();
        assert_eq!(
            code,
            "import pytest\nwith pytest.raises(NotImplementedError):\n    solve_poly_system((x - 1,), x, y)\n# The issue marks `solve_poly_system((y - 1,), x, y)` (shown giving [(1,)]) as not handled like the call above\nwith pytest.raises(NotImplementedError):\n    solve_poly_system((y - 1,), x, y)\n"
        );
        assert!(super::super::body::parses(&code), "{code}");
        assert_eq!(
            expected,
            Some(super::super::Expected { kind: "Failed".into(), message: Some("DID NOT RAISE".into()) })
        );
        // Marked by a comment, with no call beside it that raises: the answer must change,
        // and the session ends at it.
        let (code, expected) = doctest_statements(">>> f(2)  # wrong, should be 4\n5\n>>> g()\n1\n", "").unwrap();
        assert_eq!(code, "assert (f(2)) != 5, \"the issue shows `f(2)` giving 5\"\n");
        assert_eq!(expected, None);
        // Arrows and hashes inside code are code.
        let (code, _) = doctest_statements(">>> a <--1\nFalse\n>>> f('<-- not this one', '# wrong')\n3\n", "").unwrap();
        assert_eq!(code, "assert (a <--1) == False\nassert (f('<-- not this one', '# wrong')) == 3\n");
    }

    #[test]
    fn ipython_sessions_are_sessions_and_a_title_can_quote_the_bug() {
        // sympy__sympy-11400: the title quotes the call and says it does not work; the
        // session after it is what it could print instead.
        let raw = "ccode(sinc(x)) doesn't work\n```\nIn [30]: ccode(sinc(x))\nOut[30]: '// Not supported in C:\\n// sinc\\nsinc(x)'\n```\n\nI don't think `math.h` has `sinc`, but it could print\n\n```\nIn [38]: ccode(Piecewise((sin(theta)/theta, Ne(theta, 0)), (1, True)))\nOut[38]: '((Ne(theta, 0)) ? (\\n   sin(theta)/theta\\n)\\n: (\\n   1\\n))'\n```\n";
        let prose = "ccode(sinc(x)) doesn't work\nI don't think `math.h` has `sinc`, but it could print\n";
        let (code, expected) = doctest_statements(raw, prose).unwrap();
        assert_eq!(
            code,
            "assert (ccode(sinc(x))) != '// Not supported in C:\\n// sinc\\nsinc(x)', \"the issue shows `ccode(sinc(x))` giving '// Not supported in C:\\\\n// sinc\\\\nsinc(x)'\"\n"
        );
        assert_eq!(expected, None);
        // A literal with double quotes in it is escaped in the message.
        let (code, _) = doctest_statements(">>> name(x)  # wrong\n\"a\\\\\"\n", "").unwrap();
        assert_eq!(code, "assert (name(x)) != \"a\\\\\", \"the issue shows `name(x)` giving \\\"a\\\\\\\\\\\"\"\n");
        assert!(super::super::body::parses(&code), "{code}");
        // Without a sentence that calls it wrong, a shown value is what it does; a blank
        // line may stand between `In` and `Out`, and `...:` continues a statement.
        let (code, _) =
            doctest_statements("In [1]: f(2)\n\nOut[1]: 4\n\nIn [2]: for i in [1]:\n   ...:     g(i)\n   ...:\n", "")
                .unwrap();
        assert_eq!(code, "assert (f(2)) == 4\nfor i in [1]:\n    g(i)\n\n");
    }

    #[test]
    fn python_tests_hoist_imports() {
        let s = Snippet {
            lang: Lang::Python,
            dialect: "python",
            code: "from a import f\n\nassert f() == 1\n".into(),
            from_doctest: false,
            expected: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let conv = super::super::conventions::conventions(dir.path(), &[]);
        let t = build(dir.path(), &conv, &s, "1234", "f returns 2", Some(("AssertionError", None)));
        assert_eq!(t.path, "test_reproduce_1234.py");
        assert!(t.code.contains("from a import f\n\n\ndef test_f_returns_2():\n    assert f() == 1\n"), "{}", t.code);
    }
}
