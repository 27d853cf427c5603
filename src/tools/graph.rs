//! Graph retrieval over the indexed code knowledge graph: `find_entity`,
//! `class_structure`, `callers`, `callees`, `call_chain`, `imports`, `tests_for`.
//! Thin typed wrappers over [`crate::graph`]; a name that matches nothing answers with
//! the nearest names, an ambiguous one with its candidates.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{page, Page, ToolContext, ToolError, TypedTool};
use crate::graph::{self as g, ClassInfo, Edge, EntityInfo, ImportRow};

// ---------------------------------------------------------------- find_entity

pub struct FindEntity;

/// Look entities up by id, name or qualified name.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindEntityArgs {
    /// An id (`path:Class.method`), a name (`apply_discount`) or a qualified-name suffix
    /// (`Order.total`); also matched as a case-insensitive substring of names.
    pub name: String,
    /// Only this kind: module, class, interface, enum, function, method, field.
    #[serde(default)]
    pub kind: Option<String>,
    /// At most this many (default 20, at most 200).
    #[serde(default = "twenty")]
    pub limit: usize,
}

fn twenty() -> usize {
    20
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct FindEntityOutput {
    pub name: String,
    /// `exact` (id, name, qualified-name suffix or substring matches) or `fuzzy` (nothing
    /// matched: the nearest names by edit distance).
    pub matched: &'static str,
    pub entities: Vec<EntityInfo>,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl TypedTool for FindEntity {
    const NAME: &'static str = "find_entity";
    const DESCRIPTION: &'static str = "Find code entities (modules, classes, functions, methods, fields) by id, name, qualified-name suffix or substring; when nothing matches, the nearest names by edit distance. Gives each entity's id, kind, file and line range. Bounded: 20 by default.";
    type Args = FindEntityArgs;
    type Output = FindEntityOutput;

    fn run(&self, ctx: &ToolContext, a: FindEntityArgs) -> Result<FindEntityOutput, ToolError> {
        let store = ctx.store()?;
        let limit = a.limit.clamp(1, 200);
        // An exact id or a dotted import path: one indexed lookup, answered at once.
        let exact = match g::entity(&store, &a.name)? {
            Some(e) => Some(e),
            None => match g::dotted_entity(&store, &a.name)? {
                Some(id) => g::entity(&store, &id)?,
                None => None,
            },
        };
        if let Some(e) = exact.filter(|e| a.kind.as_deref().is_none_or(|k| e.kind == k)) {
            return Ok(FindEntityOutput {
                name: a.name,
                matched: "exact",
                entities: vec![e],
                truncated: false,
                note: None,
            });
        }
        let names = ctx.names(&store)?;
        // One query for every hit, not one per hit.
        let mut hits = g::entities_by_id(&store, &names.find_ids(&a.name, a.kind.as_deref(), limit + 1))?;
        if !hits.is_empty() {
            let truncated = hits.len() > limit;
            hits.truncate(limit);
            let note = truncated.then(|| {
                format!("showing the first {limit} matches; pass kind, a longer name or limit to narrow or widen")
            });
            return Ok(FindEntityOutput { name: a.name, matched: "exact", entities: hits, truncated, note });
        }
        let mut near = g::entities_by_id(&store, &names.nearest(&a.name, 50))?;
        near.retain(|e| a.kind.as_deref().is_none_or(|k| e.kind == k));
        near.truncate(limit.min(10));
        let note = Some(if near.is_empty() {
            format!("no entity matches '{}' and none has a close name", a.name)
        } else {
            format!("no entity matches '{}'; these are the nearest names", a.name)
        });
        Ok(FindEntityOutput { name: a.name, matched: "fuzzy", entities: near, truncated: false, note })
    }
}

// ---------------------------------------------------------------- class_structure

pub struct ClassStructure;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EntityArgs {
    /// An entity id (`path:Class`), a name or a qualified name.
    pub name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ClassStructureOutput {
    pub class: EntityInfo,
    /// Direct bases as written, with the resolved id (empty when outside the repository).
    pub bases: Vec<Base>,
    /// Resolved ancestors, nearest first.
    pub ancestors: Vec<String>,
    pub subclasses: Vec<String>,
    pub methods: Vec<EntityInfo>,
    pub fields: Vec<EntityInfo>,
    pub overrides: Vec<Override>,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Base {
    pub name: String,
    pub id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Override {
    /// The method of this class...
    pub method: String,
    /// ...and the ancestor's method it overrides.
    pub overrides: String,
}

/// Members listed per class, at most.
const CLASS_MEMBERS: usize = 200;

impl TypedTool for ClassStructure {
    const NAME: &'static str = "class_structure";
    const DESCRIPTION: &'static str = "A class, interface or enum: its direct bases (as written, and resolved), resolved ancestors, subclasses, methods, fields, and which methods override an ancestor's. Bounded: 200 of each list.";
    type Args = EntityArgs;
    type Output = ClassStructureOutput;

    fn run(&self, ctx: &ToolContext, a: EntityArgs) -> Result<ClassStructureOutput, ToolError> {
        let store = ctx.store()?;
        let id = g::resolve_entity(&store, &a.name)?;
        let mut info: ClassInfo = g::class(&store, &id)?;
        if !matches!(info.class.kind.as_str(), "class" | "interface" | "enum") {
            return Err(ToolError::Other(format!(
                "'{}' is a {}, not a class; class_structure takes a class, interface or enum",
                id, info.class.kind
            )));
        }
        let (m, f, sub) = (info.methods.len(), info.fields.len(), info.subclasses.len());
        let truncated =
            m > CLASS_MEMBERS || f > CLASS_MEMBERS || sub > CLASS_MEMBERS || info.overrides.len() > CLASS_MEMBERS;
        info.methods.truncate(CLASS_MEMBERS);
        info.fields.truncate(CLASS_MEMBERS);
        info.subclasses.truncate(CLASS_MEMBERS);
        info.overrides.truncate(CLASS_MEMBERS);
        let note = truncated.then(|| {
            format!(
                "{m} methods, {f} fields, {sub} subclasses: showing the first {CLASS_MEMBERS} of each; \
                 read_file the class, or find_entity with kind, for the rest"
            )
        });
        Ok(ClassStructureOutput {
            class: info.class,
            bases: info.bases.into_iter().map(|(name, id)| Base { name, id }).collect(),
            ancestors: info.ancestors,
            subclasses: info.subclasses,
            methods: info.methods,
            fields: info.fields,
            overrides: info.overrides.into_iter().map(|(method, overrides)| Override { method, overrides }).collect(),
            truncated,
            note,
        })
    }
}

// ---------------------------------------------------------------- callers / callees

pub struct Callers;
pub struct Callees;

/// A call-graph walk from one entity.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WalkArgs {
    /// An entity id (`path:Class.method`), a name or a qualified name.
    pub name: String,
    /// How many calls away to go (default 1, at most 5).
    #[serde(default = "one")]
    pub depth: usize,
    /// Follow only edges at least this sure (0..1): 0.5 leaves out bare-name guesses.
    #[serde(default)]
    pub min_confidence: f64,
    #[serde(default)]
    pub offset: usize,
    /// At most this many edges (default 100, at most 500).
    #[serde(default = "hundred")]
    pub limit: usize,
    /// Leave out edges from (callers) or into (callees) test files.
    #[serde(default)]
    pub exclude_tests: bool,
    /// One row per caller (callers) or callee (callees) with its call lines, instead of
    /// one per edge.
    #[serde(default)]
    pub group: bool,
}

fn one() -> usize {
    1
}
fn hundred() -> usize {
    100
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct WalkOutput {
    pub entity: String,
    pub depth: usize,
    /// Each edge with `how` it was resolved (local, import, self, inherited, type, name) and its
    /// confidence, nearest first.
    pub edges: Vec<Edge>,
    /// With `group`: one row per entity at the other end of the edges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grouped: Option<Vec<Group>>,
    /// Edges left out by `exclude_tests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests_left_out: Option<usize>,
    #[serde(flatten)]
    pub page: Page,
}

const MAX_WALK_DEPTH: usize = 5;

/// The calls between one caller and one callee, or all the calls of one entity at the
/// other end of a walk.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Group {
    pub entity: String,
    pub depth: i64,
    pub calls: usize,
    pub lines: Vec<i64>,
    /// The surest edge's resolution and confidence.
    pub how: String,
    pub confidence: f64,
}

/// Callers: the call sites of the entity's name that no edge attributes, counted.
fn unattributed(store: &crate::store::Store, id: &str, page: &mut Page) -> Result<(), ToolError> {
    if let Some(note) = g::unattributed_note(store, id)? {
        page.note = Some(match page.note.take() {
            Some(n) => format!("{n}; {note}"),
            None => note,
        });
    }
    Ok(())
}

fn file_of(id: &str) -> &str {
    id.split_once(':').map(|(f, _)| f).unwrap_or(id)
}

fn walk(ctx: &ToolContext, a: WalkArgs, up: bool) -> Result<WalkOutput, ToolError> {
    let store = ctx.store()?;
    let id = g::resolve_entity(&store, &a.name)?;
    let depth = a.depth.clamp(1, MAX_WALK_DEPTH);
    let min = a.min_confidence.clamp(0.0, 1.0);
    let mut walk = g::walk(&store, &id, depth, min, up)?;
    let other = |e: &Edge| if up { e.caller.clone() } else { e.callee.clone() };
    let tests_left_out = if a.exclude_tests {
        let tests: std::collections::HashSet<String> =
            g::files(&store)?.into_iter().filter(|f| f.is_test).map(|f| f.path).collect();
        let before = walk.edges.len();
        walk.edges.retain(|e| !tests.contains(file_of(&other(e))));
        Some(before - walk.edges.len())
    } else {
        None
    };
    let limit = a.limit.clamp(1, 500);
    if a.group {
        let mut groups: Vec<Group> = Vec::new();
        let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for e in &walk.edges {
            let key = other(e);
            let i = *at.entry(key.clone()).or_insert_with(|| {
                groups.push(Group {
                    entity: key,
                    depth: e.depth,
                    calls: 0,
                    lines: Vec::new(),
                    how: e.how.clone(),
                    confidence: e.confidence,
                });
                groups.len() - 1
            });
            let gr = &mut groups[i];
            gr.calls += 1;
            if e.depth == gr.depth && !gr.lines.contains(&e.line) {
                gr.lines.push(e.line);
            }
            if e.confidence > gr.confidence {
                gr.confidence = e.confidence;
                gr.how = e.how.clone();
            }
        }
        let what = if up { "callers" } else { "callees" };
        let (grouped, mut page) = page(groups, a.offset, limit, what);
        if up {
            unattributed(&store, &id, &mut page)?;
        }
        if let Some(cut) = walk.truncated {
            page.truncated = true;
            page.note = Some(match page.note {
                Some(n) => format!("{cut}; {n}"),
                None => cut,
            });
        }
        return Ok(WalkOutput { entity: id, depth, edges: Vec::new(), grouped: Some(grouped), tests_left_out, page });
    }
    let (edges, mut page) = page(walk.edges, a.offset, limit, "edges");
    if let Some(cut) = walk.truncated {
        page.truncated = true;
        page.note = Some(match page.note {
            Some(n) => format!("{cut}; {n}"),
            None => cut,
        });
    }
    if up {
        unattributed(&store, &id, &mut page)?;
    }
    Ok(WalkOutput { entity: id, depth, edges, grouped: None, tests_left_out, page })
}

impl TypedTool for Callers {
    const NAME: &'static str = "callers";
    const DESCRIPTION: &'static str = "Who calls an entity, transitively up to `depth` calls (at most 5): call edges with line, how each was resolved (local, import, self, inherited, type, or a bare-name guess) and its confidence; says how many call sites of the name got no edge. Bounded: 100 edges by default, with offset for more; a walk stops at 5,000 edges or 10 s and says so (truncated, note).";
    type Args = WalkArgs;
    type Output = WalkOutput;

    fn run(&self, ctx: &ToolContext, a: WalkArgs) -> Result<WalkOutput, ToolError> {
        walk(ctx, a, true)
    }
}

impl TypedTool for Callees {
    const NAME: &'static str = "callees";
    const DESCRIPTION: &'static str = "What an entity calls, transitively up to `depth` calls (at most 5): call edges with line, how each was resolved and its confidence. Calls to code outside the repository are not edges. Bounded: 100 edges by default, with offset for more; a walk stops at 5,000 edges or 10 s and says so (truncated, note).";
    type Args = WalkArgs;
    type Output = WalkOutput;

    fn run(&self, ctx: &ToolContext, a: WalkArgs) -> Result<WalkOutput, ToolError> {
        walk(ctx, a, false)
    }
}

// ---------------------------------------------------------------- call_chain

pub struct CallChain;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallChainArgs {
    /// Where the chain starts (an id, a name or a qualified name).
    pub from: String,
    /// Where it ends.
    pub to: String,
    /// At most this many calls in a chain (default 5, at most 8).
    #[serde(default = "five")]
    pub max_depth: usize,
    /// At most this many chains, shortest first (default 10, at most 50).
    #[serde(default = "ten")]
    pub limit: usize,
    /// Follow only edges at least this sure (0..1).
    #[serde(default)]
    pub min_confidence: f64,
}

fn five() -> usize {
    5
}
fn ten() -> usize {
    10
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CallChainOutput {
    pub from: String,
    pub to: String,
    pub chains: Vec<Vec<Edge>>,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl TypedTool for CallChain {
    const NAME: &'static str = "call_chain";
    const DESCRIPTION: &'static str = "Call chains from one entity to another, shortest first: each chain is its list of call edges (with line, how and confidence). Bounded: chains of at most `max_depth` calls (default 5, at most 8), at most `limit` chains (default 10); the search stops after 100,000 partial chains or 10 s and says so (truncated, note).";
    type Args = CallChainArgs;
    type Output = CallChainOutput;

    fn run(&self, ctx: &ToolContext, a: CallChainArgs) -> Result<CallChainOutput, ToolError> {
        let store = ctx.store()?;
        let from = g::resolve_entity(&store, &a.from)?;
        let to = g::resolve_entity(&store, &a.to)?;
        let depth = a.max_depth.clamp(1, 8);
        let limit = a.limit.clamp(1, 50);
        let min = a.min_confidence.clamp(0.0, 1.0);
        let (mut chains, cut) = g::paths_bounded(&store, &from, &to, depth, min, limit + 1)?;
        let more = chains.len() > limit;
        chains.truncate(limit);
        let truncated = more || cut.is_some();
        let note = if let Some(cut) = cut {
            Some(format!("{cut}; {} chains found", chains.len()))
        } else if more {
            Some(format!("showing the {limit} shortest chains; pass a larger limit (at most 50) for more"))
        } else if chains.is_empty() {
            Some(format!(
                "no chain of at most {depth} calls from {from} to {to}; try a larger max_depth, or callers of {to}"
            ))
        } else {
            None
        };
        Ok(CallChainOutput { from, to, chains, truncated, note })
    }
}

// ---------------------------------------------------------------- imports

pub struct Imports;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportsArgs {
    /// A source file, relative to the repository root.
    pub path: String,
    #[serde(default)]
    pub offset: usize,
    /// At most this many rows of each list (default 100, at most 500).
    #[serde(default = "hundred")]
    pub limit: usize,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ImportsOutput {
    pub file: String,
    /// What the file imports: module as written, name, alias and the resolved target
    /// (an entity id or a file), empty when outside the repository.
    pub imports: Vec<ImportRow>,
    /// Who imports the file or anything defined in it.
    pub imported_by: Vec<ImportRow>,
    pub imports_page: Page,
    pub imported_by_page: Page,
}

impl TypedTool for Imports {
    const NAME: &'static str = "imports";
    const DESCRIPTION: &'static str = "What a source file imports (module, name, alias, and the entity or file each resolves to in the repository) and who imports it or anything defined in it. Bounded: 100 rows of each by default, with offset for more.";
    type Args = ImportsArgs;
    type Output = ImportsOutput;

    fn run(&self, ctx: &ToolContext, a: ImportsArgs) -> Result<ImportsOutput, ToolError> {
        let abs = ctx.resolve_path(&a.path)?;
        let file = ctx.rel(&abs);
        let store = ctx.store()?;
        let info = g::imports(&store, &file).map_err(|e| match ToolError::from(e) {
            ToolError::NotFound { name, nearest, .. } => {
                ToolError::NotFound { what: "indexed source file", name, nearest }
            }
            other => other,
        })?;
        let limit = a.limit.clamp(1, 500);
        let (imports, imports_page) = page(info.imports, a.offset, limit, "imports");
        let (imported_by, imported_by_page) = page(info.imported_by, a.offset, limit, "importers");
        Ok(ImportsOutput { file: info.file, imports, imported_by, imports_page, imported_by_page })
    }
}

// ---------------------------------------------------------------- tests_for

pub struct TestsFor;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestsForArgs {
    /// An entity id, a name or a qualified name.
    pub name: String,
    #[serde(default)]
    pub offset: usize,
    /// At most this many tests (default 50, at most 500).
    #[serde(default = "fifty")]
    pub limit: usize,
}

fn fifty() -> usize {
    50
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TestsForOutput {
    pub entity: String,
    /// Test ids that reach the entity through at most 3 calls of confidence at least 0.5.
    pub tests: Vec<String>,
    #[serde(flatten)]
    pub page: Page,
    /// Set when no test reaches the entity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub none_because: Option<String>,
}

impl TypedTool for TestsFor {
    const NAME: &'static str = "tests_for";
    const DESCRIPTION: &'static str = "The existing tests that reach an entity (through at most 3 calls of confidence at least 0.5): where to look for the repository's test style and fixtures. Bounded: 50 by default, with offset for more.";
    type Args = TestsForArgs;
    type Output = TestsForOutput;

    fn run(&self, ctx: &ToolContext, a: TestsForArgs) -> Result<TestsForOutput, ToolError> {
        let store = ctx.store()?;
        let id = g::resolve_entity(&store, &a.name)?;
        let tests = g::tests_for(&store, &id)?;
        let none_because = tests.is_empty().then(|| {
            "no test reaches it through calls the graph resolved with confidence >= 0.5 (calls on objects of \
             unknown type are bare-name guesses); grep the test files for its name, or see tests_for of its callers"
                .to_string()
        });
        let (tests, page) = page(tests, a.offset, a.limit.clamp(1, 500), "tests");
        Ok(TestsForOutput { entity: id, tests, page, none_because })
    }
}

// ---------------------------------------------------------------- read_entity

pub struct ReadEntity;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadEntityArgs {
    /// An entity id (`path:Class.method`), a dotted import path
    /// (`pkg.module.Class.method`), a name or a qualified name.
    pub name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadEntityOutput {
    pub entity: EntityInfo,
    /// The first line shown: the first decorator or annotation above the definition.
    pub start_line: usize,
    pub end_line: usize,
    /// The lines, each prefixed with its number: `  12 | text`.
    pub content: String,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The first line of the decorators (Python, TypeScript) or annotations (Java) stacked
/// right above a definition that starts on `start` (1-based), arguments over several
/// lines included; `start` when there are none.
pub(crate) fn decorators_from(lines: &[&str], start: usize) -> usize {
    let Some(def) = lines.get(start.saturating_sub(1)) else { return start };
    let indent = def.len() - def.trim_start().len();
    let mut first = start;
    let mut i = start.saturating_sub(1);
    while i > 0 {
        let line = lines[i - 1];
        let t = line.trim_start();
        let ind = line.len() - t.len();
        if t.starts_with('@') && ind == indent {
            first = i;
        } else if t.is_empty() || ind < indent || (ind == indent && !t.starts_with([')', ']', '}'])) {
            // Not inside a decorator's arguments: the stack ends here.
            break;
        }
        i -= 1;
    }
    first
}

impl TypedTool for ReadEntity {
    const NAME: &'static str = "read_entity";
    const DESCRIPTION: &'static str = "The source of one entity by id, dotted import path or name, with its decorators or annotations and line numbers: what read_file gives for its exact range. Bounded: 500 lines or 50 kB; the note says how to read on with read_file.";
    type Args = ReadEntityArgs;
    type Output = ReadEntityOutput;

    fn run(&self, ctx: &ToolContext, a: ReadEntityArgs) -> Result<ReadEntityOutput, ToolError> {
        let store = ctx.store()?;
        let id = g::resolve_entity(&store, &a.name)?;
        let entity = g::entity(&store, &id)?.ok_or_else(|| ToolError::NotFound {
            what: "entity",
            name: a.name.clone(),
            nearest: Vec::new(),
        })?;
        let abs = ctx.resolve_path(&entity.file)?;
        let bytes = crate::confine::read_regular(ctx.root(), &abs)
            .map_err(|e| ToolError::Io(format!("{}: {e}", entity.file)))?;
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let start = decorators_from(&lines, entity.start_line.max(1) as usize);
        let end = (entity.end_line.max(entity.start_line) as usize).max(start);
        let read = super::fs::ReadFile
            .run(ctx, super::fs::ReadFileArgs { path: entity.file.clone(), start_line: start, end_line: Some(end) })?;
        Ok(ReadEntityOutput {
            entity,
            start_line: read.start_line,
            end_line: read.end_line,
            content: read.content,
            truncated: read.truncated,
            note: read.note,
        })
    }
}
