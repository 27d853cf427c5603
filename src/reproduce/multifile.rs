//! Examples spread over several files (`test_a.py`, `test_b.py`, `conftest.py`,
//! `setup.cfg`): the issue's blocks split into the files they name, and a test that
//! writes them into a fresh directory, runs them the way the issue does and checks the
//! result.
//!
//! Where the project tests itself with `pytester` (pytest's own repository, or a suite
//! whose conftest or tests use the `pytester`/`testdir` fixture) the test uses it:
//! `makepyfile`/`makeconftest`/`makeini`/`makefile`, then `runpytest` with the issue's
//! options. Elsewhere it writes the files into a temporary directory and runs
//! `sys.executable -m pytest ...` (or `python main.py`) there in a subprocess.
//!
//! The same holds for a single file the project's own command runs (`pylint a.py`, a
//! `.pylintrc` for `pylint`), and for one unnamed test module whose two runs the issue
//! shows, one output as right and one as wrong (`Contrast`).
//!
//! What the test asserts (the rule ARCHITECTURE.md states): the error the issue reports
//! must not appear in the run's output, and the outcome the prose expects ("expected 2
//! passed", "should be skipped") must hold, read from pytest's summary line. The test is
//! a reproduction only when today's failure is the issue's own: its reported error
//! appears, or pytest's summary gives the counts the issue shows, or the line the issue
//! shows as the wrong output appears. When the issue shows
//! neither an error nor the outcome it gets, no assertion can be checked and the
//! example is refused.

use std::path::Path;

use super::synth::TestFile;
use super::Expected;
use crate::localize::IssueFacts;

/// One file of the example: its path (relative) and its text.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    pub name: String,
    pub text: String,
}

/// How the issue runs the example.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `pytest ARGS` (also `py.test`, `python -m pytest`).
    Pytest(Vec<String>),
    /// `python FILE ARGS`, FILE one of the example's files.
    Python(String, Vec<String>),
    /// The project's own command (`pylint ARGS`, `python -m pylint ARGS`): a package of
    /// the repository with a `__main__.py`, run as `python -m PACKAGE ARGS`.
    Module(String, Vec<String>),
}

/// A condition on one count of pytest's summary line.
#[derive(Debug, Clone, PartialEq)]
pub struct Cond {
    pub key: &'static str,
    /// `==` or `>=`.
    pub op: &'static str,
    pub n: u32,
}

/// The keys of pytest's summary line, in the order the test prints them.
const KEYS: [&str; 7] = ["failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "errors"];

/// Extensions of the files an example names.
const EXTS: [&str; 8] = ["py", "cfg", "ini", "toml", "txt", "json", "yaml", "yml"];

/// A fenced block with the prose line before it.
struct Block {
    before: String,
    tag: String,
    body: String,
}

fn blocks(raw: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut last = String::new();
    let mut open: Option<Block> = None;
    for line in raw.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            match open.take() {
                Some(b) => {
                    out.push(b);
                    last.clear();
                }
                None => {
                    open = Some(Block {
                        before: last.clone(),
                        tag: t.trim_start_matches(['`', '~']).trim().to_lowercase(),
                        body: String::new(),
                    })
                }
            }
            continue;
        }
        match &mut open {
            Some(b) => {
                b.body.push_str(line);
                b.body.push('\n');
            }
            None if !t.is_empty() => last = t.to_string(),
            None => {}
        }
    }
    if let Some(b) = open {
        out.push(b);
    }
    out
}

/// A token that names a file of an example: `test_a.py`, `pkg/conftest.py`, `setup.cfg`.
fn file_name(w: &str) -> Option<String> {
    let w = w.trim_matches(|c: char| matches!(c, '`' | '*' | '"' | '\'' | ':' | ',' | '(' | ')' | '[' | ']' | ';'));
    let w = w.trim_end_matches('.');
    let w = w.strip_prefix("./").unwrap_or(w);
    // A tool's run-control file: `.pylintrc`, `.coveragerc`.
    if let Some(rc) = w.strip_prefix('.').filter(|r| r.len() > 2 && r.ends_with("rc")) {
        if rc.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_') {
            return Some(w.to_string());
        }
    }
    let (stem, ext) = w.rsplit_once('.')?;
    let ok_part = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
    (EXTS.contains(&ext)
        && !w.starts_with('/')
        && !w.contains("..")
        && !w.contains("::")
        && stem.split('/').all(ok_part)
        && stem.split('/').count() <= 4)
        .then(|| w.to_string())
}

/// The one file name a line gives (`# content of test_a.py`, "In `conftest.py`:").
fn single_name(line: &str) -> Option<String> {
    let mut names: Vec<String> = Vec::new();
    for w in line.split_whitespace() {
        if let Some(n) = file_name(w) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    (names.len() == 1).then(|| names.remove(0))
}

/// Output, not a file: a traceback, a shell session, pytest's report.
fn is_output(body: &str) -> bool {
    body.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with("Traceback (most recent call last)")
            || t.starts_with("$ ")
            || t.starts_with("=====")
            || t.starts_with("E   ")
            || t.starts_with("collected ")
            || t.starts_with("platform ")
            || t.starts_with("INTERNALERROR>")
            || summary_counts(t).is_some()
    })
}

