//! Command-line retrieval: `ls`, `find` (glob), `grep` (regex, ripgrep's crates),
//! `read_file` (line ranges). All honour .gitignore, never leave the repository (a
//! symlink pointing out is skipped) and never show `.git` or `.reproagent`.

use std::path::{Path, PathBuf};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{page, Page, ToolContext, ToolError, TypedTool};

fn dot() -> String {
    ".".into()
}

/// The one walk ([`crate::confine::Walk`]) under `dir`: honours .gitignore, follows a
/// symlink only while it stays inside the root, and reports the ones it skipped.
fn walker(root: &Path, dir: &Path, hidden: bool, max_depth: Option<usize>) -> crate::confine::Walk {
    let rule = crate::confine::WalkRule { gitignore: true, skip_hidden: !hidden, follow_links: true, max_depth };
    crate::confine::Walk::new(root, dir, rule, |_, _| true)
}

/// Is this walk entry a file we may read: a regular file (a symlink the walk followed
/// resolves inside the root by the walk's rule)?
fn readable_file(e: &ignore::DirEntry) -> Option<PathBuf> {
    e.file_type().is_some_and(|t| t.is_file()).then(|| e.path().to_path_buf())
}

// ---------------------------------------------------------------- ls

pub struct Ls;

/// List a directory of the repository (honours .gitignore).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LsArgs {
    /// Directory relative to the repository root.
    #[serde(default = "dot")]
    pub path: String,
    /// How deep to list: 1 is the directory's own entries (at most 4).
    #[serde(default = "one")]
    pub depth: usize,
    #[serde(default)]
    pub offset: usize,
    /// At most this many entries (default 200, at most 1000).
    #[serde(default = "ls_limit")]
    pub limit: usize,
}

fn one() -> usize {
    1
}
fn ls_limit() -> usize {
    200
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LsEntry {
    pub path: String,
    /// `dir`, `file` or `symlink`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct LsOutput {
    pub path: String,
    pub entries: Vec<LsEntry>,
    /// Symlinks left out: one leading out of the repository, or dangling.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<crate::confine::Skipped>,
    #[serde(flatten)]
    pub page: Page,
}

impl TypedTool for Ls {
    const NAME: &'static str = "ls";
    const DESCRIPTION: &'static str = "List a directory of the repository, honouring .gitignore: entries with their kind (dir, file, symlink) and size. `depth` lists subdirectories too. Bounded: 200 entries by default; the output says how to get the rest.";
    type Args = LsArgs;
    type Output = LsOutput;

    fn run(&self, ctx: &ToolContext, a: LsArgs) -> Result<LsOutput, ToolError> {
        let dir = ctx.resolve_path(&a.path)?;
        if !dir.is_dir() {
            return Err(ToolError::Other(format!("'{}' is not a directory", a.path)));
        }
        let mut entries = Vec::new();
        let mut walk = walker(ctx.root(), &dir, true, Some(a.depth.clamp(1, 4)));
        for e in walk.by_ref() {
            if e.depth() == 0 {
                continue;
            }
            let Some(t) = e.file_type() else { continue };
            let kind = if e.path_is_symlink() {
                "symlink"
            } else if t.is_dir() {
                "dir"
            } else {
                "file"
            };
            let bytes = if kind == "file" { e.metadata().ok().map(|m| m.len()) } else { None };
            entries.push(LsEntry { path: ctx.rel(e.path()), kind, bytes });
        }
        let (entries, page) = page(entries, a.offset, a.limit.clamp(1, 1000), "entries");
        Ok(LsOutput { path: ctx.rel(&dir), entries, skipped: walk.skipped(), page })
    }
}

// ---------------------------------------------------------------- find

pub struct Find;

/// Find files by glob (honours .gitignore).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindArgs {
    /// A glob over paths relative to the repository root, e.g. `**/test_*.py`, `*.ts`
    /// (`*` also crosses `/`), `src/{a,b}/*.java`.
    pub pattern: String,
    /// Only under this directory.
    #[serde(default = "dot")]
    pub path: String,
    #[serde(default)]
    pub offset: usize,
    /// At most this many paths (default 100, at most 1000).
    #[serde(default = "find_limit")]
    pub limit: usize,
}

