//! `reproagent query 'SCRIPT'`: read-only CozoScript over the stored relations.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use cozo::DataValue;

use crate::store;

/// Run a read-only CozoScript (Datalog) query over the graph.
///
/// `reproagent schema` lists the relations with example queries. Writes are refused.
/// Example: reproagent query '?[caller] := *calls:by_callee{callee: $id, caller}' --param id=pkg/a.py:f
#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The CozoScript to run.
    pub script: String,
    /// A parameter, `name=value`, used in the script as `$name`. The value is read as JSON
    /// when it parses as JSON (numbers, true/false, null, "quoted"), else as a string.
    #[arg(long = "param", short = 'p', value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
    /// Print rows as JSON: {"headers": [...], "rows": [[...]]}.
    #[arg(long)]
    pub json: bool,
    /// Stop the query after this many seconds (1 to 3600). A query is also stopped when it
    /// grows the process by 2 GiB, and refused when its brackets nest over 64 deep.
    #[arg(long, value_name = "SECONDS", default_value_t = store::bounded::DEFAULT_TIMEOUT.as_secs())]
    pub timeout: u64,
}

pub(crate) fn parse_params(raw: &[String]) -> anyhow::Result<BTreeMap<String, DataValue>> {
    let mut out = BTreeMap::new();
    for p in raw {
        let Some((k, v)) = p.split_once('=') else {
            anyhow::bail!("--param {p:?}: expected NAME=VALUE");
        };
        if k.is_empty() || !k.chars().all(|c| c.is_alphanumeric() || c == '_') {
            anyhow::bail!("--param {p:?}: the name must be letters, digits and _");
        }
        let value = match serde_json::from_str::<serde_json::Value>(v) {
            Ok(
                j @ (serde_json::Value::Number(_)
                | serde_json::Value::Bool(_)
                | serde_json::Value::Null
                | serde_json::Value::String(_)),
            ) => DataValue::from(j),
            _ => DataValue::from(v),
        };
        out.insert(k.to_string(), value);
    }
    Ok(out)
}

pub(crate) fn cell(v: &DataValue) -> String {
    match v {
        DataValue::Str(s) => s.to_string(),
        DataValue::Null => "null".into(),
        DataValue::Bool(b) => b.to_string(),
        DataValue::Num(cozo::Num::Int(i)) => i.to_string(),
        DataValue::Num(cozo::Num::Float(f)) => f.to_string(),
        other => serde_json::to_string(&serde_json::Value::from(other.clone())).unwrap_or_default(),
    }
}

pub fn run(args: QueryArgs) -> anyhow::Result<()> {
    if !(1..=3600).contains(&args.timeout) {
        anyhow::bail!("--timeout {}: expected 1 to 3600 seconds", args.timeout);
    }
    let params = parse_params(&args.params)?;
    let store = store::open(&store::db_path(&args.repo)).map_err(|e| super::with_hint(e.to_string(), e.hint()))?;
    let bounds =
        store::bounded::QueryBounds { timeout: std::time::Duration::from_secs(args.timeout), ..Default::default() };
    let rows = store.query_bounded(&args.script, params, &bounds).map_err(|e| {
        super::with_hint(format!("query: {e}"), Some("`reproagent schema` lists the relations and their columns"))
    })?;
    if args.json {
        let json = serde_json::json!({
            "headers": rows.headers,
            "rows": rows.rows.iter().map(|r| r.iter().map(|v| serde_json::Value::from(v.clone())).collect::<Vec<_>>()).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        let table: Vec<Vec<String>> = rows.rows.iter().map(|r| r.iter().map(cell).collect()).collect();
        super::table::print(&rows.headers, &table);
        eprintln!("{} rows", rows.rows.len());
    }
    Ok(())
}
