//! Extraction: one file in, facts plus diagnostics out.
//!
//! A file is parsed with tree-sitter and the language's tags query
//! (`queries/<lang>/tags.scm`); the captures become entities, call sites, imports,
//! bases and (Java) declared variable types. Nothing here knows Cozo, tantivy or a model,
//! and nothing here looks at another file: name resolution happens in `resolve`.
//! A file that cannot be read or parsed yields a [`Skip`] with the reason, never an error
//! that stops the run.

mod java;
mod python;
mod typescript;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use streaming_iterator::StreamingIterator;
use tree_sitter::{Node, Parser, Query, QueryCursor};

use crate::lang::{is_test_path, Lang};

/// The kind of an entity, as stored in the `entity` relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Module,
    Class,
    Interface,
    Enum,
    Function,
    Method,
    Field,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Module => "module",
            Kind::Class => "class",
            Kind::Interface => "interface",
            Kind::Enum => "enum",
            Kind::Function => "function",
            Kind::Method => "method",
            Kind::Field => "field",
        }
    }

    pub fn is_type(self) -> bool {
        matches!(self, Kind::Class | Kind::Interface | Kind::Enum)
    }

    fn from_capture(s: &str) -> Option<Kind> {
        Some(match s {
            "class" => Kind::Class,
            "interface" => Kind::Interface,
            "enum" => Kind::Enum,
            "function" => Kind::Function,
            "method" => Kind::Method,
            "field" => Kind::Field,
            _ => return None,
        })
    }
}

/// An entity defined in a file. `parent` indexes into [`FileFacts::entities`]; the module
/// entity is always index 0 and has no parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entity {
    pub id: String,
    pub kind: Kind,
    pub name: String,
    pub qname: String,
    pub parent: Option<u32>,
    pub start_line: u32,
    pub end_line: u32,
    pub signature: String,
    pub doc: String,
    /// Bases, superclasses and interfaces as written, generic arguments removed.
    pub bases: Vec<String>,
    /// Java: parameter types as written; the arity resolution compares against.
    pub params: Vec<String>,
    /// Java: the last parameter is varargs.
    pub varargs: bool,
    pub is_test: bool,
}

/// A call as written. `owner` is the entity the call belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub owner: u32,
    pub line: u32,
    pub name: String,
    /// The receiver as written (`self`, `os.path`, `this`, `super()`), empty for a bare call.
    pub receiver: String,
    pub args: u32,
    /// `new C(...)` (TS, Java).
    pub new: bool,
}

/// How an import statement binds names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImportKind {
    /// `import a.b` / `import a.b as c` (Python), `import a.b.C;` (Java).
    Module,
    /// `from m import n` (Python), `import {n} from 'm'` (TS), `import a.b.C;` (Java: n = C).
    Name,
    /// `from m import *`, `import a.b.*;`, `export * from 'm'`.
    Star,
    /// `import d from 'm'`.
    Default,
    /// `import * as ns from 'm'`.
    Namespace,
    /// `export {a as b} from 'm'`.
    ReExport,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Import {
    pub line: u32,
    /// The module as written: Python with its leading dots, a TS specifier, a Java package.
    pub module: String,
    /// The imported name: empty for a whole module, `*` for star imports, `default`.
    pub name: String,
    /// The local name when it differs from `name`.
    pub alias: String,
    pub kind: ImportKind,
    /// Java `import static`.
    pub is_static: bool,
}

impl Import {
    /// The name this import binds in the importing file, if any.
    pub fn local_name(&self) -> Option<&str> {
        if !self.alias.is_empty() {
            return Some(&self.alias);
        }
        match self.kind {
            ImportKind::Name | ImportKind::ReExport => Some(&self.name),
            ImportKind::Module => self.module.split('.').next(),
            _ => None,
        }
    }
}

/// A declared variable type (Java), or a name a scope binds (Python: `ty` says what it
/// is known to hold, see `extract::python::bindings`), scoped to the entity around it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Var {
    pub owner: u32,
    pub name: String,
    pub ty: String,
}

/// Everything one file says, before any other file is looked at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileFacts {
    pub path: String,
    pub lang: Lang,
    pub hash: String,
    pub lines: u32,
    pub is_test: bool,
    /// Java package (empty elsewhere).
    pub package: String,
    pub entities: Vec<Entity>,
    pub calls: Vec<Call>,
    pub imports: Vec<Import>,
    pub vars: Vec<Var>,
    /// TS: the name of the entity (or binding) exported as `default`.
    pub default_export: String,
    /// Error and missing nodes in the tree: the partial tree was kept.
    pub syntax_errors: u32,
    /// Why the file's facts are incomplete (the entity budget was hit); empty when whole.
    pub truncated: String,
}

/// Why a file was not indexed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skip {
    pub path: String,
    pub reason: String,
}

/// Per-file budgets.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_parse_time: Duration,
    /// Entities kept per file (the module included); past it the file keeps the first ones
    /// in source order and says so in [`FileFacts::truncated`].
    pub max_entities: usize,
}

/// The default per-file entity budget: TypeScript's checker.ts, the largest hand-written
/// file we know of, has about 6,000 entities.
pub const DEFAULT_MAX_ENTITIES: usize = 50_000;

/// Names an id keeps of its nesting chain: past this many, the outermost
/// [`ID_HEAD`] and the innermost [`ID_TAIL`] names, joined by `...`.
pub const ID_MAX_NAMES: usize = 8;
pub const ID_HEAD: usize = 4;
pub const ID_TAIL: usize = 3;

impl Default for Limits {
    fn default() -> Self {
        // 4 MiB keeps hand-written giants (TypeScript's checker.ts is 2.7 MiB) and leaves out
        // generated bundles.
        Limits {
            max_bytes: 4 * 1024 * 1024,
            max_parse_time: Duration::from_secs(5),
            max_entities: DEFAULT_MAX_ENTITIES,
        }
    }
}

