//! Stage memory: a compact evidence ledger passed from stage to stage.
//!
//! Every retrieval the model makes (a file read, a grep, a search, a graph query) leaves
//! one entry: what was read (the tool and its arguments), where (`path:lines`, the first
//! few places the result names) and the fact found there (the definitions a read showed,
//! the first matches of a search). The ledger is rendered into the prompts of the later
//! stages, so they start from what an earlier one established instead of reading it
//! again, and it is written to `ledger.json` in the run directory.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::excerpt;

/// Entries rendered into a prompt (the most recent ones).
pub const MAX_RENDERED: usize = 40;
/// Places kept per entry.
const MAX_PLACES: usize = 5;
/// Characters of a fact.
const FACT_CHARS: usize = 300;

/// One retrieval and what it found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// The stage that read it.
    pub stage: String,
    /// The tool and its arguments (compact JSON).
    pub tool: String,
    pub args: String,
    /// `path:start-end` of what the result names.
    #[serde(default)]
    pub places: Vec<String>,
    /// What was found there, in a line.
    pub fact: String,
    /// Later stages that made the same call again (what the ledger is meant to spare).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asked_again_by: Vec<String>,
}

/// The ledger of a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Ledger {
    pub entries: Vec<Entry>,
}

/// Tools whose results are not evidence about the code (reflection, runs in the sandbox
/// are kept: what a snippet printed is a fact).
fn ignored(tool: &str) -> bool {
    matches!(tool, "sequential_thinking")
}

impl Ledger {
    /// Note one tool call. A call already noted (same tool and arguments) is not noted
    /// again; when a later stage made it, that stage is counted in `asked_again_by`.
    pub fn note(&mut self, stage: &str, tool: &str, args: &Value, result: &Value, is_error: bool) {
        if ignored(tool) || is_error {
            return;
        }
        let args_s = compact(args);
        if let Some(e) = self.entries.iter_mut().find(|e| e.tool == tool && e.args == args_s) {
            if e.stage != stage {
                e.asked_again_by.push(stage.to_string());
            }
            return;
        }
        let mut places = Vec::new();
        let mut labels = Vec::new();
        walk(result, &mut places, &mut labels);
        let fact = match tool {
            "read_file" => read_fact(result),
            "run_python" | "run_command" | "run_test" => run_fact(result),
            _ if labels.is_empty() => "nothing found".to_string(),
            _ => labels.iter().take(4).cloned().collect::<Vec<_>>().join("; "),
        };
        places.dedup();
        places.truncate(MAX_PLACES);
        self.entries.push(Entry {
            stage: stage.into(),
            tool: tool.into(),
            args: args_s,
            places,
            fact: excerpt(&fact, FACT_CHARS),
            asked_again_by: Vec::new(),
        });
    }

    /// Calls a stage made that an earlier stage had already made, with the same
    /// arguments: the reads the ledger did not spare.
    pub fn repeats(&self) -> usize {
        self.entries.iter().map(|e| e.asked_again_by.len()).sum()
    }

    /// The entries of earlier stages, as a Markdown section for a prompt; empty when
    /// there are none.
    pub fn render(&self) -> String {
        if self.entries.is_empty() {
            return String::new();
        }
        let skip = self.entries.len().saturating_sub(MAX_RENDERED);
        let mut s = String::from(
            "## Evidence ledger (what earlier stages read and found; build on it, do not read it again)\n\n",
        );
        for e in self.entries.iter().skip(skip) {
            let at = if e.places.is_empty() { String::new() } else { format!(" at {}", e.places.join(", ")) };
            s.push_str(&format!("- [{}] `{}` {}{at}: {}\n", e.stage, e.tool, e.args, e.fact));
        }
        if skip > 0 {
            s.push_str(&format!("- ({skip} earlier entries in ledger.json)\n"));
        }
        s
    }

    /// The entries `stage` made (for `--resume`, which reuses a stage's artifact and
    /// must carry its evidence on too).
    pub fn of_stage(&self, stage: &str) -> impl Iterator<Item = &Entry> + '_ {
        let stage = stage.to_string();
        self.entries.iter().filter(move |e| e.stage == stage)
    }
}

fn compact(v: &Value) -> String {
    excerpt(&serde_json::to_string(v).unwrap_or_default(), 200)
}

