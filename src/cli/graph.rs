//! `reproagent graph callers|callees|path|class|imports|find|tests`: the canned queries.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::graph::{self, Edge, EntityInfo, GraphError};
use crate::store::{self, Store};

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
        /// At most this many calls in a chain.
        #[arg(long, default_value_t = 5)]
        depth: usize,
        /// At most this many chains, shortest first.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Follow only edges at least this sure (0..1).
        #[arg(long, default_value_t = 0.0)]
        min_confidence: f64,
    },
    /// A class or interface: bases, ancestors, subclasses, methods, fields, overrides.
    Class { entity: String },
    /// What FILE imports, and who imports it or anything defined in it.
    Imports { file: String },
    /// Entities by id, name, qualified-name suffix or substring.
    Find {
        name: String,
        /// Only this kind (module, class, interface, enum, function, method, field).
        #[arg(long)]
        kind: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Tests that reach ENTITY through certain call edges.
    Tests { entity: String },
}

#[derive(Args, Debug)]
pub struct WalkArgs {
    pub entity: String,
    /// How many calls away to go.
    #[arg(long, default_value_t = 1)]
    pub depth: usize,
    /// Follow only edges at least this sure (0..1): 0.5 leaves out bare-name guesses.
    #[arg(long, default_value_t = 0.0)]
    pub min_confidence: f64,
}

fn fail(e: GraphError) -> anyhow::Error {
    super::with_hint(e.to_string(), e.hint())
}

/// A walk's edges; when a bound stopped it, a note on stderr says where.
fn print_walk(walk: graph::Walk, json: bool) -> anyhow::Result<()> {
    if let Some(cut) = &walk.truncated {
        eprintln!("note: truncated: {cut}");
    }
    print_edges(&walk.edges, json)
}

fn print_edges(edges: &[Edge], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(edges)?);
        return Ok(());
    }
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
    Ok(())
}

fn print_entities(es: &[EntityInfo]) {
    let rows: Vec<Vec<String>> = es
        .iter()
        .map(|e| vec![e.id.clone(), e.kind.clone(), format!("{}:{}-{}", e.file, e.start_line, e.end_line)])
        .collect();
    let h: Vec<String> = ["id", "kind", "where"].iter().map(|s| s.to_string()).collect();
    super::table::print(&h, &rows);
}

fn open(repo: &std::path::Path) -> anyhow::Result<Store> {
    store::open(&store::db_path(repo)).map_err(|e| super::with_hint(e.to_string(), e.hint()))
}

pub fn run(args: GraphArgs) -> anyhow::Result<()> {
    let store = open(&args.repo)?;
    let json = args.json;
    match args.query {
        GraphQuery::Callers(w) | GraphQuery::Callees(w) if w.depth == 0 => {
            let _ = w;
            anyhow::bail!("--depth must be at least 1")
        }
        GraphQuery::Callers(w) => {
            let id = graph::resolve_entity(&store, &w.entity).map_err(fail)?;
            if let Some(note) = graph::unattributed_note(&store, &id).map_err(fail)? {
                eprintln!("note: {note}");
            }
            print_walk(graph::walk(&store, &id, w.depth, w.min_confidence, true).map_err(fail)?, json)
        }
        GraphQuery::Callees(w) => {
            let id = graph::resolve_entity(&store, &w.entity).map_err(fail)?;
            print_walk(graph::walk(&store, &id, w.depth, w.min_confidence, false).map_err(fail)?, json)
        }
        GraphQuery::Path { from, to, depth, limit, min_confidence } => {
            let a = graph::resolve_entity(&store, &from).map_err(fail)?;
            let b = graph::resolve_entity(&store, &to).map_err(fail)?;
            let (paths, cut) = graph::paths_bounded(&store, &a, &b, depth, min_confidence, limit).map_err(fail)?;
            if let Some(cut) = cut {
                eprintln!("note: truncated: {cut}");
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&paths)?);
            } else if paths.is_empty() {
                println!("no call chain from {a} to {b} within {depth} calls");
            } else {
                for p in &paths {
                    let mut s = a.clone();
                    for e in p {
                        s.push_str(&format!("\n  -> {} (line {}, {}, {:.2})", e.callee, e.line, e.how, e.confidence));
                    }
                    println!("{s}\n");
                }
            }
            Ok(())
        }
        GraphQuery::Class { entity } => {
            let id = graph::resolve_entity(&store, &entity).map_err(fail)?;
            let c = graph::class(&store, &id).map_err(fail)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&c)?);
                return Ok(());
            }
            println!("{} {} ({}:{}-{})", c.class.kind, c.class.id, c.class.file, c.class.start_line, c.class.end_line);
            for (name, b) in &c.bases {
                println!("  base {name} -> {}", if b.is_empty() { "(outside the repository)" } else { b });
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
                    .find(|(x, _)| *x == m.id)
                    .map(|(_, a)| format!("  (overrides {a})"))
                    .unwrap_or_default();
                println!("  {} {}{over}", m.kind, m.id);
            }
            for f in &c.fields {
                println!("  field {}", f.id);
            }
            Ok(())
        }
        GraphQuery::Imports { file } => {
            let i = graph::imports(&store, &file).map_err(fail)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&i)?);
                return Ok(());
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
            let es = graph::find(&store, &name, kind.as_deref(), limit).map_err(fail)?;
            if es.is_empty() {
                let near = graph::nearest(&store, &name, 5).map_err(fail)?;
                return Err(fail(GraphError::NotFound { name, nearest: near }));
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&es)?);
            } else {
                print_entities(&es);
            }
            Ok(())
        }
        GraphQuery::Tests { entity } => {
            let id = graph::resolve_entity(&store, &entity).map_err(fail)?;
            let tests = graph::tests_for(&store, &id).map_err(fail)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tests)?);
            } else if tests.is_empty() {
                println!("no test reaches {id} through certain call edges");
            } else {
                for t in tests {
                    println!("{t}");
                }
            }
            Ok(())
        }
    }
}