/// The roles of a query's captures, resolved once per compiled query.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Def(Kind),
    Name,
    Value,
    Call,
    New,
    Receiver,
    Arguments,
    Import,
    ExportDefault,
    Package,
    BaseOwner,
    Base,
    VarType,
    VarName,
    Other,
}

/// A compiled query with its capture roles.
pub struct Compiled {
    query: Query,
    roles: Vec<Role>,
    /// The embedded query, not an override (`REPROAGENT_QUERIES`): Python's and Java's are then found
    /// by a walk instead ([`Tags`]).
    builtin: bool,
}

/// The compiled queries of one grammar, built on first use and shared by the worker
/// threads: compiling all four costs about as much as an incremental run's resolution,
/// and most repositories need one or two. Index by [`grammar_slot`].
fn compiled(slot: usize) -> &'static Result<Compiled, String> {
    static ALL: [OnceLock<Result<Compiled, String>>; 4] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
    ALL[slot].get_or_init(|| {
        let dir = std::env::var_os("REPROAGENT_QUERIES").map(std::path::PathBuf::from);
        let (lang, sample) =
            [(Lang::Python, "a.py"), (Lang::TypeScript, "a.ts"), (Lang::TypeScript, "a.tsx"), (Lang::Java, "a.java")]
                [slot];
        compile(lang, sample, dir.as_deref())
    })
}

fn grammar_slot(lang: Lang, path: &str) -> usize {
    match lang {
        Lang::Python => 0,
        Lang::TypeScript => {
            if path.ends_with(".ts") || path.ends_with(".mts") || path.ends_with(".cts") {
                1
            } else {
                2
            }
        }
        Lang::Java => 3,
    }
}

fn compile(lang: Lang, sample: &str, dir: Option<&std::path::Path>) -> Result<Compiled, String> {
    let text = lang.tags_query(dir).map_err(|e| format!("{} query: {e}", lang.name()))?;
    let query = Query::new(&lang.ts_language(sample), &text)
        .map_err(|e| format!("{} query, line {}: {}", lang.name(), e.row + 1, e.message))?;
    let roles = query
        .capture_names()
        .iter()
        .map(|n| match *n {
            "name" => Role::Name,
            "value" => Role::Value,
            "reference.call" => Role::Call,
            "reference.new" => Role::New,
            "receiver" => Role::Receiver,
            "arguments" => Role::Arguments,
            "import" => Role::Import,
            "export.default" => Role::ExportDefault,
            "package" => Role::Package,
            "base.owner" => Role::BaseOwner,
            "base" => Role::Base,
            "var.type" => Role::VarType,
            "var.name" => Role::VarName,
            other => match other.strip_prefix("definition.").and_then(Kind::from_capture) {
                Some(k) => Role::Def(k),
                None => Role::Other,
            },
        })
        .collect();
    let builtin = lang.tags_query(None).is_ok_and(|t| t == text);
    Ok(Compiled { query, roles, builtin })
}

/// Check that every query compiles; the first error, if any. The embedded queries are
/// checked by the unit tests, so only an override (`REPROAGENT_QUERIES`) is compiled here,
/// up front, so that a broken one stops the run before any file is skipped for it.
pub fn check_queries() -> Result<(), String> {
    if !queries_overridden() {
        return Ok(());
    }
    for slot in 0..4 {
        if let Err(e) = compiled(slot) {
            return Err(e.clone());
        }
    }
    Ok(())
}

/// Whether `REPROAGENT_QUERIES` names a directory of queries to use instead of the
/// embedded ones (read once).
fn queries_overridden() -> bool {
    static SET: OnceLock<bool> = OnceLock::new();
    *SET.get_or_init(|| std::env::var_os("REPROAGENT_QUERIES").is_some())
}

/// A tree-sitter parser per worker thread.
pub struct Extractor {
    parser: Parser,
    limits: Limits,
    /// Python by the query too (the walk's reference in tests), not by the walk.
    by_query: bool,
}

impl Extractor {
    pub fn new(limits: Limits) -> Self {
        Extractor { parser: Parser::new(), limits, by_query: false }
    }

    /// Extract from bytes already read. UTF-16 with a byte-order mark is decoded first.
    pub fn extract_bytes(&mut self, rel: &str, lang: Lang, bytes: &[u8], hash: String) -> Result<FileFacts, Skip> {
        let skip = |reason: String| Skip { path: rel.to_string(), reason };
        let src = decode_source(bytes).map_err(skip)?;
        let src: &str = &src;
        let bytes = src.as_bytes();
        // Python and Java with the embedded queries are found by a walk: their query is not
        // compiled (a few milliseconds each: 3% of a one-file incremental run on Django).
        let compiled = if lang != Lang::TypeScript && !self.by_query && !queries_overridden() {
            None
        } else {
            match compiled(grammar_slot(lang, rel)) {
                Ok(c) => Some(c),
                Err(e) => return Err(skip(format!("query does not compile: {e}"))),
            }
        };
        self.parser.set_language(&lang.ts_language(rel)).map_err(|e| skip(format!("grammar: {e}")))?;
        // The budget is this thread's CPU time, so a file is not skipped because a busy
        // machine preempted its parse. The CPU clock is a system call, read only once the
        // wall clock (cheap) says the budget may be spent: CPU time never exceeds wall time.
        let started = Instant::now();
        let cpu_started = thread_cpu_time();
        let budget = self.limits.max_parse_time;
        let mut over_budget = |_: &tree_sitter::ParseState| {
            started.elapsed() > budget
                && match (cpu_started, thread_cpu_time()) {
                    (Some(from), Some(now)) => now.saturating_sub(from) > budget,
                    _ => true,
                }
        };
        let opts = tree_sitter::ParseOptions::new().progress_callback(&mut over_budget);
        let len = bytes.len();
        let tree =
            self.parser.parse_with_options(&mut |i, _| if i < len { &bytes[i..] } else { &[] }, None, Some(opts));
        let Some(tree) = tree else {
            self.parser.reset();
            return Err(skip(format!("parse time budget exceeded: over {} ms (--max-parse-ms)", budget.as_millis())));
        };
        Ok(build_facts(self.by_query, rel, lang, src, hash, &tree, compiled, self.limits.max_entities))
    }
}

