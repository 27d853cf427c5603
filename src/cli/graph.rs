//! `reproagent graph callers|callees|path|class|imports|find|tests`: the canned queries.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::graph::{Edge, EntityInfo};
use crate::tools::graph as tg;
use crate::tools::{ToolContext, ToolError, TypedTool};

/// The canned graph queries. ENTITY is an id (`path:Class.method`), a name or a
/// qualified name; an ambiguous name lists the candidates.
#[derive(Args, Debug)]
pub struct GraphArgs {
    #[command(subcommand)]
    pub query: GraphQuery,
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".", global = true)]
    pub repo: PathBuf,
    /// Print as JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum GraphQuery {
    /// Who calls ENTITY, transitively up to --depth calls.
    Callers(WalkArgs),
    /// What ENTITY calls, transitively up to --depth calls.
    Callees(WalkArgs),
    /// Call chains from FROM to TO.
    Path {
        from: String,
        to: String,
        /// At most this many calls in a chain (at most 8).
        #[arg(long, default_value_t = 5)]
        depth: usize,
        /// At most this many chains, shortest first (at most 50).
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Follow only edges at least this sure (0..1).
        #[arg(long, default_value_t = 0.0)]
        min_confidence: f64,
    },
    /// A class or interface: bases, ancestors, subclasses, methods, fields, overrides.
    Class { entity: String },
    /// What FILE imports, and who imports it or anything defined in it.
    Imports {
        file: String,
        /// At most this many rows of each list (at most 500).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Entities by id, name, qualified-name suffix or substring.
    Find {
        name: String,
        /// Only this kind (module, class, interface, enum, function, method, field).
        #[arg(long)]
        kind: Option<String>,
        /// At most this many (at most 200).
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Tests that reach ENTITY through certain call edges.
    Tests {
        entity: String,
        /// At most this many tests (at most 500).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
}

#[derive(Args, Debug)]
pub struct WalkArgs {
    pub entity: String,
    /// How many calls away to go (at most 5).
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Follow only edges at least this sure (0..1): 0.5 leaves out bare-name guesses.
    #[arg(long, default_value_t = 0.0)]
    pub min_confidence: f64,
    /// At most this many edges (at most 500); the note says how to page.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Skip this many edges.
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// Leave out edges from (callers) or into (callees) test files.
    #[arg(long)]
    pub exclude_tests: bool,
}

fn fail(e: ToolError) -> anyhow::Error {
    super::with_hint(e.to_string(), e.hint().as_deref())
}

/// A tool's note (a bound that cut the answer, how to page) goes to stderr.
fn note(n: &Option<String>) {
    if let Some(n) = n {
        eprintln!("note: {n}");
    }
}

fn json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn print_edges(edges: &[Edge]) {
    let rows: Vec<Vec<String>> = edges
        .iter()
        .map(|e| {
            vec![
                e.depth.to_string(),
                e.caller.clone(),
                e.callee.clone(),
                e.line.to_string(),
                e.how.clone(),
                format!("{:.2}", e.confidence),
            ]
        })
        .collect();
    let h: Vec<String> =
        ["depth", "caller", "callee", "line", "how", "confidence"].iter().map(|s| s.to_string()).collect();
    super::table::print(&h, &rows);
}

fn print_entities(es: &[EntityInfo]) {
    let rows: Vec<Vec<String>> = es
        .iter()
        .map(|e| vec![e.id.clone(), e.kind.clone(), format!("{}:{}-{}", e.file, e.start_line, e.end_line)])
        .collect();
    let h: Vec<String> = ["id", "kind", "where"].iter().map(|s| s.to_string()).collect();
    super::table::print(&h, &rows);
}

/// Each query is the typed tool the MCP server and the agent call (`callers`,
/// `callees`, `call_chain`, `class_structure`, `imports`, `find_entity`, `tests_for`), so
/// the CLI answers with the same bounds, freshness check and errors.
pub fn run(args: GraphArgs) -> anyhow::Result<()> {
    let ctx = ToolContext::new(&args.repo).map_err(fail)?;
    let as_json = args.json;
    match args.query {
        GraphQuery::Callers(w) | GraphQuery::Callees(w) if w.depth == 0 => {
            let _ = w;
            anyhow::bail!("--depth must be at least 1")
        }
        GraphQuery::Callers(w) | GraphQuery::Callees(w) if w.depth > 5 => {
            anyhow::bail!("--depth {} is too deep: at most 5 calls away", w.depth)
        }
        q @ (GraphQuery::Callers(_) | GraphQuery::Callees(_)) => {
            let up = matches!(q, GraphQuery::Callers(_));
            let (GraphQuery::Callers(w) | GraphQuery::Callees(w)) = q else { unreachable!() };
            let a = tg::WalkArgs {
                name: w.entity,
                depth: w.depth,
                min_confidence: w.min_confidence,
                offset: w.offset,
                limit: w.limit,
                exclude_tests: w.exclude_tests,
                group: false,
            };
            let out = if up { tg::Callers.run(&ctx, a) } else { tg::Callees.run(&ctx, a) }.map_err(fail)?;
            note(&out.page.note);
            if as_json {
                return json(&out);
            }
            print_edges(&out.edges);
            Ok(())
        }
        GraphQuery::Path { from, to, depth, limit, min_confidence } => {
            let out = tg::CallChain
                .run(&ctx, tg::CallChainArgs { from, to, max_depth: depth, limit, min_confidence })
                .map_err(fail)?;
            note(&out.note);
            if as_json {
                return json(&out);
            }
            if out.chains.is_empty() {
                println!("no call chain from {} to {} within {depth} calls", out.from, out.to);
            }
            for p in &out.chains {
                let mut s = out.from.clone();
                for e in p {
                    s.push_str(&format!("\n  -> {} (line {}, {}, {:.2})", e.callee, e.line, e.how, e.confidence));
                }
                println!("{s}\n");
            }
            Ok(())
        }
        GraphQuery::Class { entity } => {
            let c = tg::ClassStructure.run(&ctx, tg::EntityArgs { name: entity }).map_err(fail)?;
            note(&c.note);
            if as_json {
                return json(&c);
            }
            println!("{} {} ({}:{}-{})", c.class.kind, c.class.id, c.class.file, c.class.start_line, c.class.end_line);
            for b in &c.bases {
                println!("  base {} -> {}", b.name, if b.id.is_empty() { "(outside the repository)" } else { &b.id });
            }
            if !c.ancestors.is_empty() {
                println!("  ancestors: {}", c.ancestors.join(", "));
            }
            for s in &c.subclasses {
                println!("  subclass {s}");
            }
            for m in &c.methods {
                let over = c
                    .overrides
                    .iter()
                    .find(|o| o.method == m.id)
                    .map(|o| format!("  (overrides {})", o.overrides))
                    .unwrap_or_default();
                println!("  {} {}{over}", m.kind, m.id);
            }
            for f in &c.fields {
                println!("  field {}", f.id);
            }
            Ok(())
        }
        GraphQuery::Imports { file, limit, offset } => {
            let i = tg::Imports.run(&ctx, tg::ImportsArgs { path: file, offset, limit }).map_err(fail)?;
            note(&i.imports_page.note);
            note(&i.imported_by_page.note);
            if as_json {
                return json(&i);
            }
            println!("{} imports:", i.file);
            for r in &i.imports {
                let name = if r.name.is_empty() { String::new() } else { format!(" {}", r.name) };
                let alias = if r.alias.is_empty() { String::new() } else { format!(" as {}", r.alias) };
                let t = if r.target.is_empty() { "(outside the repository)".to_string() } else { r.target.clone() };
                println!("  {}: {}{name}{alias} -> {t}", r.line, r.module);
            }
            println!("imported by:");
            for r in &i.imported_by {
                println!("  {}:{} -> {}", r.file, r.line, r.target);
            }
            Ok(())
        }
        GraphQuery::Find { name, kind, limit } => {
            let out = tg::FindEntity.run(&ctx, tg::FindEntityArgs { name: name.clone(), kind, limit }).map_err(fail)?;
            if out.matched != "exact" {
                // Nothing matched: the nearest names make the error, as for any other miss.
                let nearest = out.entities.into_iter().map(|e| e.id).collect();
                return Err(fail(ToolError::NotFound { what: "entity", name, nearest }));
            }
            note(&out.note);
            if as_json {
                return json(&out);
            }
            print_entities(&out.entities);
            Ok(())
        }
        GraphQuery::Tests { entity, limit, offset } => {
            let out = tg::TestsFor.run(&ctx, tg::TestsForArgs { name: entity, offset, limit }).map_err(fail)?;
            note(&out.page.note);
            if as_json {
                return json(&out);
            }
            if let Some(why) = &out.none_because {
                println!("no test reaches {}: {why}", out.entity);
            }
            for t in &out.tests {
                println!("{t}");
            }
            Ok(())
        }
    }
}