/// The counts of a pytest summary line (`==== 1 failed, 2 passed in 0.12s ====`).
pub fn summary_counts(line: &str) -> Option<Vec<(&'static str, u32)>> {
    let l = line.trim().trim_matches('=').trim();
    let timed = l.split(" in ").last().is_some_and(|t| {
        let t = t.trim().trim_end_matches(|c: char| c.is_alphabetic() || c == ')' || c == '(' || c == ' ');
        !t.is_empty() && t.split(' ').next().is_some_and(|n| n.parse::<f64>().is_ok())
    });
    if !timed || !l.contains(" in ") {
        return None;
    }
    let head = l.rsplit_once(" in ").map(|(h, _)| h).unwrap_or(l);
    let mut out: Vec<(&'static str, u32)> = Vec::new();
    for part in head.split(',') {
        let mut it = part.split_whitespace();
        let (Some(n), Some(k)) = (it.next(), it.next()) else { continue };
        let Ok(n) = n.parse::<u32>() else { continue };
        let k = if k.starts_with("error") { "errors" } else { k };
        if let Some(key) = KEYS.iter().find(|x| **x == k) {
            out.push((key, n));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The example's files, when the issue names two or more (at least one Python).
pub fn files(raw: &str) -> Vec<File> {
    let out = named_files(raw);
    if out.len() >= 2 && out.iter().any(|f| f.name.ends_with(".py")) {
        out
    } else {
        Vec::new()
    }
}

/// Every file the issue names and shows, in order, the first block of a name kept.
fn named_files(raw: &str) -> Vec<File> {
    let mut out: Vec<File> = Vec::new();
    for b in blocks(raw) {
        if b.body.trim().is_empty() || is_output(&b.body) {
            continue;
        }
        let first = b.body.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        let in_block = ["# content of ", "# ", "#", "// "]
            .iter()
            .find_map(|p| first.strip_prefix(p))
            .and_then(|rest| file_name(rest.trim()).filter(|_| rest.split_whitespace().count() == 1));
        let Some(name) = in_block.or_else(|| single_name(&b.before)) else { continue };
        if !b.tag.is_empty() && name.ends_with(".py") && !matches!(b.tag.as_str(), "python" | "py" | "python3") {
            continue;
        }
        if !out.iter().any(|f| f.name == name) {
            out.push(File { name, text: b.body });
        }
    }
    out
}

/// Split a shell line into words (quotes kept together, not interpreted further).
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                any = true
            }
            None if c.is_whitespace() => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            None => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

/// The command a line runs, when it runs the example. `clis`: the project's own commands
/// (see [`project_commands`]).
fn command_of(line: &str, files: &[File], clis: &[String]) -> Option<Command> {
    let t = line.trim().trim_start_matches('$').trim_start_matches('>').trim();
    // Up to a pipe, a redirection or a second command.
    let t = t.split(['|', '>', ';', '&']).next().unwrap_or("").trim();
    let w = words(t);
    let is_python = |s: &str| {
        let s = s.rsplit('/').next().unwrap_or(s);
        s == "python" || s.strip_prefix("python").is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    let args = |from: usize| w[from..].to_vec();
    // `pylint 2.14.4` is the tool telling its version, not a run.
    let tool = |name: &str, from: usize| {
        let version = w.get(from).is_some_and(|a| {
            a.starts_with(|c: char| c.is_ascii_digit()) && a.chars().all(|c| c.is_ascii_digit() || c == '.')
        });
        (clis.iter().any(|c| c == name) && !version).then(|| Command::Module(name.to_string(), args(from)))
    };
    match w.first().map(String::as_str) {
        Some("pytest" | "py.test") => Some(Command::Pytest(args(1))),
        Some(p) if is_python(p) => match (w.get(1).map(String::as_str), w.get(2).map(String::as_str)) {
            (Some("-m"), Some("pytest")) => Some(Command::Pytest(args(3))),
            (Some("-m"), Some(m)) => tool(m, 3),
            (Some(f), _) if files.iter().any(|x| x.name == f && f.ends_with(".py")) => {
                Some(Command::Python(f.to_string(), args(2)))
            }
            _ => None,
        },
        Some(name) => tool(name, 1),
        None => None,
    }
}

/// The project's own commands: its packages (at the root or under `src/`) that run as
/// `python -m NAME`, having a `__main__.py`.
pub fn project_commands(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for base in [root.to_path_buf(), root.join("src")] {
        let Ok(entries) = std::fs::read_dir(&base) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if is_ident(&name) && e.path().join("__main__.py").is_file() && e.path().join("__init__.py").is_file() {
                out.push(name);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// How the issue runs its example: the first command line (in a block or a code span)
/// that runs pytest, one of the files or the project's own command; else pytest, when a
/// file is a test module or a conftest, or `python` on the one `__main__` script.
pub fn command(raw: &str, files: &[File], clis: &[String]) -> Option<Command> {
    for b in blocks(raw) {
        if files.iter().any(|f| f.text == b.body) {
            continue;
        }
        if let Some(c) = b.body.lines().find_map(|l| command_of(l, files, clis)) {
            return Some(c);
        }
    }
    let prose = prose_of(raw);
    let mut rest = prose.as_str();
    while let Some(i) = rest.find('`') {
        let after = &rest[i + 1..];
        let Some(j) = after.find('`') else { break };
        if let Some(c) = command_of(&after[..j], files, clis) {
            return Some(c);
        }
        rest = &after[j + 1..];
    }
    let base = |n: &str| n.rsplit('/').next().unwrap_or(n).to_string();
    if files.iter().any(|f| {
        let b = base(&f.name);
        b == "conftest.py" || b.starts_with("test_") && b.ends_with(".py") || b.ends_with("_test.py")
    }) {
        return Some(Command::Pytest(Vec::new()));
    }
    let mains: Vec<&File> = files
        .iter()
        .filter(|f| f.name.ends_with(".py") && (f.text.contains("__main__") || base(&f.name) == "main.py"))
        .collect();
    match mains.as_slice() {
        [m] => Some(Command::Python(m.name.clone(), Vec::new())),
        _ => None,
    }
}

fn number(w: &str) -> Option<u32> {
    match w {
        "one" | "a" | "single" => Some(1),
        "two" | "both" => Some(2),
        "three" => Some(3),
        "four" => Some(4),
        "five" => Some(5),
        _ => w.parse().ok(),
    }
}

/// The part of a sentence that says what is expected: from the cue to a "but" or "instead".
fn expectation_parts(prose: &str) -> Vec<String> {
    let prose = prose.to_lowercase().replace(". ", "\n");
    let mut out = Vec::new();
    for s in prose.split(['\n', '!', '?', ';']) {
        const CUES: [&str; 6] = ["expect", "should", "would like", "ought to", "supposed to", "want"];
        let Some(at) = CUES.iter().filter_map(|c| s.find(c)).min() else { continue };
        let part = &s[at..];
        let end = [" but ", " instead", " however", " whereas", " though", " actual"]
            .iter()
            .filter_map(|c| part.find(c))
            .min()
            .unwrap_or(part.len());
        out.push(part[..end].to_string());
    }
    out
}

/// The outcome the prose expects, as conditions on pytest's summary counts.
pub fn expected_outcome(prose: &str) -> Vec<Cond> {
    let mut out: Vec<Cond> = Vec::new();
    fn push(out: &mut Vec<Cond>, c: Cond) {
        if !out.iter().any(|o| o.key == c.key) {
            out.push(c);
        }
    }
    for part in expectation_parts(prose) {
        let w: Vec<&str> = part
            .split(char::is_whitespace)
            .map(|x| x.trim_matches(|c: char| !c.is_alphanumeric()))
            .filter(|x| !x.is_empty())
            .collect();
        // "2 passed", "one test skipped", "both tests pass"
        for k in 0..w.len() {
            let Some(n) = number(w[k]) else { continue };
            let mut j = k + 1;
            if w.get(j).is_some_and(|x| x.starts_with("test") || *x == "items" || *x == "item") {
                j += 1;
            }
            if w.get(j).is_some_and(|x| matches!(*x, "to" | "should" | "would" | "will" | "are" | "be" | "being")) {
                j += 1;
                if w.get(j).is_some_and(|x| *x == "be") {
                    j += 1;
                }
            }
            let key = match w.get(j).copied() {
                Some("passed" | "pass" | "passing" | "passes") => "passed",
                Some("failed" | "fail" | "failing" | "fails" | "failure" | "failures") => "failed",
                Some("skipped" | "skip" | "skips") => "skipped",
                Some("error" | "errors") => "errors",
                Some("xfailed" | "xfail") => "xfailed",
                Some("xpassed") => "xpassed",
                Some("deselected") => "deselected",
                _ => continue,
            };
            push(&mut out, Cond { key, op: "==", n });
        }
        let has = |p: &str| part.contains(p);
        let negated = |p: &str| part.contains(&format!("not {p}")) || part.contains(&format!("n't {p}"));
        for (phrases, key) in [
            (&["be skipped", "skip"][..], "skipped"),
            (&["pass", "succeed"][..], "passed"),
            (&["fail"][..], "failed"),
            (&["error"][..], "errors"),
        ] {
            for p in phrases {
                if !has(p) || out.iter().any(|o| o.key == key) {
                    continue;
                }
                let cue = ["should ", "to ", "would ", "expected ", "expect "]
                    .iter()
                    .any(|c| has(&format!("{c}{p}")) || has(&format!("{c}not {p}")) || has(&format!("{c}be {p}")));
                if !cue {
                    continue;
                }
                if negated(p) || negated(&format!("be {p}")) {
                    push(&mut out, Cond { key, op: "==", n: 0 });
                } else {
                    push(&mut out, Cond { key, op: ">=", n: 1 });
                    if key == "skipped" || key == "passed" {
                        push(&mut out, Cond { key: "failed", op: "==", n: 0 });
                        push(&mut out, Cond { key: "errors", op: "==", n: 0 });
                    }
                }
            }
        }
    }
    out
}

/// The counts the issue shows it gets today: the last pytest summary line outside the
/// example's files, in a block the prose does not present as the expected output.
pub fn reported_outcome(raw: &str, files: &[File]) -> Option<Vec<(&'static str, u32)>> {
    let mut last = None;
    for b in blocks(raw) {
        if files.iter().any(|f| f.text == b.body) || presents_expected(&b.before) {
            continue;
        }
        if let Some(c) = b.body.lines().rev().find_map(summary_counts) {
            last = Some(c);
        }
    }
    last
}

/// Does a line present the block after it as the expected output ("the expected output
/// is:"), with no "but it gives" after its cue?
fn presents_expected(line: &str) -> bool {
    let l = line.to_lowercase();
    expectation_parts(&l)
        .iter()
        .any(|p| l.trim_end().trim_end_matches(':').trim_end().ends_with(p.trim_end().trim_end_matches(':').trim_end()))
}

/// The prose of an issue: its lines outside fenced blocks.
fn prose_of(raw: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in raw.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `failed=1 passed=1`: the counts in the order of [`KEYS`], zeros left out.
pub fn fmt_counts(c: &[(&str, u32)]) -> String {
    KEYS.iter()
        .filter_map(|k| c.iter().find(|(x, n)| x == k && *n > 0).map(|(_, n)| format!("{k}={n}")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn holds(conds: &[Cond], counts: &[(&str, u32)]) -> bool {
    conds.iter().all(|c| {
        let got = counts.iter().find(|(k, _)| *k == c.key).map(|(_, n)| *n).unwrap_or(0);
        if c.op == "==" {
            got == c.n
        } else {
            got >= c.n
        }
    })
}

/// The text the test looks for in the run's output: the reported exception's type and
/// its message up to the first path or object address (those name the reporter's
/// machine); quoted values stay, so `ModuleNotFoundError: No module named 'x'` is not
/// matched by another missing module.
fn error_needle(kind: &str, message: &str) -> String {
    let short = kind.rsplit('.').next().unwrap_or(kind);
    let cut = [message.find(['/', '\\', '<']), message.find("0x")].into_iter().flatten().min().unwrap_or(message.len());
    let mut m = message[..cut].trim();
    if cut < message.len() {
        // What opened the cut-off value: `file: '/home/...`, `(<Box at ...`.
        m = m.trim_end_matches([':', ' ', '\'', '"', '(', '[']).trim();
    }
    if m.chars().filter(|c| c.is_alphanumeric()).count() >= 2 {
        format!("{short}: {m}")
    } else {
        short.to_string()
    }
}

/// Does the project test itself with pytester? `Some("pytester")`/`Some("testdir")`: the
/// fixture its tests use.
pub fn pytester_fixture(root: &Path) -> Option<&'static str> {
    let pytest_itself = crate::sandbox::runners::Layout::of(root).pytest_itself;
    if pytest_itself {
        let has_pytester =
            crate::confine::read_text(root, "src/_pytest/pytester.py").is_some_and(|t| t.contains("def pytester("));
        return Some(if has_pytester { "pytester" } else { "testdir" });
    }
    let mut seen_pytester = false;
    let mut seen_testdir = false;
    let mut plugin = false;
    let (files, _) = crate::index::walk(root, false);
    for f in files.iter().filter(|f| f.lang == crate::lang::Lang::Python) {
        let base = f.rel.rsplit('/').next().unwrap_or(&f.rel);
        let is_test = base == "conftest.py" || base.starts_with("test_") || base.ends_with("_test.py");
        if !is_test {
            continue;
        }
        let Some(text) = crate::confine::read_text(root, &f.rel) else { continue };
        if text.contains("pytest_plugins") && text.contains("\"pytester\"") || text.contains("'pytester'") {
            plugin = true;
        }
        for l in text.lines().filter(|l| l.trim_start().starts_with("def test")) {
            let params = l.split_once('(').map(|(_, p)| p).unwrap_or("");
            let has = |n: &str| params.split([',', ')', ' ', ':']).any(|p| p.trim() == n);
            seen_pytester |= has("pytester");
            seen_testdir |= has("testdir");
        }
    }
    match (seen_pytester, seen_testdir, plugin) {
        (true, _, _) => Some("pytester"),
        (false, true, _) => Some("testdir"),
        (false, false, true) => Some("pytester"),
        _ => None,
    }
}

fn is_ident(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// A Python expression holding `s`: a triple-quoted string, indented by four spaces and
/// dedented at run time, so the file reads as the issue wrote it and no line of it is a
/// top-level `def test_...` of the test module (runners list a module's tests by line).
fn py_literal(s: &str) -> String {
    let body = s.replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"");
    let mut out = String::from("textwrap.dedent(\"\"\"\\\n");
    for (k, line) in body.split('\n').enumerate() {
        if k > 0 {
            out.push('\n');
        }
        if !line.trim().is_empty() {
            out.push_str("    ");
        }
        out.push_str(line);
    }
    // A closing quote next to the literal's own would end it early.
    if out.ends_with('"') {
        out.pop();
        out.push_str("\\\"");
    }
    out.push_str("\"\"\")");
    out
}

fn py_list(args: &[String]) -> String {
    let items: Vec<String> = args.iter().map(|a| super::synth::py_str(a)).collect();
    format!("[{}]", items.join(", "))
}

/// What the test checks and what makes its failure the issue's.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub files: Vec<File>,
    pub command: Command,
    /// The text of the reported error, which must not appear.
    pub needle: Option<String>,
    /// The outcome the prose expects.
    pub want: Vec<Cond>,
    /// Output lines the issue shows going wrong, next to the ones it shows right.
    pub contrast: Option<Contrast>,
    /// What was changed in the issue's files so they read as the issue's did, one line each.
    pub notes: Vec<String>,
    /// The failure that reproduces the issue.
    pub expected: Expected,
}

/// Two runs of the example the issue shows: the output it presents as right ("this is
/// indeed what happens with `pytest -rs`:") and the output it presents as wrong ("adding
/// `pytest -rs --runxfail` breaks this:"). The test runs the wrong one's command; the lines
/// only it shows must not appear, the lines only the right one shows must, both read
/// with line numbers and directories aside.
#[derive(Debug, Clone, PartialEq)]
pub struct Contrast {
    /// The command the wrong output came from.
    pub command: Command,
    /// Lines only the wrong output shows.
    pub absent: Vec<String>,
    /// Lines only the right output shows.
    pub present: Vec<String>,
}

/// Words of the line before an output block that present it as wrong, and as right.
const WRONG_OUTPUT: [&str; 9] =
    ["break", "wrong", "incorrect", "however", " but ", "instead", "bug", "actual", "unexpected"];
const RIGHT_OUTPUT: [&str; 8] =
    ["expected", "should", "correct", "indeed", "as it should", "works", "fine", "properly"];

/// Is the block after this line presented as wrong (`Some(false)`) or right (`Some(true)`)?
/// The cue nearest the block decides: "it should show X, but instead shows:" is wrong,
/// "but it should be:" is right.
fn presented_as(line: &str) -> Option<bool> {
    let l = format!(" {} ", line.to_lowercase());
    // Where a word starts: "bug" is no cue in "debug", nor "works" in "frameworks".
    let last = |cues: &[&str]| {
        cues.iter()
            .flat_map(|c| l.match_indices(c).map(|(i, _)| i))
            .filter(|&i| l.as_bytes()[i] == b' ' || starts_word(&l, i))
            .max()
    };
    match (last(&WRONG_OUTPUT), last(&RIGHT_OUTPUT)) {
        (Some(w), Some(r)) => Some(r > w),
        (Some(_), None) => Some(false),
        (None, Some(_)) => Some(true),
        (None, None) => None,
    }
}

/// Does a word start at byte `i` of `s` (no letter or digit just before it)?
fn starts_word(s: &str, i: usize) -> bool {
    !s[..i].chars().next_back().is_some_and(char::is_alphanumeric)
}

/// Lines of an output block that say something about the run: not pytest's header, rule
/// lines, timings or summary counts, which differ from machine to machine.
fn telling_lines(body: &str) -> Vec<String> {
    body.lines()
        .map(|l| l.trim().trim_start_matches("> ").trim())
        .filter(|t| {
            !t.is_empty()
                && !t.starts_with("$ ")
                && !t.starts_with('=')
                && !t.starts_with('-')
                && !["platform ", "rootdir:", "cachedir:", "plugins:", "collected ", "collecting "]
                    .iter()
                    .any(|p| t.starts_with(p))
                && summary_counts(t).is_none()
        })
        .map(str::to_string)
        .collect()
}

/// The command a block's own lines or the line before it (in a code span) gives.
fn block_command(b: &Block, files: &[File], clis: &[String]) -> Option<Command> {
    if let Some(c) = b.body.lines().filter(|l| l.trim_start().starts_with('$')).find_map(|l| command_of(l, files, clis))
    {
        return Some(c);
    }
    let mut rest = b.before.as_str();
    let mut found = None;
    while let Some(i) = rest.find('`') {
        let after = &rest[i + 1..];
        let Some(j) = after.find('`') else { break };
        found = command_of(&after[..j], files, clis).or(found);
        rest = &after[j + 1..];
    }
    found
}

/// The contrast the issue shows, when it shows one output as wrong (with the command
/// that gave it) and one as right, and they differ in a few telling lines.
pub fn contrast(raw: &str, files: &[File], clis: &[String]) -> Option<Contrast> {
    let outputs: Vec<(Block, bool)> = blocks(raw)
        .into_iter()
        .filter(|b| {
            !b.body.trim().is_empty()
                && !files.iter().any(|f| f.text == b.body)
                && !matches!(b.tag.as_str(), "python" | "py" | "python3" | "pycon" | "ini" | "toml" | "cfg")
        })
        .filter_map(|b| presented_as(&b.before).map(|right| (b, right)))
        .collect();
    let wrong: Vec<&Block> = outputs.iter().filter(|(_, r)| !r).map(|(b, _)| b).collect();
    let right: Vec<&Block> = outputs.iter().filter(|(_, r)| *r).map(|(b, _)| b).collect();
    let ([w], [r]) = (wrong.as_slice(), right.as_slice()) else { return None };
    let command = block_command(w, files, clis)?;
    let (wl, rl) = (telling_lines(&w.body), telling_lines(&r.body));
    let absent: Vec<String> = wl.iter().filter(|l| !rl.contains(l)).cloned().collect();
    let present: Vec<String> = rl.iter().filter(|l| !wl.contains(l)).cloned().collect();
    // A handful of lines is a contrast; whole different sessions are not.
    (!absent.is_empty() && absent.len() <= 5 && present.len() <= 5).then_some(Contrast { command, absent, present })
}

/// The one Python block of an issue, unnamed, named by the project's own command that
/// runs on it: `pylint a.py` (one `.py` argument) names the block `a.py`.
fn named_by_command(raw: &str, clis: &[String]) -> Option<File> {
    let Some(Command::Module(_, args)) = command(raw, &[], clis) else { return None };
    let py: Vec<&String> =
        args.iter().filter(|a| a.ends_with(".py") && !a.contains('/') && file_name(a).as_ref() == Some(*a)).collect();
    let [name] = py.as_slice() else { return None };
    let modules: Vec<Block> = blocks(raw)
        .into_iter()
        .filter(|b| {
            let tagged = matches!(b.tag.as_str(), "python" | "py" | "python3");
            // A block of nothing but the command parses too (`pylint` is a name).
            let only_commands =
                b.body.lines().filter(|l| !l.trim().is_empty()).all(|l| command_of(l, &[], clis).is_some());
            let untagged =
                b.tag.is_empty() && !is_output(&b.body) && !super::synth::is_traceback_text(&b.body) && !only_commands;
            (tagged || untagged) && !b.body.trim().is_empty() && super::body::parses(&b.body)
        })
        .collect();
    let [m] = modules.as_slice() else { return None };
    Some(File { name: (*name).clone(), text: m.body.clone() })
}

/// The one test module of an issue whose example is a single unnamed block, named by the
/// output that reports on it (`SKIPPED [1] test_it.py:3: ...` names `test_it.py`).
fn named_by_output(raw: &str, c: &Contrast) -> Option<File> {
    let modules: Vec<Block> = blocks(raw)
        .into_iter()
        .filter(|b| {
            matches!(b.tag.as_str(), "python" | "py" | "python3" | "")
                && b.body.lines().any(|l| l.trim_start().starts_with("def test"))
                && super::body::parses(&b.body)
        })
        .collect();
    let [m] = modules.as_slice() else { return None };
    let mut names: Vec<String> = Vec::new();
    for l in c.absent.iter().chain(&c.present) {
        for w in l.split_whitespace() {
            let head = w.split(':').next().unwrap_or("");
            if let Some(n) = file_name(head).filter(|n| !n.contains('/')) {
                let base = n.trim_end_matches(".py");
                if n.ends_with(".py") && (base.starts_with("test_") || base.ends_with("_test")) && !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    match names.as_slice() {
        [n] => Some(File { name: n.clone(), text: m.body.clone() }),
        _ => None,
    }
}

/// The plan for an issue whose example is files written out and run: several named
/// files; or one file or more the project's own command runs (`clis`, see
/// [`project_commands`]); or one unnamed test module the output of two runs names.
/// `Ok(None)` when it is none of these, `Err(reason)` when no honest assertion can be
/// built.
pub fn plan(raw: &str, clis: &[String]) -> Result<Option<Plan>, String> {
    let mut files = files(raw);
    let mut contrast = contrast(raw, &files, clis);
    let named = named_files(raw);
    let tool_run = || command(raw, &named, clis).filter(|c| matches!(c, Command::Module(..)));
    if files.is_empty() && !named.is_empty() && tool_run().is_some() {
        // The project's own command run on the files the issue shows (a tool's config).
        files = named.clone();
        contrast = self::contrast(raw, &files, clis);
    } else if let Some(f) = files.is_empty().then(|| named_by_command(raw, clis)).flatten() {
        // One unnamed module the project's own command is run on (`pylint a.py`).
        files.push(f);
        contrast = self::contrast(raw, &files, clis);
    } else if files.is_empty() {
        // One test module, unnamed, with the output of two runs of it.
        match contrast.as_ref().and_then(|c| named_by_output(raw, c)) {
            Some(f) => {
                files.push(f);
                contrast = contrast.filter(|c| matches!(c.command, Command::Pytest(_)));
                if contrast.is_none() {
                    return Ok(None);
                }
            }
            None => return Ok(None),
        }
    }
    let names = files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ");
    let Some(command) = contrast.as_ref().map(|c| c.command.clone()).or_else(|| command(raw, &files, clis)) else {
        return Err(format!(
            "the issue's example is {} ({names}) but it does not show how they are run (a `pytest ...` or `python FILE` command)",
            n_files(files.len())
        ));
    };
    // The reported error and prose: read from the issue without the files (an exception
    // a file raises on purpose is not the report).
    let file_bodies: Vec<&str> = files.iter().map(|f| f.text.as_str()).collect();
    let mut outside = String::new();
    let mut open: Option<(String, String)> = None;
    for line in raw.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            match open.take() {
                Some((fence, body)) => {
                    if !file_bodies.contains(&body.as_str()) {
                        outside.push_str(&format!("{fence}\n{body}{line}\n"));
                    }
                }
                None => open = Some((line.to_string(), String::new())),
            }
            continue;
        }
        match &mut open {
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {
                outside.push_str(line);
                outside.push('\n');
            }
        }
    }
    let facts: IssueFacts = crate::localize::read_issue(&outside);
    if let Some(why) = super::body::shows_old_behaviour(&facts) {
        return Err(format!("{why}: a test expecting it today would be inverted"));
    }
    let needle = facts.exceptions.last().map(|e| error_needle(&e.kind, &e.message));
    let want = if matches!(command, Command::Pytest(_)) { expected_outcome(&facts.prose) } else { Vec::new() };
    let reported = if matches!(command, Command::Pytest(_)) { reported_outcome(raw, &files) } else { None };
    let expected = match (&needle, &reported) {
        (Some(n), _) => Expected { kind: "AssertionError".into(), message: Some(format!("the issue's error appears: {n}")) },
        (None, _) if contrast.is_some() => {
            let line = contrast.as_ref().map(|c| c.absent[0].clone()).unwrap_or_default();
            Expected { kind: "AssertionError".into(), message: Some(format!("the output the issue calls wrong appears: {line}")) }
        }
        (None, Some(r)) if !want.is_empty() && !holds(&want, r) => {
            Expected { kind: "AssertionError".into(), message: Some(format!("outcome {};", fmt_counts(r))) }
        }
        (None, Some(_)) if !want.is_empty() => {
            return Err(format!(
                "the issue's example is {} ({names}): the outcome it shows already meets the one its prose expects, so no failure can be checked",
                n_files(files.len())
            ))
        }
        _ => {
            return Err(format!(
                "the issue's example is {} ({names}) but it shows neither the error it reports nor the outcome it gets and the one it expects: no assertion can be checked against it",
                n_files(files.len())
            ))
        }
    };
    let mut notes = Vec::new();
    if let Command::Module(cli, _) = &command {
        for f in files.iter_mut() {
            if let Some(text) = with_section(&f.name, &f.text, cli) {
                notes.push(format!(
                    "{}: the issue shows its settings without a section, which configparser does not read; they go under [{cli}].",
                    f.name
                ));
                f.text = text;
            }
        }
    }
    Ok(Some(Plan { files, command, needle, want, contrast, notes, expected }))
}

/// A run-control file (`.pylintrc`) the issue shows as bare `key=value` lines: the lines
/// under a `[CLI]` section, since an INI file's settings must sit in one to be read at
/// all (the issue pasted the setting, not the file's header). `None` when it has a
/// section already or is no INI.
fn with_section(name: &str, text: &str, cli: &str) -> Option<String> {
    if !(name.starts_with('.') && name.ends_with("rc")) {
        return None;
    }
    let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))?;
    let key = first.split(['=', ':']).next().unwrap_or("").trim();
    let setting = first.contains(['=', ':'])
        && !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    (!first.starts_with('[') && setting).then(|| format!("[{cli}]\n{text}"))
}

fn n_files(n: usize) -> String {
    if n == 1 {
        "1 file".to_string()
    } else {
        format!("{n} files")
    }
}

/// The Python helpers the test carries: the summary counts of a pytest run.
const OUTCOME_HELPER: &str = r#"def _outcome(output):
    """The counts of pytest's last summary line, as {"passed": 2, ...}."""
    counts = {}
    for line in output.splitlines():
        line = line.strip().strip("=").strip()
        if not re.search(r" in [0-9.]+ ?s", line):
            continue
        found = re.findall(r"(\d+) (failed|passed|skipped|deselected|xfailed|xpassed|errors?)\b", line)
        if found:
            counts = {}
            for n, key in found:
                key = "errors" if key.startswith("error") else key
                counts[key] = int(n)
    return counts


def _shows(output, line):
    """Does a line of the output read as `line`, with line numbers (between colons) and
    the directories of paths aside?"""
    parts = []
    for word in line.split():
        prefix = ""
        if "/" in word or "\\" in word or re.match(r"[\w.-]+\.py\b", word):
            word = re.split(r"[\\/]", word)[-1]
            prefix = r"(?:\S*[\\/])?"
        parts.append(prefix + r"\d+".join(re.escape(p) for p in re.split(r"(?<=:)\d+(?=:)", word)))
    pattern = r"\s+".join(parts)
    return any(re.fullmatch(pattern, got.strip()) for got in output.splitlines())


def _fmt(counts):
    keys = ["failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "errors"]
    return " ".join("%s=%d" % (k, counts[k]) for k in keys if counts.get(k))
"#;

fn condition(want: &[Cond]) -> String {
    want.iter().map(|c| format!("got.get(\"{}\", 0) {} {}", c.key, c.op, c.n)).collect::<Vec<_>>().join(" and ")
}

fn want_text(want: &[Cond]) -> String {
    want.iter()
        .map(|c| format!("{}{}{}", c.key, if c.op == "==" { "=" } else { ">=" }, c.n))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The checks after the run, on `output` (indented by `indent`).
fn checks(p: &Plan, indent: &str) -> String {
    let mut s = String::new();
    if let Some(n) = &p.needle {
        let lit = super::synth::py_str(n);
        s.push_str(&format!(
            "{indent}# The error the issue reports must not appear.\n{indent}assert {lit} not in output, \"the issue's error appears: \" + {lit}\n"
        ));
    }
    if let Some(c) = &p.contrast {
        for l in &c.absent {
            let lit = super::synth::py_str(l);
            s.push_str(&format!(
                "{indent}# The issue shows this line as the wrong output.\n{indent}assert not _shows(output, {lit}), \"the output the issue calls wrong appears: \" + {lit}\n"
            ));
        }
        for l in &c.present {
            let lit = super::synth::py_str(l);
            s.push_str(&format!(
                "{indent}# The issue shows this line as the right output.\n{indent}assert _shows(output, {lit}), \"the output the issue shows right is missing: \" + {lit}\n"
            ));
        }
    }
    if !p.want.is_empty() {
        s.push_str(&format!(
            "{indent}# The outcome the issue expects must hold.\n{indent}got = _outcome(output)\n{indent}assert {}, \"outcome %s; expected {}\" % _fmt(got)\n",
            condition(&p.want),
            want_text(&p.want)
        ));
    }
    s
}

/// Build the test for a multi-file plan. `fixture` is the pytester fixture the project
/// tests itself with (then the test is a pytest function using it).
pub fn build(
    root: &Path,
    conv: &super::conventions::Conventions,
    p: &Plan,
    fixture: Option<&str>,
    stem: &str,
    title: &str,
) -> TestFile {
    let name = {
        let s: String = title
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
            .collect::<String>()
            .split('_')
            .filter(|x| !x.is_empty())
            .collect::<Vec<_>>()
            .join("_");
        let s: String = s.chars().take(48).collect::<String>().trim_end_matches('_').to_string();
        if s.is_empty() {
            "issue".to_string()
        } else {
            s
        }
    };
    let stem_slug: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .collect::<String>()
        .trim_matches('_')
        .chars()
        .take(40)
        .collect();
    let path = super::form::python_test_path(root, conv, if stem_slug.is_empty() { "issue" } else { &stem_slug });
    let what = p.expected.message.clone().unwrap_or_default();
    let how = match &p.command {
        Command::Pytest(a) => format!("pytest {}", a.join(" ")).trim().to_string(),
        Command::Python(f, a) => format!("python {f} {}", a.join(" ")).trim().to_string(),
        Command::Module(m, a) => format!("{m} {}", a.join(" ")).trim().to_string(),
    };
    let from = match p.files.len() {
        1 => "the file in the issue: writes it".to_string(),
        n => format!("the {n} files in the issue: writes them"),
    };
    let checked = if p.contrast.is_some() {
        "the output the issue\ncalls wrong does not appear and the output it shows right does"
    } else if p.want.is_empty() {
        "the\nreported error does not appear"
    } else {
        "the\nreported error does not appear and the outcome the issue expects holds"
    };
    let mut code = format!(
        "\"\"\"Reproduces: {}\n\nBuilt by reproagent from {from} into a fresh\ndirectory, runs `{}` there as the issue does, and checks that {checked}.\nFails today with AssertionError: {}\n\"\"\"\n\n",
        super::synth::docstring_text(title),
        super::synth::docstring_text(&how),
        super::synth::docstring_text(&what),
    );
    let use_pytester = fixture.is_some() && matches!(p.command, Command::Pytest(_));
    code.push_str("import os\nimport re\nimport textwrap\n");
    if !use_pytester {
        code.push_str("import subprocess\nimport sys\nimport tempfile\n");
    }
    code.push_str("\n\n");
    for n in &p.notes {
        code.push_str(&format!("# {n}\n"));
    }
    code.push_str("FILES = {\n");
    for f in &p.files {
        code.push_str(&format!("    \"{}\": {},\n", f.name, py_literal(&f.text)));
    }
    code.push_str("}\n\n\n");
    code.push_str(OUTCOME_HELPER);
    code.push_str("\n\n");
    if use_pytester {
        let fx = fixture.unwrap_or("pytester");
        let Command::Pytest(args) = &p.command else { unreachable!("checked above") };
        code.push_str(&format!("def test_{name}({fx}):\n"));
        for f in &p.files {
            let (dir, base) = match f.name.rsplit_once('/') {
                Some((d, b)) => (Some(d), b),
                None => (None, f.name.as_str()),
            };
            let (stem, ext) = base.rsplit_once('.').unwrap_or((base, ""));
            let key = format!("FILES[\"{}\"]", f.name);
            let line = match (dir, base, ext) {
                (None, "conftest.py", _) => format!("{fx}.makeconftest({key})"),
                (None, "tox.ini", _) => format!("{fx}.makeini({key})"),
                (None, _, "py") if is_ident(stem) => format!("{fx}.makepyfile({stem}={key})"),
                (None, _, e) if is_ident(stem) && !e.is_empty() => {
                    format!("{fx}.makefile(\".{e}\", {stem}={key})")
                }
                _ => format!(
                    "os.makedirs(os.path.dirname(\"{0}\") or \".\", exist_ok=True)\n    with open(\"{0}\", \"w\") as f:\n        f.write({key})",
                    f.name
                ),
            };
            code.push_str(&format!("    {line}\n"));
        }
        code.push_str(&format!(
            "    result = {fx}.runpytest(*{})\n    output = result.stdout.str() + \"\\n\" + result.stderr.str()\n",
            py_list(args)
        ));
        code.push_str(&checks(p, "    "));
        return TestFile { path, code, framework: "pytest", test: Some(format!("test_{name}")) };
    }
    // Elsewhere: a temporary directory and a subprocess, in the repository's test form.
    let form = super::form::PyForm::of(conv, &stem_slug, "");
    let argv = match &p.command {
        Command::Pytest(a) => format!("[sys.executable, \"-m\", \"pytest\"] + {}", py_list(a)),
        Command::Python(f, a) => format!("[sys.executable, \"{f}\"] + {}", py_list(a)),
        Command::Module(m, a) => format!("[sys.executable, \"-m\", \"{m}\"] + {}", py_list(a)),
    };
    let i = form.indent();
    let mut body = String::new();
    body.push_str(&format!("{i}with tempfile.TemporaryDirectory() as tmp:\n"));
    body.push_str(&format!(
        "{i}    for name, text in FILES.items():\n{i}        path = os.path.join(tmp, name)\n{i}        os.makedirs(os.path.dirname(path), exist_ok=True)\n{i}        with open(path, \"w\") as f:\n{i}            f.write(text)\n"
    ));
    body.push_str(&format!(
        "{i}    # The files import the repository as this test does.\n{i}    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))\n"
    ));
    body.push_str(&format!(
        "{i}    proc = subprocess.run(\n{i}        {argv},\n{i}        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,\n{i}    )\n{i}    output = proc.stdout\n"
    ));
    body.push_str(&checks(p, &format!("{i}    ")));
    code.push_str(&form.preamble());
    if !form.preamble().is_empty() {
        code.push_str("\n\n");
    }
    code.push_str(&form.open(&name));
    code.push_str(&body);
    TestFile { path, code, framework: form.framework_name(), test: Some(form.test_id(&name)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_MODULES: &str = "Shared fixture lost across modules\n\nWith `--lf`, a fixture from conftest is not found.\n\nconftest.py:\n```python\nimport pytest\n\n@pytest.fixture\ndef box():\n    return 3\n```\n\n```python\n# test_alpha.py\ndef test_alpha(box):\n    assert box == 3\n```\n\nAnd `test_beta.py`:\n```python\ndef test_beta(box):\n    assert box == 3\n```\n\nRunning `pytest -q --lf test_alpha.py test_beta.py` gives\n\n```\nE       fixture 'box' not found\n==== 1 failed, 1 passed in 0.05s ====\n```\n\nI expected 2 passed.\n";

    #[test]
    fn files_are_split_by_the_names_before_and_inside_blocks() {
        let f = files(TWO_MODULES);
        let names: Vec<&str> = f.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, vec!["conftest.py", "test_alpha.py", "test_beta.py"]);
        assert!(f[0].text.starts_with("import pytest\n"));
        assert!(f[2].text.contains("def test_beta(box):"));
        // One named file is not a multi-file example.
        assert!(files("In `test_x.py`:\n```python\ndef test_x():\n    assert 0\n```\n").is_empty());
    }

    #[test]
    fn the_command_comes_from_a_code_span_with_its_options() {
        let f = files(TWO_MODULES);
        assert_eq!(
            command(TWO_MODULES, &f, &[]),
            Some(Command::Pytest(vec!["-q".into(), "--lf".into(), "test_alpha.py".into(), "test_beta.py".into()]))
        );
        let raw = "a.py\n```python\nX = 1\n```\nmain.py\n```python\nimport a\nprint(a.X)\n```\n```\n$ python3 main.py --fast\n```\n";
        let f = files(raw);
        assert_eq!(command(raw, &f, &[]), Some(Command::Python("main.py".into(), vec!["--fast".into()])));
        // No command: pytest when a file is a test module.
        let raw = "conftest.py\n```python\nX = 1\n```\ntest_z.py\n```python\ndef test_z():\n    pass\n```\n";
        assert_eq!(command(raw, &files(raw), &[]), Some(Command::Pytest(vec![])));
    }

    #[test]
    fn summary_lines_and_expectations_are_read() {
        assert_eq!(
            summary_counts("==== 1 failed, 2 passed, 1 warning in 0.12s ===="),
            Some(vec![("failed", 1), ("passed", 2)])
        );
        assert_eq!(summary_counts("1 error in 0.30 seconds"), Some(vec![("errors", 1)]));
        assert_eq!(summary_counts("2 passed tests were fine"), None);
        assert_eq!(expected_outcome("I expected 2 passed."), vec![Cond { key: "passed", op: "==", n: 2 }]);
        let skip = expected_outcome("The second test should be skipped, but it runs and fails.");
        assert!(skip.contains(&Cond { key: "skipped", op: ">=", n: 1 }), "{skip:?}");
        assert!(skip.contains(&Cond { key: "failed", op: "==", n: 0 }), "{skip:?}");
        assert_eq!(expected_outcome("It should not fail."), vec![Cond { key: "failed", op: "==", n: 0 }]);
        assert!(expected_outcome("It fails with 1 failed.").is_empty());
    }

    #[test]
    fn the_plan_claims_only_the_issues_failure() {
        let p = plan(TWO_MODULES, &[]).unwrap().unwrap();
        // No exception line in the report: the outcome is the failure to match.
        assert_eq!(p.needle, None);
        assert_eq!(p.want, vec![Cond { key: "passed", op: "==", n: 2 }]);
        assert_eq!(p.expected.message.as_deref(), Some("outcome failed=1 passed=1;"));
        // With an error in the report, the error is the failure.
        let raw = TWO_MODULES
            .replace("E       fixture 'box' not found", "E   FileNotFoundError: [Errno 2] No such file: '/home/me/x'");
        let p = plan(&raw, &[]).unwrap().unwrap();
        assert_eq!(p.needle.as_deref(), Some("FileNotFoundError: [Errno 2] No such file"));
        assert_eq!(
            error_needle("ModuleNotFoundError", "No module named 'plug'"),
            "ModuleNotFoundError: No module named 'plug'"
        );
        assert_eq!(error_needle("builtins.KeyError", "'cm'"), "KeyError: 'cm'");
        assert_eq!(error_needle("ValueError", "<Box object at 0x7f00>"), "ValueError");
        // Neither an error nor today's outcome: refused, with the reason.
        let raw = "Bad\n\nconftest.py\n```python\nX = 1\n```\ntest_q.py\n```python\ndef test_q():\n    pass\n```\nIt behaves oddly.\n";
        let e = plan(raw, &[]).unwrap_err();
        assert!(e.contains("neither the error"), "{e}");
        // The outcome shown already meets the expectation: nothing to reproduce.
        let raw = TWO_MODULES.replace("1 failed, 1 passed", "2 passed");
        assert!(plan(&raw, &[]).unwrap_err().contains("already meets"));
    }

    #[test]
    fn the_test_writes_runs_and_checks() {
        let p = plan(TWO_MODULES, &[]).unwrap().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let conv = super::super::conventions::conventions(dir.path(), &[]);
        let t = build(dir.path(), &conv, &p, None, "77", "Shared fixture lost");
        assert_eq!(t.path, "test_reproduce_77.py");
        assert!(t.code.contains("\"conftest.py\": textwrap.dedent(\"\"\"\\\n    import pytest\n"), "{}", t.code);
        // No line of the files is a test of the module itself.
        let ids = crate::sandbox::runners::python_test_ids(&t.code, "test");
        assert_eq!(ids.functions, vec!["test_shared_fixture_lost".to_string()]);
        assert!(
            t.code.contains(
                "[sys.executable, \"-m\", \"pytest\"] + [\"-q\", \"--lf\", \"test_alpha.py\", \"test_beta.py\"]"
            ),
            "{}",
            t.code
        );
        assert!(
            t.code.contains("assert got.get(\"passed\", 0) == 2, \"outcome %s; expected passed=2\" % _fmt(got)"),
            "{}",
            t.code
        );
        assert!(super::super::body::parses(&t.code), "{}", t.code);
        let t = build(dir.path(), &conv, &p, Some("pytester"), "77", "Shared fixture lost");
        assert!(t.code.contains("def test_shared_fixture_lost(pytester):\n    pytester.makeconftest(FILES[\"conftest.py\"])\n    pytester.makepyfile(test_alpha=FILES[\"test_alpha.py\"])\n"), "{}", t.code);
        assert!(
            t.code.contains("result = pytester.runpytest(*[\"-q\", \"--lf\", \"test_alpha.py\", \"test_beta.py\"])"),
            "{}",
            t.code
        );
        assert!(super::super::body::parses(&t.code), "{}", t.code);
    }

    #[test]
    fn two_runs_shown_right_and_wrong_become_lines_that_must_and_must_not_appear() {
        // The shape of pytest-dev__pytest-7432: one unnamed test module, the output of a run
        // the issue calls right and of one it says breaks, with the command in the prose.
        let raw = "skipping: --runxfail breaks skip location reporting\n\n```py\nimport pytest\n@pytest.mark.skip\ndef test_skip_location() -> None:\n    assert 0\n```\n\nthe expected skip location reported should point to the item itself, and this is indeed what happens when running with `pytest -rs`:\n\n```\nSKIPPED [1] test_it.py:3: unconditional skip\n```\n\nHowever, adding `pytest -rs --runxfail` breaks this:\n\n```\nSKIPPED [1] src/_pytest/skipping.py:238: unconditional skip\n```\n\nThe `--runxfail` is only about xfail.\n";
        let p = plan(raw, &[]).unwrap().unwrap();
        assert_eq!(
            p.files,
            vec![File {
                name: "test_it.py".into(),
                text: "import pytest\n@pytest.mark.skip\ndef test_skip_location() -> None:\n    assert 0\n".into()
            }]
        );
        assert_eq!(p.command, Command::Pytest(vec!["-rs".into(), "--runxfail".into()]));
        let c = p.contrast.clone().unwrap();
        assert_eq!(c.absent, vec!["SKIPPED [1] src/_pytest/skipping.py:238: unconditional skip".to_string()]);
        assert_eq!(c.present, vec!["SKIPPED [1] test_it.py:3: unconditional skip".to_string()]);
        assert_eq!(
            p.expected.message.as_deref(),
            Some(
                "the output the issue calls wrong appears: SKIPPED [1] src/_pytest/skipping.py:238: unconditional skip"
            )
        );
        let dir = tempfile::tempdir().unwrap();
        let conv = super::super::conventions::conventions(dir.path(), &[]);
        let t = build(dir.path(), &conv, &p, Some("testdir"), "7432", "skip location");
        assert!(t.code.contains("    testdir.makepyfile(test_it=FILES[\"test_it.py\"])\n    result = testdir.runpytest(*[\"-rs\", \"--runxfail\"])\n"), "{}", t.code);
        assert!(
            t.code
                .contains("assert not _shows(output, \"SKIPPED [1] src/_pytest/skipping.py:238: unconditional skip\")"),
            "{}",
            t.code
        );
        assert!(super::super::body::parses(&t.code), "{}", t.code);
        // Neither output presented as wrong, or no command for the wrong one: no plan.
        assert_eq!(
            plan(
                &raw.replace(
                    "However, adding `pytest -rs --runxfail` breaks this:",
                    "And with `pytest -rs --runxfail`:"
                ),
                &[]
            )
            .unwrap(),
            None
        );
        assert_eq!(
            plan(&raw.replace("adding `pytest -rs --runxfail` breaks", "adding the option breaks"), &[]).unwrap(),
            None
        );
        // A multi-line session is read for its telling lines only.
        assert_eq!(
            telling_lines("$ pytest -rs\n============ test session starts ============\nplatform linux -- Python 3.8\ncollected 1 item\n\nSKIPPED [1] a.py:3: x\n======= 1 skipped in 0.01s =======\n"),
            vec!["SKIPPED [1] a.py:3: x".to_string()]
        );
        assert_eq!(presented_as("It should print 2, but instead prints:"), Some(false));
        assert_eq!(presented_as("but it should print:"), Some(true));
        assert_eq!(presented_as("Running it:"), None);
        // Cues are words: "debug" and "frameworks" are none.
        assert_eq!(presented_as("With the debug frameworks on:"), None);
    }

    #[test]
    fn the_projects_own_command_runs_a_config_file_the_issue_shows() {
        // The shape of pylint-dev__pylint-7228 (pylint's issue template): a run-control
        // file with a bare setting, the command, the traceback it gives.
        let raw = "rgx including '\\p{Han}' throws an error\n\n### Configuration\n.pylintrc:\n\n```ini\nfunction-rgx=[\\p{Han}a-z_][\\p{Han}a-z0-9_]{2,30}$\n```\n\n### Command used\n\n```shell\npylint\n```\n\n### Pylint output\n\n```shell\nTraceback (most recent call last):\n  File \"/usr/lib/python3.9/sre_parse.py\", line 350, in _class_escape\n    raise source.error('bad escape %s' % escape, len(escape))\nre.error: bad escape \\p at position 1\n```\n\n### Expected behavior\n\nnot throw error\n\n### Pylint version\n\n```shell\npylint 2.14.4\n```\n";
        // Without the project's command it is no example of several files.
        assert_eq!(plan(raw, &[]).unwrap(), None);
        let clis = vec!["pylint".to_string()];
        let p = plan(raw, &clis).unwrap().unwrap();
        assert_eq!(p.command, Command::Module("pylint".into(), vec![]));
        assert_eq!(p.files[0].name, ".pylintrc");
        assert_eq!(p.files[0].text, "[pylint]\nfunction-rgx=[\\p{Han}a-z_][\\p{Han}a-z0-9_]{2,30}$\n");
        assert_eq!(p.notes.len(), 1);
        assert_eq!(p.needle.as_deref(), Some("error: bad escape"));
        let dir = tempfile::tempdir().unwrap();
        let conv = super::super::conventions::conventions(dir.path(), &[]);
        let t = build(dir.path(), &conv, &p, Some("pytester"), "7228", "rgx including '\\p{Han}' throws an error");
        assert!(t.code.contains("[sys.executable, \"-m\", \"pylint\"] + []"), "{}", t.code);
        // The title's backslash is no escape in the docstring.
        assert!(t.code.starts_with("\"\"\"Reproduces: rgx including '\\\\p{Han}'"), "{}", t.code);
        assert!(super::super::body::parses(&t.code), "{}", t.code);
        // The tool telling its version is no run of it; `python -m` is one.
        assert_eq!(command_of("pylint 2.14.4", &[], &clis), None);
        assert_eq!(
            command_of("$ python3 -m pylint --recursive=y src/", &[], &clis),
            Some(Command::Module("pylint".into(), vec!["--recursive=y".into(), "src/".into()]))
        );
        // A file with a section keeps its text; other names are not run-control files.
        assert_eq!(with_section(".pylintrc", "[MAIN]\nx=1\n", "pylint"), None);
        assert_eq!(with_section("setup.cfg", "x=1\n", "pylint"), None);
        assert_eq!(
            with_section(".pylintrc", "# c\nmax-line-length: 100\n", "pylint").as_deref(),
            Some("[pylint]\n# c\nmax-line-length: 100\n")
        );
    }

    #[test]
    fn an_unnamed_module_is_named_by_the_command_run_on_it() {
        // A linter crash report: the code, `pylint a.py` as a bare block, the traceback.
        let raw = "Crash on a walrus in a comprehension\n\n```python\nprint([y := 1 for _ in range(2)])\n```\n\n```\npylint crash.py\n```\n\n```\nTraceback (most recent call last):\n  File \"/usr/lib/python3/site-packages/pylint/checkers/variables.py\", line 10, in visit_name\nKeyError: 'target'\n```\n";
        let clis = vec!["pylint".to_string()];
        let p = plan(raw, &clis).unwrap().unwrap();
        assert_eq!(p.files, vec![File { name: "crash.py".into(), text: "print([y := 1 for _ in range(2)])\n".into() }]);
        assert_eq!(p.command, Command::Module("pylint".into(), vec!["crash.py".into()]));
        assert_eq!(p.needle.as_deref(), Some("KeyError: 'target'"));
        // Two blocks of code, or a command on no `.py` file: not named.
        let two = raw.replace("```\npylint crash.py", "```python\nx = 1\n```\n\n```\npylint crash.py");
        assert_eq!(plan(&two, &clis).unwrap(), None);
        assert_eq!(plan(&raw.replace("pylint crash.py", "pylint src/"), &clis).unwrap(), None);
        assert_eq!(plan(raw, &[]).unwrap(), None);
    }

    #[test]
    fn literals_survive_quotes_and_backslashes() {
        assert_eq!(
            py_literal("a = \"\"\"x\\n\"\"\"\n\ndef test_a():\n    pass\n"),
            "textwrap.dedent(\"\"\"\\\n    a = \\\"\\\"\\\"x\\\\n\\\"\\\"\\\"\n\n    def test_a():\n        pass\n\"\"\")"
        );
        assert_eq!(py_literal("s = \"x\""), "textwrap.dedent(\"\"\"\\\n    s = \"x\\\"\"\"\")");
    }
}