/// The CPU time this thread has used; None where the clock cannot be read (the budget then
/// falls back to the wall clock).
fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// A source file's text: UTF-8, or UTF-16 (little or big endian) with its byte-order mark,
/// decoded. Anything else is refused with the reason: binary (a NUL byte in the first 8
/// KiB), not UTF-8, or UTF-16 that does not decode.
pub fn decode_source(bytes: &[u8]) -> Result<std::borrow::Cow<'_, str>, String> {
    let utf16 = match bytes {
        [0xFF, 0xFE, rest @ ..] => Some((rest, false, "UTF-16LE")),
        [0xFE, 0xFF, rest @ ..] => Some((rest, true, "UTF-16BE")),
        _ => None,
    };
    if let Some((rest, big, name)) = utf16 {
        if rest.len() % 2 != 0 {
            return Err(format!("{name} with an odd number of bytes ({})", bytes.len()));
        }
        let units = rest.chunks_exact(2).map(|c| {
            if big {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_le_bytes([c[0], c[1]])
            }
        });
        let text: Result<String, _> = char::decode_utf16(units).collect();
        let text = text
            .map_err(|e| format!("{name} that does not decode: unpaired surrogate {:#06x}", e.unpaired_surrogate()))?;
        if text.contains('\0') {
            return Err(format!("binary: {name} with a NUL character"));
        }
        return Ok(std::borrow::Cow::Owned(text));
    }
    if memchr::memchr(0, &bytes[..bytes.len().min(8192)]).is_some() {
        return Err("binary: NUL byte in the first 8 KiB".into());
    }
    std::str::from_utf8(bytes)
        .map(std::borrow::Cow::Borrowed)
        .map_err(|e| format!("not UTF-8: invalid byte at offset {}", e.valid_up_to()))
}

/// `pkg/sub/mod.py` -> `pkg.sub.mod`; `pkg/__init__.py` -> `pkg`.
pub fn python_module_name(rel: &str) -> String {
    python::module_name(rel)
}

/// The content hash that drives incremental re-indexing.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex()[..32].to_string()
}

/// `child_by_field_name` with the field's id looked up once per thread and grammar:
/// tree-sitter's own lookup compares the name with each of the grammar's field names
/// (`strncmp`), which was 2% of a full build's CPU time on Django.
pub(crate) trait Field<'t> {
    fn field(&self, name: &'static str) -> Option<Node<'t>>;
}

impl<'t> Field<'t> for Node<'t> {
    fn field(&self, name: &'static str) -> Option<Node<'t>> {
        type Ids = (Option<tree_sitter::Language>, rustc_hash::FxHashMap<&'static str, Option<std::num::NonZeroU16>>);
        thread_local! {
            static IDS: std::cell::RefCell<Ids> = std::cell::RefCell::default();
        }
        let lang = self.language();
        let id = IDS.with_borrow_mut(|(of, ids)| {
            if of.as_ref() != Some(&*lang) {
                *of = Some((*lang).clone());
                ids.clear();
            }
            *ids.entry(name).or_insert_with(|| lang.field_id_for_name(name))
        });
        id.and_then(|id| self.child_by_field_id(id.get()))
    }
}

/// Text of a node.
pub(crate) fn text<'a>(node: Node, src: &'a str) -> &'a str {
    &src[node.byte_range()]
}

pub(crate) fn line_of(node: Node) -> u32 {
    node.start_position().row as u32 + 1
}

/// Node kinds by id, for a walk that meets every node of a file: matched by number (a
/// table made once per grammar), not by name (`Node::kind` measures and checks a C string
/// per node). Aliases share a name, so every id of a listed name maps to it.
pub(crate) struct KindTable(Vec<&'static str>);

impl KindTable {
    pub(crate) fn of(root: Node, matched: &[&'static str]) -> KindTable {
        let lang = root.language();
        let ids = (0..lang.node_kind_count() as u16).map(|id| {
            let name = lang.node_kind_for_id(id).unwrap_or("");
            matched.iter().copied().find(|m| *m == name).unwrap_or("")
        });
        KindTable(ids.collect())
    }

    /// The node's kind if it is one of the listed, else `""`.
    pub(crate) fn name(&self, n: Node) -> &'static str {
        self.0.get(n.kind_id() as usize).copied().unwrap_or("")
    }
}

/// What a language's tags query matches in a file: from the query's matches
/// ([`query_tags`]), or found by a walk instead (Python's bindings walk, Java's own) and
/// then put in the matches' order by [`Tags::in_match_order`].
/// `walk_finds_what_the_query_finds` holds each walk to its query.
#[derive(Default)]
pub(crate) struct Tags<'t> {
    defs: Vec<RawDef<'t>>,
    calls: Vec<RawCall<'t>>,
    imports: Vec<Node<'t>>,
    /// (the base's start byte, the type's node id, the base as written)
    bases: Vec<(usize, usize, String)>,
    /// (the type's node, the name's node) of variable types
    vars: Vec<(Node<'t>, Node<'t>)>,
    /// The last package declaration (Java).
    package: Option<Node<'t>>,
    /// The name of the default export (TypeScript).
    default_export: Option<Node<'t>>,
}

impl<'t> Tags<'t> {
    /// A definition whose name is an identifier (as the queries write `name: (identifier)`).
    fn def(&mut self, node: Node<'t>, name: Option<Node<'t>>, kind: Kind, src: &str) {
        if let Some(n) = name.filter(|n| n.kind() == "identifier") {
            self.defs.push(RawDef { node, kind, name: text(n, src).to_string(), value: None });
        }
    }

