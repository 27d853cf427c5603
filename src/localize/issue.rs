//! Reading an issue report: traceback frames (Python, Java, JavaScript/TypeScript),
//! the exception and its message, identifiers in code spans and blocks, file paths.

use serde::Serialize;

/// One stack frame as the issue shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frame {
    /// The path as written (absolute, relative or a Java class's file name).
    pub path: String,
    pub line: u32,
    pub function: String,
    /// Java frames carry the class: `com.acme.Foo.bar(Foo.java:12)` gives `com.acme.Foo`.
    pub class: String,
}

/// An exception or error line: `KeyError: 'x'`, `java.lang.IllegalStateException: ...`,
/// `TypeError: ...`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Exception {
    pub kind: String,
    pub message: String,
}

/// What an issue carries, read without a model.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IssueFacts {
    pub title: String,
    /// Frames in the order the issue prints them.
    pub frames: Vec<Frame>,
    /// Python prints the innermost frame last; Java and JS print it first.
    pub innermost_last: bool,
    pub exceptions: Vec<Exception>,
    /// Identifiers from code spans and code blocks, most specific first (`Cls.method`
    /// before `method`), each once.
    pub identifiers: Vec<String>,
    /// Paths of source files the text names.
    pub paths: Vec<String>,
    /// Fenced code blocks, as written (language tag, body).
    pub code_blocks: Vec<(String, String)>,
    /// The text without code blocks: the prose BM25 reads.
    pub prose: String,
    /// The whole text's words in the order written, code blocks in place, without frame
    /// lines and path tokens.
    pub words: String,
}

const SOURCE_EXTS: [&str; 9] = ["py", "ts", "tsx", "js", "jsx", "mjs", "cjs", "java", "pyi"];

/// Read an issue (Markdown or plain text).
pub fn read(text: &str) -> IssueFacts {
    let mut f = IssueFacts::default();
    let (prose, blocks) = split_code_blocks(text);
    f.code_blocks = blocks;
    // Without the fence lines (a block's language tag is not the issue's word).
    let unfenced: Vec<&str> = text.lines().filter(|l| !is_fence(l.trim_start())).collect();
    f.words = prose_words(&unfenced.join("\n"));
    f.title =
        text.lines().map(|l| l.trim().trim_start_matches('#').trim()).find(|l| !l.is_empty()).unwrap_or("").to_string();
    // Frames and exceptions anywhere (tracebacks are often pasted without fences).
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(fr) = python_frame(line).or_else(|| ipython_frame(line, &lines[i + 1..])) {
            f.innermost_last = true;
            f.frames.push(fr);
        } else if let Some(fr) = java_frame(line).or_else(|| js_frame(line)) {
            f.frames.push(fr);
        }
        if let Some(e) = exception_line(line) {
            if !f.exceptions.contains(&e) {
                f.exceptions.push(e);
            }
        }
    }
    let mut idents: Vec<String> = Vec::new();
    for span in inline_code(&prose) {
        collect_identifiers(&span, &mut idents);
    }
    // Frame lines are counted as frames; the code lines between them are identifiers.
    let is_frame = |l: &str| is_frame_line(l);
    for (_, body) in &f.code_blocks {
        for line in body.lines().filter(|l| !is_frame(l)) {
            collect_identifiers(line, &mut idents);
        }
    }
    // Identifiers the prose writes in code style even without backticks: snake_case,
    // camelCase and dotted names.
    for w in prose_words(&prose).split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')) {
        let w = w.trim_matches('.');
        if w.len() > 2 && (w.contains('_') || w.contains('.') || has_inner_upper(w)) && !w.contains("..") {
            collect_identifiers(w, &mut idents);
        }
    }
    f.identifiers = rank_identifiers(idents);
    for w in text.split(|c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'' | '(' | ')' | ',' | '[' | ']')) {
        let w = w.trim_end_matches([':', '.', ';']);
        if let Some((_, ext)) = w.rsplit_once('.') {
            if SOURCE_EXTS.contains(&ext) && w.len() > ext.len() + 1 && !f.paths.contains(&w.to_string()) {
                f.paths.push(w.to_string());
            }
        }
    }
    f.prose = prose;
    f
}

/// A line of a stack trace: a frame in any of the formats `read` knows.
pub fn is_frame_line(l: &str) -> bool {
    python_frame(l).is_some() || java_frame(l).is_some() || js_frame(l).is_some() || ipython_frame(l, &[]).is_some()
}

/// The words BM25 should read: the title and the prose, without frame lines and without
/// tokens that are paths (`.../site-packages/django/core/x.py` says where the reporter's
/// copy is installed, not what the issue is about; the frames and named paths count on
/// their own), then the exceptions.
pub fn keyword_text(f: &IssueFacts) -> String {
    let mut q = f.title.clone();
    let words = prose_words(&f.prose);
    let mut end = words.len().min(1500);
    while !words.is_char_boundary(end) {
        end -= 1;
    }
    q.push(' ');
    q.push_str(&words[..end]);
    for e in &f.exceptions {
        q.push(' ');
        q.push_str(&e.kind);
        q.push(' ');
        q.push_str(&e.message);
    }
    q
}