fn find_limit() -> usize {
    100
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct FindOutput {
    pub pattern: String,
    pub files: Vec<String>,
    /// Symlinks left out: one leading out of the repository, or dangling.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<crate::confine::Skipped>,
    #[serde(flatten)]
    pub page: Page,
}

impl TypedTool for Find {
    const NAME: &'static str = "find";
    const DESCRIPTION: &'static str = "Find files whose repository-relative path matches a glob (`**/test_*.py`, `*.ts`, `src/{a,b}/*.java`), honouring .gitignore. Bounded: 100 paths by default; the output says how to get the rest.";
    type Args = FindArgs;
    type Output = FindOutput;

    fn run(&self, ctx: &ToolContext, a: FindArgs) -> Result<FindOutput, ToolError> {
        let dir = ctx.resolve_path(&a.path)?;
        let glob = globset::GlobBuilder::new(&a.pattern)
            .literal_separator(false)
            .build()
            .map_err(|e| ToolError::BadPattern {
                kind: "glob",
                pattern: a.pattern.clone(),
                message: e.kind().to_string(),
            })?
            .compile_matcher();
        let mut files = Vec::new();
        let mut walk = walker(ctx.root(), &dir, false, None);
        for e in walk.by_ref() {
            if readable_file(&e).is_none() {
                continue;
            }
            let rel = ctx.rel(e.path());
            let name = e.file_name().to_string_lossy();
            if glob.is_match(&rel) || (!a.pattern.contains('/') && glob.is_match(name.as_ref())) {
                files.push(rel);
            }
        }
        let (files, page) = page(files, a.offset, a.limit.clamp(1, 1000), "files");
        Ok(FindOutput { pattern: a.pattern, files, skipped: walk.skipped(), page })
    }
}

// ---------------------------------------------------------------- grep

pub struct Grep;

/// Search file contents with a regular expression (ripgrep's engine; honours .gitignore).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// A Rust regular expression, e.g. `def apply_\w+`, `raise \w+Error`.
    pub pattern: String,
    /// A file or directory to search, relative to the repository root.
    #[serde(default = "dot")]
    pub path: String,
    /// Only files whose path matches this glob, e.g. `*.py`.
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub case_insensitive: bool,
    /// Lines of context before and after each match (at most 5).
    #[serde(default)]
    pub context: usize,
    #[serde(default)]
    pub offset: usize,
    /// At most this many matches (default 50, at most 500).
    #[serde(default = "grep_limit")]
    pub limit: usize,
}

fn grep_limit() -> usize {
    50
}

/// Counting stops here; the total then reads "at least".
const GREP_COUNT_CAP: usize = 10_000;
/// A matched line longer than this is cut.
const LINE_CHARS: usize = 300;

#[derive(Debug, Serialize, JsonSchema)]
pub struct GrepMatch {
    pub path: String,
    pub line: u64,
    pub text: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct GrepOutput {
    pub pattern: String,
    pub matches: Vec<GrepMatch>,
    pub files_with_matches: usize,
    /// Symlinks left out (one leading out of the repository, or dangling), and files
    /// refused by type.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<crate::confine::Skipped>,
    #[serde(flatten)]
    pub page: Page,
}

fn cut(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim_end_matches(['\n', '\r']);
    if s.chars().count() > LINE_CHARS {
        let mut t: String = s.chars().take(LINE_CHARS).collect();
        t.push_str(" [line cut]");
        t
    } else {
        s.to_string()
    }
}

struct Collect<'a> {
    path: String,
    out: &'a mut Vec<GrepMatch>,
    count: &'a mut usize,
    keep_from: usize,
    keep_to: usize,
    before: Vec<String>,
    last_kept: bool,
    any: bool,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &grep_searcher::Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        let n = *self.count;
        *self.count += 1;
        self.any = true;
        let before = std::mem::take(&mut self.before);
        self.last_kept = n >= self.keep_from && n < self.keep_to;
        if self.last_kept {
            self.out.push(GrepMatch {
                path: self.path.clone(),
                line: m.line_number().unwrap_or(0),
                text: cut(m.bytes()),
                before,
                after: Vec::new(),
            });
        }
        Ok(*self.count < GREP_COUNT_CAP)
    }

    fn context(&mut self, _s: &grep_searcher::Searcher, c: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        let text = format!("{}: {}", c.line_number().unwrap_or(0), cut(c.bytes()));
        match c.kind() {
            SinkContextKind::Before => self.before.push(text),
            SinkContextKind::After if self.last_kept => {
                if let Some(m) = self.out.last_mut() {
                    m.after.push(text);
                }
            }
            _ => {}
        }
        Ok(true)
    }

    fn context_break(&mut self, _s: &grep_searcher::Searcher) -> Result<bool, std::io::Error> {
        self.before.clear();
        Ok(true)
    }
}