    fn base(&mut self, owner: Node<'t>, base: Node<'t>, src: &str) {
        self.bases.push((base.start_byte(), owner.id(), strip_generics(text(base, src))));
    }

    /// What was found, in the order the query's matches come in where the facts keep it
    /// (by position: a walk meets nodes in another order; definitions are sorted by
    /// position and nesting later anyway).
    fn in_match_order(mut self) -> Self {
        self.calls.sort_by_key(|c| (c.0.start_byte(), std::cmp::Reverse(c.0.end_byte())));
        self.imports.sort_by_key(|n| n.start_byte());
        self.bases.sort_by_key(|b| b.0);
        self
    }
}

/// A call found by the query: (the call node, its name, its receiver as written, how many
/// arguments, whether it is a `new`, its line).
type RawCall<'t> = (Node<'t>, String, String, u32, bool, u32);

/// A definition found by the query, before ids are given.
struct RawDef<'t> {
    node: Node<'t>,
    kind: Kind,
    name: String,
    value: Option<Node<'t>>,
}

/// An entity's nesting chain, bounded: the outermost [`ID_HEAD`] names, the innermost
/// [`ID_TAIL`] and how many there are in all. Built from the parent's in constant time, so
/// deep nesting costs linear time and space (a chain repeated in every id was quadratic).
#[derive(Clone, Default)]
struct Chain {
    head: Vec<String>,
    tail: std::collections::VecDeque<String>,
    len: usize,
}

impl Chain {
    fn child(&self, name: &str) -> Chain {
        let mut c = self.clone();
        c.len += 1;
        if c.head.len() < ID_HEAD {
            c.head.push(name.to_string());
        } else {
            c.tail.push_back(name.to_string());
            if c.tail.len() > ID_TAIL.max(ID_MAX_NAMES - ID_HEAD) {
                c.tail.pop_front();
            }
        }
        c
    }

    /// `a.b.c`, or `a.b.c.d...x.y.z` past [`ID_MAX_NAMES`] names.
    fn render(&self) -> String {
        let mut out = self.head.join(".");
        let skip = if self.len > ID_MAX_NAMES { self.tail.len().saturating_sub(ID_TAIL) } else { 0 };
        if self.len > ID_MAX_NAMES {
            out.push_str("...");
        } else if !self.tail.is_empty() {
            out.push('.');
        }
        let tail: Vec<&str> = self.tail.iter().skip(skip).map(String::as_str).collect();
        out.push_str(&tail.join("."));
        out
    }
}