/// The whole issue's words, code blocks included (a command or an output names what
/// it is about as much as the prose), without frame lines and path tokens: the query
/// for BM25 over whole files. In the order written: the search keeps a query's first
/// distinct words ([`crate::search::MAX_QUERY_WORDS`]), and code blocks put after the
/// prose were cut from every issue with that much prose (flask-5063's `$ flask routes`).
pub fn file_keyword_text(f: &IssueFacts) -> String {
    let mut q = f.title.clone();
    q.push(' ');
    q.push_str(&f.words);
    for e in &f.exceptions {
        q.push(' ');
        q.push_str(&e.kind);
        q.push(' ');
        q.push_str(&e.message);
    }
    q
}

/// The prose without frame lines and without path tokens.
fn prose_words(prose: &str) -> String {
    let mut out = String::new();
    for line in prose.lines() {
        if is_frame_line(line) || line.trim_start().starts_with("Traceback (most recent call last)") {
            continue;
        }
        for w in line.split_whitespace() {
            if w.contains('/') || w.contains('\\') || w.starts_with("file:") {
                continue;
            }
            out.push_str(w);
            out.push(' ');
        }
        out.push('\n');
    }
    out
}

fn has_inner_upper(w: &str) -> bool {
    let mut chars = w.chars();
    chars.next();
    chars.any(|c| c.is_uppercase()) && w.chars().any(|c| c.is_lowercase())
}

/// A Markdown fence line (its start trimmed): ``` or ~~~, with or without a language.
fn is_fence(t: &str) -> bool {
    t.starts_with("```") || t.starts_with("~~~")
}

/// Split Markdown into prose and fenced code blocks.
fn split_code_blocks(text: &str) -> (String, Vec<(String, String)>) {
    let mut prose = String::new();
    let mut blocks = Vec::new();
    let mut in_block: Option<(String, String)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if is_fence(t) {
            match in_block.take() {
                Some(b) => blocks.push(b),
                None => in_block = Some((t.trim_start_matches(['`', '~']).trim().to_string(), String::new())),
            }
            continue;
        }
        match &mut in_block {
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    if let Some(b) = in_block {
        blocks.push(b);
    }
    (prose, blocks)
}

fn inline_code(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(i) = rest.find('`') {
        let after = &rest[i + 1..];
        match after.find('`') {
            Some(j) => {
                out.push(after[..j].to_string());
                rest = &after[j + 1..];
            }
            None => break,
        }
    }
    out
}

const KEYWORDS: &[&str] = &[
    "def",
    "class",
    "return",
    "import",
    "from",
    "self",
    "None",
    "True",
    "False",
    "and",
    "or",
    "not",
    "in",
    "is",
    "if",
    "else",
    "elif",
    "for",
    "while",
    "with",
    "as",
    "try",
    "except",
    "raise",
    "assert",
    "lambda",
    "pass",
    "print",
    "new",
    "this",
    "const",
    "let",
    "var",
    "function",
    "public",
    "private",
    "static",
    "void",
    "int",
    "long",
    "String",
    "null",
    "true",
    "false",
    "await",
    "async",
    "yield",
    "Traceback",
    "File",
    "line",
    "most",
    "recent",
    "call",
    "last",
];

/// Identifiers in code: dotted paths (`a.b.c`) and their last two segments, and names.
fn collect_identifiers(code: &str, out: &mut Vec<String>) {
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        let t = cur.trim_matches('.').to_string();
        cur.clear();
        if t.is_empty() || t.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            return;
        }
        let segs: Vec<&str> = t.split('.').filter(|s| !s.is_empty()).collect();
        if segs.len() > 1 {
            out.push(segs[segs.len() - 2..].join("."));
        }
        // Of a dotted path only the last name is a name: the segments before it are
        // packages and modules (`django.db.models.F` names `F`, not a thing called
        // `django`), or a receiver whose own name says little.
        if let Some(s) = segs.last() {
            if s.len() > 1 && !KEYWORDS.contains(s) {
                out.push(s.to_string());
            }
        }
    };
    for c in code.chars() {
        if c.is_alphanumeric() || c == '_' || c == '.' || c == '$' {
            cur.push(c);
        } else {
            flush(&mut cur, out);
        }
    }
    flush(&mut cur, out);
}

