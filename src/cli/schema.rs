//! `reproagent schema`: the relations, their columns, and a worked example for each.

use clap::Args;

use crate::store::{INDICES, RELATIONS, RULES};

/// Show the stored relations, their columns and indices, with an example query for each.
#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// (relation, what a row means, an example query).
pub const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "file",
        "one row per indexed source file; hash drives incremental re-indexing",
        "?[path, lines] := *file{path, lang: 'python', lines, is_test: false} :order -lines :limit 10",
    ),
    (
        "entity",
        "modules, classes, interfaces, enums, functions, methods, fields; id = path:Qualified.name",
        "?[id, kind, start_line] := *entity:by_name{name: 'save', id}, *entity{id, kind, start_line}",
    ),
    ("contains", "parent > child: module > class > method, function > nested function", "?[child] := *contains{parent: $class, child}"),
    (
        "calls",
        "resolved call edges; how: local, import, self, inherited, type (receiver's class tracked), name (bare-name guess); confidence 0..1",
        "# a transitive call chain: everything that reaches $id in at most 3 calls, with certain edges only\n\
         up[c, d] := *calls:by_callee{callee: $id, caller: c}, *calls{caller: c, callee: $id, confidence}, confidence >= 0.5, d = 1\n\
         up[c, d] := up[m, d0], d0 < 3, *calls:by_callee{callee: m, caller: c}, *calls{caller: c, callee: m, confidence}, confidence >= 0.5, d = d0 + 1\n\
         ?[c, min(d)] := up[c, d]",
    ),
    (
        "call_site",
        "every call as written, resolved or not (receiver as written); by name, a scan (the unresolved ones: `unresolved`, keyed by name)",
        "?[caller, line] := *call_site{caller, line, name: 'open'}",
    ),
    ("unresolved", "the call sites that got no edge, by name (receiver as written)", "?[count(caller)] := *unresolved{name: 'filter', caller}"),
    (
        "imports",
        "one row per imported binding; target: the entity or module it resolves to, null if outside the repo",
        "?[file, line, module] := *imports{file, line, module, target}, is_null(target)",
    ),
    ("inherits", "bases, superclasses and interfaces as written; base: the resolved entity, if any", "?[child] := *inherits:by_base{base: $class, child}"),
    (
        "test_of",
        "a rule, not stored (walked when asked): tests and the entities they reach through 1 to 3 certain call edges (confidence >= 0.5)",
        "?[test] := test_of[test, $id]",
    ),
];

pub fn run(args: SchemaArgs) -> anyhow::Result<()> {
    if args.json {
        let rels: Vec<serde_json::Value> = RELATIONS
            .iter()
            .map(|(name, keys, vals)| {
                let ex = EXAMPLES.iter().find(|e| e.0 == *name);
                serde_json::json!({
                    "relation": name,
                    "keys": keys,
                    "values": vals,
                    "indices": INDICES.iter().filter(|(i, _)| i.starts_with(&format!("{name}:"))).map(|(i, c)| format!("{i} {{{c}}}")).collect::<Vec<_>>(),
                    "about": ex.map(|e| e.1),
                    "example": ex.map(|e| e.2),
                })
            })
            .collect();
        let rules = RULES.iter().map(|(name, cols, _)| {
            let ex = EXAMPLES.iter().find(|e| e.0 == *name);
            serde_json::json!({
                "relation": name,
                "rule": true,
                "keys": cols,
                "values": "",
                "indices": Vec::<String>::new(),
                "about": ex.map(|e| e.1),
                "example": ex.map(|e| e.2),
            })
        });
        let rels: Vec<serde_json::Value> = rels.into_iter().chain(rules).collect();
        println!("{}", serde_json::to_string_pretty(&rels)?);
        return Ok(());
    }
    println!("Relations (query them with `reproagent query`; `$name` is a --param):\n");
    for (name, keys, vals) in RELATIONS {
        let cols = if vals.is_empty() { keys.to_string() } else { format!("{keys} => {vals}") };
        println!("{name} {{{cols}}}");
        if let Some(ex) = EXAMPLES.iter().find(|e| e.0 == *name) {
            println!("  {}", ex.1);
        }
        for (i, c) in INDICES.iter().filter(|(i, _)| i.starts_with(&format!("{name}:"))) {
            println!("  index {i} {{{c}}}");
        }
        if let Some(ex) = EXAMPLES.iter().find(|e| e.0 == *name) {
            for l in ex.2.lines() {
                println!("    {l}");
            }
        }
        println!();
    }
    println!("Rules (derived when a query uses them, not stored; write them with square brackets):\n");
    for (name, cols, _) in RULES {
        println!("{name}[{cols}]");
        if let Some(ex) = EXAMPLES.iter().find(|e| e.0 == *name) {
            println!("  {}", ex.1);
            for l in ex.2.lines() {
                println!("    {l}");
            }
        }
        println!();
    }
    println!("A lookup that binds columns which are not a prefix of a relation's key scans it");
    println!("whole: use the index whose columns start with what you bind (e.g. calls:by_callee).");
    Ok(())
}