/// What the query matches, match by match, into `t` (in the order the matches come).
fn query_tags<'t>(c: &Compiled, root: Node<'t>, src: &str, t: &mut Tags<'t>) {
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(&c.query, root, src.as_bytes());
    while let Some(m) = matches.next() {
        let mut is_default = false;
        let mut def: Option<(Node, Kind)> = None;
        let mut name: Option<Node> = None;
        let mut value = None;
        let mut call: Option<(Node, bool)> = None;
        let mut receiver = None;
        let mut arguments = None;
        let mut base_owner = None;
        let mut base = None;
        let mut var_type = None;
        let mut var_name = None;
        for cap in m.captures {
            let node = cap.node;
            match c.roles[cap.index as usize] {
                Role::Def(k) => def = Some((node, k)),
                Role::Name => name = Some(node),
                Role::Value => value = Some(node),
                Role::Call => call = Some((node, false)),
                Role::New => call = Some((node, true)),
                Role::Receiver => receiver = Some(node),
                Role::Arguments => arguments = Some(node),
                Role::Import => t.imports.push(node),
                Role::ExportDefault => is_default = true,
                Role::Package => t.package = Some(node),
                Role::BaseOwner => base_owner = Some(node),
                Role::Base => base = Some(node),
                Role::VarType => var_type = Some(node),
                Role::VarName => var_name = Some(node),
                Role::Other => {}
            }
        }
        if let (true, Some(n)) = (is_default, name) {
            t.default_export = Some(n);
        } else if let (Some((node, kind)), Some(n)) = (def, name) {
            t.defs.push(RawDef { node, kind, name: text(n, src).to_string(), value });
        } else if let (Some((node, is_new)), Some(n)) = (call, name) {
            let args = arguments.map(|a| count_args(a, src)).unwrap_or(0);
            let recv = receiver.map(|r| receiver_text(r, src)).unwrap_or_default();
            let name_text = if is_new { strip_generics(text(n, src)) } else { text(n, src).to_string() };
            let line = if is_new { line_of(node) } else { line_of(n) };
            t.calls.push((node, name_text, recv, args, is_new, line));
        } else if let (Some(o), Some(b)) = (base_owner, base) {
            t.base(o, b, src);
        } else if let (Some(ty), Some(n)) = (var_type, var_name) {
            t.vars.push((ty, n));
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn build_facts(
    by_query: bool,
    rel: &str,
    lang: Lang,
    src: &str,
    hash: String,
    tree: &tree_sitter::Tree,
    c: Option<&Compiled>,
    max_entities: usize,
) -> FileFacts {
    let root = tree.root_node();
    let desc = lang.descriptor();
    let is_test = is_test_path(&desc.tests, rel);

    // Python's bindings (the vars of the other languages come with their tags).
    let mut raw_vars: Vec<(Node, String, String)> = Vec::new();
    // Python and Java: what the embedded query matches is found by a walk (for Python the
    // one that finds the bindings: one pass over the tree instead of two);
    // `walk_finds_what_the_query_finds` holds each walk to its query, which stays the
    // specification. An overridden query runs.
    // No query (`c` is None): the caller chose the walk, compiling nothing.
    let by_walk = match c {
        None => true,
        Some(c) => lang != Lang::TypeScript && !by_query && c.builtin,
    };
    let mut tags = Tags::default();
    match lang {
        Lang::Python => python::bindings(root, src, &mut raw_vars, by_walk.then_some(&mut tags)),
        Lang::Java if by_walk => java::tags(root, src, &mut tags),
        _ => {}
    }
    match c.filter(|_| !by_walk) {
        Some(c) => query_tags(c, root, src, &mut tags),
        None => tags = tags.in_match_order(),
    }
    let Tags { mut defs, calls: raw_calls, imports: import_nodes, bases, vars, package, default_export } = tags;
    let package = package.map(|p| java::package_name(p, src)).unwrap_or_default();
    let default_export = default_export.map(|n| text(n, src).to_string()).unwrap_or_default();
    // (owner node id, base text)
    let bases: Vec<(usize, String)> = bases.into_iter().map(|(_, owner, b)| (owner, b)).collect();
    raw_vars.extend(vars.into_iter().map(|(ty, n)| (n, text(n, src).to_string(), strip_generics(text(ty, src)))));

    // Order definitions by position, outermost first, so a stack gives nesting.
    defs.sort_by_key(|d| (d.node.start_byte(), std::cmp::Reverse(d.node.end_byte())));
    defs.dedup_by_key(|d| (d.node.start_byte(), d.node.end_byte(), d.node.kind_id()));

    let module_qname = match lang {
        Lang::Python => python::module_name(rel),
        Lang::TypeScript => typescript::module_name(rel),
        Lang::Java => package.clone(),
    };
    let lines = src.lines().count() as u32;
    let mut entities = vec![Entity {
        id: rel.to_string(),
        kind: Kind::Module,
        name: module_short_name(rel),
        qname: module_qname.clone(),
        parent: None,
        start_line: 1,
        end_line: lines.max(1),
        signature: String::new(),
        doc: match lang {
            Lang::Python => python::module_doc(root, src),
            _ => String::new(),
        },
        bases: Vec::new(),
        params: Vec::new(),
        varargs: false,
        is_test: is_test && desc.tests.entity_prefix.is_empty(),
    }];
    // (end_byte, entity index) of the open definitions.
    let mut stack: Vec<(usize, u32)> = Vec::new();
    let mut by_node: HashMap<usize, u32> = HashMap::new();
    let mut seen_ids: HashMap<String, u32> = HashMap::new();
    let mut spans: Vec<(usize, usize)> = vec![(0, src.len())];
    let mut chains: Vec<Chain> = vec![Chain::default()];
    let mut truncated = String::new();
    for d in &defs {
        if entities.len() >= max_entities.max(1) {
            truncated = format!(
                "entity budget hit: kept the first {} of {} entities (--max-entities)",
                entities.len(),
                defs.len() + 1
            );
            break;
        }
        while let Some(&(end, _)) = stack.last() {
            if d.node.start_byte() >= end {
                stack.pop();
            } else {
                break;
            }
        }
        let parent = stack.last().map(|&(_, i)| i).unwrap_or(0);
        let parent_kind = entities[parent as usize].kind;
        let mut kind = d.kind;
        match lang {
            Lang::Python if kind == Kind::Function && parent_kind == Kind::Class => kind = Kind::Method,
            Lang::TypeScript
                if kind == Kind::Field
                    && d.value
                        .is_some_and(|v| matches!(v.kind(), "arrow_function" | "function_expression" | "function")) =>
            {
                kind = Kind::Method;
            }
            Lang::TypeScript if kind == Kind::Function && parent_kind.is_type() => kind = Kind::Method,
            _ => {}
        }
        let (params, varargs) =
            if lang == Lang::Java && kind == Kind::Method { java::params(d.node, src) } else { (Vec::new(), false) };
        // The chain is built from the parent's names: its id's suffixes (#2, Java
        // parameters) are not part of it.
        let own_chain = chains[parent as usize].child(&d.name);
        let chain = own_chain.render();
        let mut id = if lang == Lang::Java && kind == Kind::Method {
            format!("{rel}:{chain}({})", params.join(","))
        } else {
            format!("{rel}:{chain}")
        };
        let n = seen_ids.entry(id.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            id = format!("{id}#{n}");
        }
        let qname = if module_qname.is_empty() { chain.clone() } else { format!("{module_qname}.{chain}") };
        let is_test_entity = is_test
            && !desc.tests.entity_prefix.is_empty()
            && matches!(kind, Kind::Function | Kind::Method)
            && (d.name.starts_with(&desc.tests.entity_prefix)
                || (lang == Lang::Java && java::has_test_annotation(d.node, src)));
        let idx = entities.len() as u32;
        entities.push(Entity {
            id,
            kind,
            name: d.name.clone(),
            qname,
            parent: Some(parent),
            start_line: line_of(d.node),
            end_line: d.node.end_position().row as u32 + 1,
            signature: signature(d.node, src),
            doc: match lang {
                Lang::Python => python::doc(d.node, src),
                _ => comment_doc(d.node, src),
            },
            bases: Vec::new(),
            params,
            varargs,
            is_test: is_test_entity,
        });
        by_node.insert(d.node.id(), idx);
        chains.push(own_chain);
        spans.push((d.node.start_byte(), d.node.end_byte()));
        stack.push((d.node.end_byte(), idx));
    }
    for (owner, b) in bases {
        if let Some(&i) = by_node.get(&owner) {
            let e = &mut entities[i as usize];
            if !e.bases.contains(&b) {
                e.bases.push(b);
            }
        }
    }

    drop(chains);
    // The owner of a position: the innermost entity that is not a field. One sweep over
    // the positions in order with a stack of the open spans (tree nodes nest), so that a
    // file with many entities and calls costs n log n, not n times m.
    let non_field: Vec<(usize, usize, u32)> = spans
        .iter()
        .enumerate()
        .filter(|(i, _)| entities[*i].kind != Kind::Field)
        .map(|(i, &(s, e))| (s, e, i as u32))
        .collect();
    let owners_of = |bytes: &[usize]| -> Vec<u32> {
        let mut order: Vec<usize> = (0..bytes.len()).collect();
        order.sort_by_key(|&i| bytes[i]);
        let mut out = vec![0u32; bytes.len()];
        let mut stack: Vec<(usize, u32)> = Vec::new();
        let mut next = 0;
        for qi in order {
            let byte = bytes[qi];
            while next < non_field.len() && non_field[next].0 <= byte {
                let (s, e, i) = non_field[next];
                while stack.last().is_some_and(|&(end, _)| end <= s) {
                    stack.pop();
                }
                stack.push((e, i));
                next += 1;
            }
            while stack.last().is_some_and(|&(end, _)| end <= byte) {
                stack.pop();
            }
            out[qi] = stack.last().map(|&(_, i)| i).unwrap_or(0);
        }
        out
    };

    let call_owners = owners_of(&raw_calls.iter().map(|c| c.0.start_byte()).collect::<Vec<_>>());
    let mut calls: Vec<Call> = raw_calls
        .into_iter()
        .zip(call_owners)
        .map(|((_, name, receiver, args, new, line), owner)| Call { owner, line, name, receiver, args, new })
        .collect();
    calls.sort_by(|a, b| (a.owner, a.line, &a.name, &a.receiver).cmp(&(b.owner, b.line, &b.name, &b.receiver)));
    calls.dedup();

    let mut imports = Vec::new();
    for node in import_nodes {
        match lang {
            Lang::Python => python::imports(node, src, &mut imports),
            Lang::TypeScript => typescript::imports(node, src, &mut imports),
            Lang::Java => java::imports(node, src, &mut imports),
        }
    }
    imports.sort_by(|a, b| (a.line, &a.module, &a.name, &a.alias).cmp(&(b.line, &b.module, &b.name, &b.alias)));
    imports.dedup();

    let var_owners = owners_of(&raw_vars.iter().map(|v| v.0.start_byte()).collect::<Vec<_>>());
    let mut vars: Vec<Var> =
        raw_vars.into_iter().zip(var_owners).map(|((_, name, ty), owner)| Var { owner, name, ty }).collect();
    if lang == Lang::Python {
        python::inline_attr_values(&mut vars);
    }
    vars.sort_by(|a, b| (a.owner, &a.name, &a.ty).cmp(&(b.owner, &b.name, &b.ty)));
    vars.dedup();
    // The facts of every file are held until the index is written: no spare capacity
    // (a list collected in place keeps the buffer of the larger raw tuples it came from).
    entities.shrink_to_fit();
    calls.shrink_to_fit();
    imports.shrink_to_fit();
    vars.shrink_to_fit();

    FileFacts {
        path: rel.to_string(),
        lang,
        hash,
        lines,
        is_test,
        package,
        entities,
        calls,
        imports,
        vars,
        default_export,
        syntax_errors: if root.has_error() { count_errors(root) } else { 0 },
        truncated,
    }
}

fn count_errors(root: Node) -> u32 {
    let mut n = 0;
    let mut cursor = root.walk();
    let mut done = false;
    while !done {
        let node = cursor.node();
        if node.is_error() || node.is_missing() {
            n += 1;
        }
        if node.has_error() && cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                done = true;
                break;
            }
        }
    }
    n
}