/// Each identifier once; dotted ones first, then by how often they occur.
fn rank_identifiers(all: Vec<String>) -> Vec<String> {
    let mut counts: Vec<(String, usize, usize)> = Vec::new();
    for (i, id) in all.into_iter().enumerate() {
        match counts.iter_mut().find(|(x, _, _)| *x == id) {
            Some(e) => e.1 += 1,
            None => counts.push((id, 1, i)),
        }
    }
    counts.sort_by(|a, b| {
        let (da, db) = (a.0.contains('.'), b.0.contains('.'));
        db.cmp(&da).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2))
    });
    counts.into_iter().map(|(id, _, _)| id).take(60).collect()
}

/// `  File "/x/y.py", line 12, in f`
fn python_frame(line: &str) -> Option<Frame> {
    let t = line.trim();
    let rest = t.strip_prefix("File \"")?;
    let (path, rest) = rest.split_once('"')?;
    let rest = rest.trim_start_matches(',').trim().strip_prefix("line ")?;
    let (num, rest) = match rest.split_once(',') {
        Some((n, r)) => (n, r),
        None => (rest, ""),
    };
    let function = rest.trim().strip_prefix("in ").unwrap_or("").trim().to_string();
    Some(Frame { path: path.to_string(), line: num.trim().parse().ok()?, function, class: String::new() })
}

/// IPython and Jupyter frames, which print the path and the function on one line and
/// mark the line with an arrow below it:
/// `~/x/site-packages/pkg/mod.py in func(a, b)` (with `-> 12     code` a few lines on),
/// `[c:\x\pkg\mod.py](file:///c:/x/pkg/mod.py) in func(a)`, and IPython 8's
/// `File ~/x/pkg/mod.py:12, in func(a)`.
fn ipython_frame(line: &str, after: &[&str]) -> Option<Frame> {
    let t = line.trim();
    if let Some(rest) = t.strip_prefix("File ") {
        // IPython 8: `File PATH:LINE, in FUNC(...)`.
        let (loc, func) = rest.split_once(", in ")?;
        let (path, num) = loc.rsplit_once(':')?;
        if !is_source_path(path) {
            return None;
        }
        let function = func.split('(').next().unwrap_or("").trim().to_string();
        return Some(Frame { path: path.to_string(), line: num.trim().parse().ok()?, function, class: String::new() });
    }
    let (loc, func) = t.rsplit_once(" in ")?;
    let path = match loc.strip_prefix('[') {
        Some(inner) => inner.split_once("](").map(|(p, _)| p)?,
        None => loc,
    };
    let path = path.trim();
    if !is_source_path(path) || path.contains(' ') {
        return None;
    }
    let function = func.split('(').next().unwrap_or("").trim();
    if function.is_empty() || !function.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '<' || c == '>') {
        return None;
    }
    // The arrow line: `-> 2144         grid.map_diag(...)`, before the next frame.
    let num = after
        .iter()
        .take(20)
        .take_while(|l| !(l.contains(".py in ") || l.contains(".py](")))
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("->")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<u32>().ok())
        })
        .unwrap_or(0);
    Some(Frame { path: path.to_string(), line: num, function: function.to_string(), class: String::new() })
}

fn is_source_path(p: &str) -> bool {
    (p.contains('/') || p.contains('\\')) && p.rsplit_once('.').is_some_and(|(_, e)| e == "py" || e == "pyx")
}

/// `  at com.acme.Foo.bar(Foo.java:12)`
fn java_frame(line: &str) -> Option<Frame> {
    let t = line.trim().strip_prefix("at ")?;
    let (qual, rest) = t.split_once('(')?;
    let loc = rest.strip_suffix(')').unwrap_or(rest);
    let (file, num) = loc.rsplit_once(':')?;
    if !file.ends_with(".java") {
        return None;
    }
    let (class, function) = qual.rsplit_once('.')?;
    Some(Frame {
        path: file.to_string(),
        line: num.trim().parse().ok()?,
        function: function.to_string(),
        class: class.to_string(),
    })
}

/// `  at fn (src/a.ts:12:5)`, `  at src/a.js:12:5`, `  at Object.<anonymous> (file:///x/a.mjs:3:9)`
fn js_frame(line: &str) -> Option<Frame> {
    let t = line.trim().strip_prefix("at ")?;
    let (function, loc) = match t.rsplit_once(" (") {
        Some((f, l)) => (f.trim().to_string(), l.trim_end_matches(')')),
        None => (String::new(), t),
    };
    let loc = loc.trim_start_matches("file://");
    let mut parts = loc.rsplitn(3, ':');
    let _col = parts.next()?;
    let num = parts.next()?;
    let path = parts.next()?;
    let ext = path.rsplit_once('.')?.1;
    if !SOURCE_EXTS.contains(&ext) || ext == "java" {
        return None;
    }
    let function = function.rsplit('.').next().unwrap_or("").to_string();
    Some(Frame { path: path.to_string(), line: num.parse().ok()?, function, class: String::new() })
}