impl TypedTool for Grep {
    const NAME: &'static str = "grep";
    const DESCRIPTION: &'static str = "Search file contents with a regular expression (ripgrep's engine), honouring .gitignore and skipping binary files. Optional glob filter, case-insensitivity and context lines. Bounded: 50 matches by default, lines cut at 300 characters; the output gives the total and how to get the rest.";
    type Args = GrepArgs;
    type Output = GrepOutput;

    fn run(&self, ctx: &ToolContext, a: GrepArgs) -> Result<GrepOutput, ToolError> {
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(a.case_insensitive)
            .build(&a.pattern)
            .map_err(|e| ToolError::BadPattern { kind: "regex", pattern: a.pattern.clone(), message: e.to_string() })?;
        let glob = match &a.glob {
            Some(g) => Some(
                globset::Glob::new(g)
                    .map_err(|e| ToolError::BadPattern {
                        kind: "glob",
                        pattern: g.clone(),
                        message: e.kind().to_string(),
                    })?
                    .compile_matcher(),
            ),
            None => None,
        };
        let start = ctx.resolve_path(&a.path)?;
        let ctx_lines = a.context.min(5);
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::quit(0))
            .before_context(ctx_lines)
            .after_context(ctx_lines)
            .build();
        let limit = a.limit.clamp(1, 500);
        let mut out = Vec::new();
        let mut count = 0usize;
        let mut files_with_matches = 0usize;
        let mut walk = walker(ctx.root(), &start, false, None);
        let mut refused = Vec::new();
        for e in walk.by_ref() {
            if crate::cancel::requested() {
                break;
            }
            let Some(file) = readable_file(&e) else { continue };
            let rel = ctx.rel(&file);
            if let Some(g) = &glob {
                let name = e.file_name().to_string_lossy();
                if !g.is_match(&rel) && !g.is_match(name.as_ref()) {
                    continue;
                }
            }
            let mut sink = Collect {
                path: rel,
                out: &mut out,
                count: &mut count,
                keep_from: a.offset,
                keep_to: a.offset + limit,
                before: Vec::new(),
                last_kept: false,
                any: false,
            };
            // Opened through the checked reader (a file swapped for a FIFO or a link out
            // since the walk is refused); an unreadable file is skipped, as ripgrep does.
            match crate::confine::open_walked(ctx.root(), &e) {
                Ok(f) => {
                    let _ = searcher.search_file(&matcher, &f, &mut sink);
                }
                Err(why @ (crate::confine::Refused::Outside { .. } | crate::confine::Refused::Special(_))) => {
                    refused.push(crate::confine::Skipped { path: sink.path.clone(), reason: why.to_string() });
                }
                Err(_) => {}
            }
            if sink.any {
                files_with_matches += 1;
            }
            if count >= GREP_COUNT_CAP {
                break;
            }
        }
        let shown = out.len();
        let truncated = a.offset + shown < count || count >= GREP_COUNT_CAP;
        let total_text = if count >= GREP_COUNT_CAP { format!("at least {count}") } else { count.to_string() };
        let note = truncated.then(|| {
            format!(
                "showing matches {}-{} of {total_text}; pass offset={} for more, or narrow with path or glob",
                a.offset + 1,
                a.offset + shown,
                a.offset + shown
            )
        });
        Ok(GrepOutput {
            pattern: a.pattern,
            matches: out,
            files_with_matches,
            skipped: {
                let mut s = walk.skipped();
                s.append(&mut refused);
                s
            },
            page: Page { total: count, offset: a.offset, shown, truncated, note },
        })
    }
}