/// A call's arguments: the named children of its argument list, comments aside. With no
/// `#` or `/` in the list's text no child can be a comment, and the count tree-sitter
/// keeps in the node is the answer (walking the children was 1% of a full build on Guava).
fn count_args(args: Node, src: &str) -> u32 {
    let within = src.as_bytes().get(args.byte_range()).unwrap_or_default();
    if memchr::memchr2(b'#', b'/', within).is_none() {
        return args.named_child_count() as u32;
    }
    let mut c = args.walk();
    args.named_children(&mut c).filter(|n| n.kind() != "comment").count() as u32
}

/// A receiver as written, whitespace removed; long or multi-line expressions are cut,
/// since resolution only reads names, dotted paths and `self`/`this`/`super`.
fn receiver_text(node: Node, src: &str) -> String {
    let t = text(node, src);
    if t.len() > 120 {
        // A long receiver is most often a chain of calls with long arguments
        // (`Model.objects.filter(\n a=..., b=...,\n)`): its shape without them still
        // names what it is called on.
        return calls_without_arguments(t)
            .filter(|s| s.len() <= 120 && !s.is_empty())
            .unwrap_or_else(|| "<expr>".into());
    }
    t.chars().filter(|c| !c.is_whitespace()).collect()
}

/// `a.f(x, g(y)).h(z)` -> `a.f().h()`, whitespace dropped; None when the parentheses do
/// not balance, or a bracket, brace or quote stands outside them (not a plain chain).
fn calls_without_arguments(t: &str) -> Option<String> {
    let mut out = String::new();
    let mut level = 0usize;
    for c in t.chars() {
        match c {
            '(' => {
                if level == 0 {
                    out.push('(');
                }
                level += 1;
            }
            ')' => {
                level = level.checked_sub(1)?;
                if level == 0 {
                    out.push(')');
                }
            }
            _ if level > 0 => {}
            c if c.is_whitespace() => {}
            '[' | ']' | '{' | '}' | '"' | '\'' | '`' => return None,
            c => out.push(c),
        }
    }
    (level == 0).then_some(out)
}

/// `List<String>` -> `List`, `a.b.C<T>` -> `a.b.C`, `int[]` stays.
pub(crate) fn strip_generics(t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    let mut depth = 0;
    for ch in t.chars() {
        match ch {
            '<' => depth += 1,
            '>' => depth -= 1,
            c if depth == 0 && !c.is_whitespace() => out.push(c),
            _ => {}
        }
    }
    out
}

fn module_short_name(rel: &str) -> String {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    file.split('.').next().unwrap_or(file).to_string()
}