/// `KeyError: 'x'`, `ValueError`, `java.lang.IllegalStateException: msg`,
/// `Exception in thread "main" a.b.FooException: msg`, `TypeError: x is not a function`.
fn exception_line(line: &str) -> Option<Exception> {
    let mut t = line.trim();
    // pytest's report: `E   FileNotFoundError: [Errno 2] ...`.
    if let Some(rest) = t.strip_prefix("E ") {
        t = rest.trim_start();
    }
    if let Some(i) = t.find("Exception in thread") {
        let rest = &t[i..];
        let after = rest.split_once("\" ")?.1;
        t = after;
    }
    t = t.trim_start_matches("Caused by: ").trim_start_matches("Uncaught ");
    let (kind, message) = match t.split_once(": ") {
        Some((k, m)) => (k, m.trim()),
        None => (t, ""),
    };
    let last = kind.rsplit('.').next().unwrap_or(kind);
    // A module's own lowercase class, qualified: `re.error`, `socket.error`.
    let module_error = last == "error" && kind.len() > "error".len() && kind.split('.').all(|p| !p.is_empty());
    let ok = !kind.contains(' ')
        && (module_error
            || last.chars().next().is_some_and(|c| c.is_uppercase())
                && (last.ends_with("Error")
                    || last.ends_with("Exception")
                    || last.ends_with("Warning")
                    || last == "AssertionError"))
        && kind.chars().all(|c| c.is_alphanumeric() || c == '.' || c == '_' || c == '$');
    if !ok {
        return None;
    }
    Some(Exception { kind: kind.to_string(), message: message.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_query_keeps_a_code_block_where_the_issue_puts_it() {
        // flask-5063's shape: prose with more distinct words than a query searches, and a
        // command in a code block in the middle. Appended after the prose, the block's
        // words were past the cut.
        let prose: String = (0..80).map(|i| format!("word{i} ")).collect();
        let issue = format!("Routes by subdomain\n\nWhen checking:\n\n```shell\n$ flask routes\n```\n\n{prose}\n");
        let (words, cut) = crate::search::query_words(&file_keyword_text(&read(&issue)));
        assert!(cut.is_some(), "the query is over the bound, as in the real issue");
        assert!(words.iter().any(|w| w == "flask"), "{words:?}");
        assert!(!words.iter().any(|w| w == "word79"), "{words:?}");
        // The fence's language tag is not one of the issue's words.
        assert!(!words.iter().any(|w| w == "shell"), "{words:?}");
    }

    #[test]
    fn a_qualified_lowercase_error_class_is_an_exception() {
        // pylint-dev__pylint-7228's last traceback line.
        let e = exception_line("re.error: bad escape \\p at position 1").unwrap();
        assert_eq!((e.kind.as_str(), e.message.as_str()), ("re.error", "bad escape \\p at position 1"));
        assert!(exception_line("error: something").is_none());
        assert!(exception_line("terror: x").is_none());
    }

    #[test]
    fn reads_a_python_traceback() {
        let f = read(
            "# Crash in `Order.total`\n\nTraceback (most recent call last):\n  File \"/home/u/shop/cli.py\", line 23, in <module>\n    main()\n  File \"/home/u/shop/core/pricing.py\", line 19, in load_rate\n    return rates[kind]\nKeyError: 'zero'\n",
        );
        assert_eq!(f.frames.len(), 2);
        assert_eq!(
            f.frames[1],
            Frame {
                path: "/home/u/shop/core/pricing.py".into(),
                line: 19,
                function: "load_rate".into(),
                class: String::new()
            }
        );
        assert!(f.innermost_last);
        assert_eq!(f.exceptions, vec![Exception { kind: "KeyError".into(), message: "'zero'".into() }]);
        assert_eq!(f.identifiers[0], "Order.total");
        assert!(f.paths.contains(&"/home/u/shop/core/pricing.py".to_string()));
    }

    #[test]
    fn reads_java_and_js_stacks() {
        let f = read("Exception in thread \"main\" java.lang.IllegalStateException: overdrawn\n\tat com.acme.bank.model.Account.withdraw(Account.java:42)\n\tat com.acme.App.main(App.java:7)\n");
        assert_eq!(f.exceptions[0].kind, "java.lang.IllegalStateException");
        assert_eq!(f.frames[0].class, "com.acme.bank.model.Account");
        assert_eq!(f.frames[0].line, 42);
        assert!(!f.innermost_last);
        let f = read("TypeError: x.map is not a function\n    at Tracker.report (/app/src/services/tracker.ts:48:12)\n    at /app/test/a.test.ts:9:3\n");
        assert_eq!(f.frames[0].function, "report");
        assert_eq!(f.frames[1].path, "/app/test/a.test.ts");
        assert_eq!(f.exceptions[0].message, "x.map is not a function");
    }
}