// ---------------------------------------------------------------- read_file

pub struct ReadFile;

/// Read lines of a text file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File relative to the repository root.
    pub path: String,
    /// First line to show (1-based).
    #[serde(default = "one")]
    pub start_line: usize,
    /// Last line to show (inclusive); default: start_line + 199. At most 500 lines a call.
    #[serde(default)]
    pub end_line: Option<usize>,
}

/// Lines per call, and bytes per call.
const READ_MAX_LINES: usize = 500;
const READ_DEFAULT_LINES: usize = 200;
const READ_MAX_BYTES: usize = 50_000;
const READ_LINE_CHARS: usize = 2_000;

#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadFileOutput {
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    pub total_lines: usize,
    /// The lines, each prefixed with its number: `  12 | text`.
    pub content: String,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl TypedTool for ReadFile {
    const NAME: &'static str = "read_file";
    const DESCRIPTION: &'static str = "Read a text file of the repository by line range (1-based, inclusive), each line prefixed with its number. Bounded: 200 lines by default, at most 500 lines or 50 kB a call; the output says which line to start from for more.";
    type Args = ReadFileArgs;
    type Output = ReadFileOutput;

    fn run(&self, ctx: &ToolContext, a: ReadFileArgs) -> Result<ReadFileOutput, ToolError> {
        let file = ctx.resolve_path(&a.path)?;
        if file.is_dir() {
            return Err(ToolError::Other(format!("'{}' is a directory; use ls", a.path)));
        }
        let bytes = crate::confine::read_regular(ctx.root(), &file).map_err(|e| match e {
            crate::confine::Refused::Outside { .. } | crate::confine::Refused::Dangling => {
                ToolError::OutsideRepo(a.path.clone())
            }
            crate::confine::Refused::Special(k) => {
                ToolError::NotContent { path: a.path.clone(), why: format!("a {k}, not a regular file") }
            }
            other => ToolError::Io(format!("{}: {other}", a.path)),
        })?;
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return Err(ToolError::Binary(a.path));
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len();
        let start = a.start_line.max(1);
        if start > total.max(1) {
            return Err(ToolError::Other(format!(
                "'{}' has {total} lines; start_line {start} is past the end",
                a.path
            )));
        }
        let wanted_end = a.end_line.unwrap_or(start + READ_DEFAULT_LINES - 1).max(start);
        let cap_end = (start + READ_MAX_LINES - 1).min(total);
        let mut end = wanted_end.min(cap_end);
        let mut content = String::new();
        let width = total.to_string().len();
        for (i, line) in lines.iter().enumerate().take(end).skip(start - 1) {
            let line = if line.chars().count() > READ_LINE_CHARS {
                format!("{} [line cut]", line.chars().take(READ_LINE_CHARS).collect::<String>())
            } else {
                line.to_string()
            };
            let row = format!("{:>width$} | {line}\n", i + 1);
            if content.len() + row.len() > READ_MAX_BYTES && i + 1 > start {
                end = i;
                break;
            }
            content.push_str(&row);
        }
        let end = end.min(total);
        // Truncated: the caller asked for no end (the whole rest) or the bounds cut the range.
        let truncated = end < total && (a.end_line.is_none() || end < wanted_end);
        let note =
            truncated.then(|| format!("showing lines {start}-{end} of {total}; pass start_line={} for more", end + 1));
        Ok(ReadFileOutput {
            path: ctx.rel(&file),
            start_line: start,
            end_line: end,
            total_lines: total,
            content,
            truncated,
            note,
        })
    }
}