/// The signature: the definition's text up to its body, whitespace collapsed.
fn signature(node: Node, src: &str) -> String {
    let end =
        node.field("body").map(|b| b.start_byte()).unwrap_or_else(|| node.end_byte().min(node.start_byte() + 300));
    let raw = &src[node.start_byte()..end];
    let mut s = String::new();
    for w in raw.split_whitespace() {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(w);
        if s.len() > 300 {
            break;
        }
    }
    let s = s.trim_end_matches([':', '{', ' ']).to_string();
    truncate(s, 300)
}

pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// A `/** ... */` or `//` comment block right before a definition (TS, Java). The
/// comment may sit before the export statement or the modifiers that wrap it.
fn comment_doc(node: Node, src: &str) -> String {
    let mut n = node;
    if let Some(p) = n.parent() {
        if matches!(p.kind(), "export_statement" | "variable_declaration" | "lexical_declaration") {
            n = p;
            if let Some(pp) = n.parent() {
                if pp.kind() == "export_statement" {
                    n = pp;
                }
            }
        }
    }
    let Some(prev) = n.prev_sibling() else { return String::new() };
    if prev.kind() != "comment" && prev.kind() != "block_comment" {
        return String::new();
    }
    let t = text(prev, src);
    if !t.starts_with("/**") {
        return String::new();
    }
    let body = t.trim_start_matches("/**").trim_end_matches("*/");
    let lines: Vec<&str> =
        body.lines().map(|l| l.trim().trim_start_matches('*').trim()).filter(|l| !l.is_empty()).collect();
    truncate(lines.join("\n"), 2000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parse_budget_is_the_parsing_threads_cpu_time_not_its_wait_for_a_core() {
        // Spinning threads, four per core, keep the parsing thread waiting for a core for
        // milliseconds at a time. A file that parses in well under the budget of CPU time
        // must not be skipped when its parse takes longer than the budget on the wall clock
        // (the CI failure of `bad_input_is_reported_and_skipped`: a tiny file over 1 ms).
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let spinners: Vec<_> = (0..4 * cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let src: String = (0..30).map(|i| format!("def f{i}(a, b):\n    return g(a, b) + {i}\n")).collect();
        let budget = Duration::from_millis(5);
        let mut ex = Extractor::new(Limits { max_parse_time: budget, ..Limits::default() });
        let (mut waited, mut runs, mut skipped) = (0, 0, Vec::new());
        while waited < 5 && runs < 3000 {
            let started = Instant::now();
            let r = ex.extract_bytes("small.py", Lang::Python, src.as_bytes(), content_hash(src.as_bytes()));
            if started.elapsed() > budget {
                waited += 1;
            }
            if let Err(s) = r {
                skipped.push(s.reason);
            }
            runs += 1;
        }
        stop.store(true, Ordering::Relaxed);
        spinners.into_iter().for_each(|t| t.join().unwrap());
        assert!(skipped.is_empty(), "{} of {runs} parses skipped: {:?}", skipped.len(), skipped.first());
        assert!(waited > 0, "no parse of {runs} waited longer than the budget: the test showed nothing");
    }

    #[test]
    fn long_receivers_keep_their_call_chain_shape() {
        assert_eq!(
            calls_without_arguments("Foo.objects.filter(a=1, b=g(2))\n  .exclude(c=3)").as_deref(),
            Some("Foo.objects.filter().exclude()")
        );
        assert_eq!(calls_without_arguments("f(a)[0].b"), None);
        assert_eq!(calls_without_arguments("f(a))"), None);
        assert_eq!(calls_without_arguments("f((a)"), None);
    }

    fn facts(path: &str, src: &str) -> FileFacts {
        let lang = Lang::of_path(std::path::Path::new(path)).unwrap();
        Extractor::new(Limits::default())
            .extract_bytes(path, lang, src.as_bytes(), content_hash(src.as_bytes()))
            .unwrap()
    }

    #[test]
    fn every_embedded_query_compiles() {
        for slot in 0..4 {
            if let Err(e) = compiled(slot) {
                panic!("grammar slot {slot}: {e}");
            }
        }
    }

    #[test]
    fn python_entities_and_calls() {
        let f = facts(
            "pkg/m.py",
            "class A(B, mod.C):\n    x = 1\n    def f(self):\n        \"\"\"Doc.\"\"\"\n        def g():\n            pass\n        g()\n        self.h(1, 2)\n\ndef f():\n    pass\n\ndef f():\n    pass\n",
        );
        let ids: Vec<_> = f.entities.iter().map(|e| (e.id.as_str(), e.kind)).collect();
        assert_eq!(
            ids,
            vec![
                ("pkg/m.py", Kind::Module),
                ("pkg/m.py:A", Kind::Class),
                ("pkg/m.py:A.x", Kind::Field),
                ("pkg/m.py:A.f", Kind::Method),
                ("pkg/m.py:A.f.g", Kind::Function),
                ("pkg/m.py:f", Kind::Function),
                ("pkg/m.py:f#2", Kind::Function),
            ]
        );
        assert_eq!(f.entities[1].bases, vec!["B", "mod.C"]);
        assert_eq!(f.entities[3].doc, "Doc.");
        assert_eq!(f.entities[3].qname, "pkg.m.A.f");
        let calls: Vec<_> =
            f.calls.iter().map(|c| (c.owner, c.line, c.name.as_str(), c.receiver.as_str(), c.args)).collect();
        assert_eq!(calls, vec![(3, 7, "g", "", 0), (3, 8, "h", "self", 2)]);
    }

    #[test]
    fn syntax_errors_keep_the_partial_tree() {
        let f = facts("a.py", "def ok():\n    pass\n\ndef broken(:\n    pass\n");
        assert!(f.syntax_errors > 0);
        assert!(f.entities.iter().any(|e| e.id == "a.py:ok"));
    }

    #[test]
    fn bad_bytes_are_skipped_with_a_reason() {
        let mut x = Extractor::new(Limits::default());
        let e = x.extract_bytes("a.py", Lang::Python, b"x = '\xff'\n", String::new()).unwrap_err();
        assert!(e.reason.starts_with("not UTF-8"), "{}", e.reason);
        let e = x.extract_bytes("a.py", Lang::Python, b"\x00\x01\x02", String::new()).unwrap_err();
        assert!(e.reason.starts_with("binary"), "{}", e.reason);
    }

    #[test]
    fn utf16_with_a_bom_is_decoded_and_broken_utf16_refused() {
        let text = "def caf\u{e9}():\n    pass\n";
        let le: Vec<u8> = [0xFF, 0xFE].into_iter().chain(text.encode_utf16().flat_map(|u| u.to_le_bytes())).collect();
        let be: Vec<u8> = [0xFE, 0xFF].into_iter().chain(text.encode_utf16().flat_map(|u| u.to_be_bytes())).collect();
        assert_eq!(decode_source(&le).unwrap(), text);
        assert_eq!(decode_source(&be).unwrap(), text);
        let e = decode_source(&[0xFF, 0xFE, 0x00, 0xD8, 0x41, 0x00]).unwrap_err();
        assert!(e.starts_with("UTF-16LE that does not decode: unpaired surrogate 0xd800"), "{e}");
        assert!(decode_source(&[0xFE, 0xFF, 0x00]).unwrap_err().starts_with("UTF-16BE with an odd number"));
    }
}

#[cfg(test)]
mod walk_tests {
    use super::*;

    /// The facts found by the walk equal those found by `queries/<lang>/tags.scm`.
    fn same_by_walk_and_query(rel: &str, src: &str) {
        let lang = Lang::of_path(std::path::Path::new(rel)).unwrap();
        let mut walk = Extractor::new(Limits::default());
        let mut query = Extractor::new(Limits::default());
        query.by_query = true;
        let hash = content_hash(src.as_bytes());
        let a = walk.extract_bytes(rel, lang, src.as_bytes(), hash.clone());
        let b = query.extract_bytes(rel, lang, src.as_bytes(), hash);
        match (a, b) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{rel}: the walk and the query disagree"),
            (a, b) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{rel}"),
        }
    }

    #[test]
    fn walk_finds_what_the_query_finds() {
        let src = r#"
import os, sys as system
from a.b import (c, d as e)
from . import *
class A(Base, mod.Other, factory(Base), metaclass=Meta, *mixins):
    x = 1
    y: int = 2
    z: str
    p, q = 1, 2
    u = v = 3
    "doc"
    def m(self, a):
        return a.b(1).c(2).c(3, 4) + f(a) + f(a, b) + f(f(a, b))
    @property
    def n(self):
        g(x for x in self.y)
        self.n2().n3()
        (lambda: 1)()
        return [h(i) for i in range(3)]
class B(A):
    class C:
        k = K()
def broken(:
    call_in_error(1)
class D(:
    w = 1
async def k():
    await j(1)
"#;
        same_by_walk_and_query("pkg/mod.py", src);
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut n = 0;
        for e in ignore::WalkBuilder::new(&root).hidden(false).build().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "py" || x == "java") {
                if let Ok(src) = std::fs::read_to_string(p) {
                    let rel = p.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                    same_by_walk_and_query(&rel, &src);
                    n += 1;
                }
            }
        }
        assert!(n > 40, "only {n} Python and Java fixture files");
        let java = r#"
package a.b;
package c.d;
import java.util.*;
import static java.util.Collections.emptyList;
public class A<T> extends Base<T> implements I1, /* c */ I2<String>, java.io.Serializable {
    int x, y = 2;
    static final String Z = "z";
    A(int a, final String... rest) { super(a); this.x = a; }
    <R> R m(java.util.List<? extends T> xs, int[] arr) throws Exception {
        int i = 0, j;
        for (final String s : names()) { s.length(); }
        try { new Foo<>(new Foo(1, 2)).bar(x).bar(y, z); } catch (IOException | RuntimeException e) { e.printStackTrace(); }
        Runnable r = new Runnable() { public void run() { go(); } };
        return (R) m2(m2(1), 2);
    }
    record P(int a) implements Comparable<P> { P { check(a); } public int compareTo(P o) { return 0; } }
    enum E implements I1 { ONE, TWO; void f() {} }
    interface J extends I1, I2 { int K = 1; void g(); }
    @interface Ann { String value(); }
}
class Broken { void f( { call(1); }
"#;
        same_by_walk_and_query("a/b/A.java", java);
    }

    /// A Python query given by `REPROAGENT_QUERIES` is run, not the walk made for the
    /// embedded one.
    #[test]
    fn an_overridden_python_query_is_the_one_that_runs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("python")).unwrap();
        // Definitions only: no calls.
        std::fs::write(
            dir.path().join("python/tags.scm"),
            "(function_definition name: (identifier) @name) @definition.function\n",
        )
        .unwrap();
        let src = "def f():\n    g(1)\n";
        let mut parser = Parser::new();
        parser.set_language(&Lang::Python.ts_language("a.py")).unwrap();
        let tree = parser.parse(src, None).unwrap();
        let facts = |c: Option<&Compiled>| build_facts(false, "a.py", Lang::Python, src, String::new(), &tree, c, 100);
        let own = compile(Lang::Python, "a.py", Some(dir.path())).unwrap();
        assert!(!own.builtin);
        let (with_own, embedded) = (facts(Some(&own)), facts(Some(&compile(Lang::Python, "a.py", None).unwrap())));
        assert_eq!(embedded.calls.len(), 1);
        // No query compiled (the walk, as a run without an override extracts Python).
        assert_eq!(facts(None), embedded);
        assert!(with_own.calls.is_empty(), "{:?}", with_own.calls);
        assert_eq!(with_own.entities.len(), 2);
    }
}