/// `path:start-end` and a label of each object in the result that names a place.
fn walk(v: &Value, places: &mut Vec<String>, labels: &mut Vec<String>) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| walk(x, places, labels)),
        Value::Object(o) => {
            let path = o.get("path").or_else(|| o.get("file")).and_then(Value::as_str);
            let start = o.get("start_line").or_else(|| o.get("line")).and_then(Value::as_i64);
            if let (Some(p), Some(s)) = (path, start) {
                let end = o.get("end_line").and_then(Value::as_i64).filter(|e| *e > s);
                places.push(match end {
                    Some(e) => format!("{p}:{s}-{e}"),
                    None => format!("{p}:{s}"),
                });
                let label = ["id", "qualified_name", "name", "snippet", "text"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .map(|l| excerpt(l, 80));
                if let Some(l) = label {
                    labels.push(format!("{l} ({})", places.last().map(String::as_str).unwrap_or("")));
                }
            }
            for (k, x) in o {
                if matches!(x, Value::Array(_) | Value::Object(_)) && k != "before" && k != "after" {
                    walk(x, places, labels);
                }
            }
        }
        _ => {}
    }
}

/// A read's fact: the definitions in the lines read, else its first lines.
fn read_fact(v: &Value) -> String {
    let content = v.get("content").and_then(Value::as_str).unwrap_or("");
    let defs: Vec<String> = content
        .lines()
        .filter(|l| {
            let code = l.split_once('|').map(|x| x.1).unwrap_or(l).trim_start();
            ["def ", "async def ", "class ", "function ", "export ", "public ", "private ", "protected ", "static "]
                .iter()
                .any(|p| code.starts_with(p))
        })
        .take(8)
        .map(|l| l.trim().to_string())
        .collect();
    let total = v.get("total_lines").and_then(Value::as_u64).unwrap_or(0);
    if defs.is_empty() {
        format!("{total} lines; starts: {}", content.lines().take(2).map(str::trim).collect::<Vec<_>>().join(" / "))
    } else {
        format!("{total} lines; defines: {}", defs.join(" / "))
    }
}

/// A run's fact: its exit, the head of what it printed and the end of its errors (where
/// a traceback names the exception).
fn run_fact(v: &Value) -> String {
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").trim().to_string();
    let exit = v.get("exit_code").map(|e| e.to_string()).unwrap_or_else(|| text("status"));
    let stderr = text("stderr");
    let tail: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(2)..].join(" / ");
    let out = [excerpt(&text("stdout"), 120), excerpt(&tail, 160)]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    format!("exit {exit}: {out}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_read_notes_its_place_and_definitions_once() {
        let mut l = Ledger::default();
        let result = json!({"path": "a/slug.py", "start_line": 1, "end_line": 20, "total_lines": 20,
            "content": "   1 | import re\n   9 | def slugify(title):\n  11 |     first = words[0]\n"});
        l.note("localization", "read_file", &json!({"path": "a/slug.py"}), &result, false);
        l.note("root_cause", "read_file", &json!({"path": "a/slug.py"}), &result, false);
        l.note("root_cause", "sequential_thinking", &json!({}), &json!({}), false);
        assert_eq!(l.entries.len(), 1);
        assert_eq!(l.entries[0].asked_again_by, ["root_cause"]);
        assert_eq!(l.repeats(), 1);
        l.note("root_cause", "read_file", &json!({"path": "a/slug.py"}), &result, false);
        assert_eq!(l.repeats(), 2);
        assert_eq!(l.entries[0].places, ["a/slug.py:1-20"]);
        assert!(l.entries[0].fact.contains("def slugify(title)"), "{}", l.entries[0].fact);
        let r = l.render();
        assert!(r.contains("[localization] `read_file`") && r.contains("a/slug.py:1-20"), "{r}");
    }

    #[test]
    fn a_search_notes_the_places_it_found() {
        let mut l = Ledger::default();
        let result = json!({"query": "slugify", "hits": [
            {"kind": "function", "id": "a.slug.slugify", "path": "a/slug.py", "start_line": 9, "end_line": 14, "snippet": "def slugify"}]});
        l.note("localization", "search_code", &json!({"query": "slugify"}), &result, false);
        assert_eq!(l.entries[0].places, ["a/slug.py:9-14"]);
        assert!(l.entries[0].fact.contains("a.slug.slugify"));
        assert!(Ledger::default().render().is_empty());
    }

    #[test]
    fn a_run_notes_its_exit_and_the_exception_at_the_end_of_a_long_traceback() {
        let mut l = Ledger::default();
        let frames = "  File \"x.py\", line 1, in <module>\n    f()\n".repeat(20);
        let result = json!({"exit_code": 1, "stdout": "before\n",
            "stderr": format!("Traceback (most recent call last):\n{frames}IndexError: list index out of range\n")});
        l.note("test_plan", "run_python", &json!({"code": "f()"}), &result, false);
        let fact = &l.entries[0].fact;
        assert!(
            fact.starts_with("exit 1: before | ") && fact.ends_with("IndexError: list index out of range"),
            "{fact}"
        );
    }
}
