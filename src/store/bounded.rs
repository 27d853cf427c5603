//! Bounded queries: a script that nests too deep is refused before Cozo parses it (its
//! recursive-descent parser overflows the stack at a few thousand levels), and a running
//! query is killed through Cozo's own cancellation (`::running` / `::kill`) when it
//! outlives its time or the process grows past its memory bound (a recursive rule on a
//! cycle grows without end). Nothing is left running: the query's thread is the caller's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cozo::{DataValue, NamedRows, ScriptMutability};

use super::{Store, StoreError};

/// The deepest bracket nesting a script may have.
pub const MAX_NESTING: usize = 64;

/// What one query may use.
#[derive(Debug, Clone, Copy)]
pub struct QueryBounds {
    pub timeout: Duration,
    /// Growth of the process's resident memory while the query runs.
    pub max_memory_bytes: u64,
}

/// The default query time: `reproagent query --timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a query may grow the process by.
pub const DEFAULT_MAX_MEMORY: u64 = 2 << 30;

impl Default for QueryBounds {
    fn default() -> Self {
        QueryBounds { timeout: DEFAULT_TIMEOUT, max_memory_bytes: DEFAULT_MAX_MEMORY }
    }
}

/// Refuse a script whose brackets nest deeper than [`MAX_NESTING`], saying where. Strings
/// and comments are skipped.
pub fn check_nesting(script: &str) -> Result<(), String> {
    let mut depth = 0usize;
    let (mut line, mut col) = (1usize, 0usize);
    let mut chars = script.chars().peekable();
    let mut in_str: Option<char> = None;
    let mut line_comment = false;
    let mut block_comment = false;
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            col = 0;
            line_comment = false;
            continue;
        }
        col += 1;
        if line_comment {
            continue;
        }
        if block_comment {
            if c == '*' && chars.peek() == Some(&'/') {
                chars.next();
                col += 1;
                block_comment = false;
            }
            continue;
        }
        if let Some(q) = in_str {
            if c == '\\' {
                if chars.next().is_some() {
                    col += 1;
                }
            } else if c == q {
                in_str = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => in_str = Some(c),
            '#' => line_comment = true,
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                col += 1;
                block_comment = true;
            }
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(format!(
                        "the script nests brackets more than {MAX_NESTING} deep at line {line}, column {col}; write the expression flatter (split it into rules)"
                    ));
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Resident memory of this process, in bytes (Linux; 0 elsewhere).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

impl Store {
    fn running_ids(&self) -> BTreeSet<i64> {
        match self.db.run_script("::running", BTreeMap::new(), ScriptMutability::Immutable) {
            Ok(r) => r.rows.iter().filter_map(|row| row.first().and_then(|v| v.get_int())).collect(),
            Err(_) => BTreeSet::new(),
        }
    }

    /// Run a read-only script within `bounds`: refused when it nests too deep, killed when
    /// it runs too long or grows the process too much, with an error that says which.
    pub fn query_bounded(
        &self,
        script: &str,
        params: BTreeMap<String, DataValue>,
        bounds: &QueryBounds,
    ) -> Result<NamedRows, StoreError> {
        check_nesting(script).map_err(StoreError::Db)?;
        let script = &*super::with_rules(script).map_err(StoreError::Db)?;
        let before = self.running_ids();
        let base_rss = rss_bytes();
        let started = Instant::now();
        let (done, wait) = mpsc::channel::<()>();
        let stopped: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
        let result = std::thread::scope(|scope| {
            let stopped = &stopped;
            let before = &before;
            scope.spawn(move || loop {
                match wait.recv_timeout(Duration::from_millis(20)) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let grown = rss_bytes().saturating_sub(base_rss);
                let why = if started.elapsed() > bounds.timeout {
                    Some(format!("ran past its time limit of {} s", bounds.timeout.as_secs_f64()))
                } else if base_rss > 0 && grown > bounds.max_memory_bytes {
                    Some(format!("grew the process by over {} MiB", bounds.max_memory_bytes >> 20))
                } else {
                    None
                };
                if let Some(why) = why {
                    if let Ok(mut s) = stopped.lock() {
                        s.get_or_insert(why);
                    }
                    for id in self.running_ids().difference(before) {
                        let _ =
                            self.db.run_script(&format!("::kill {id}"), BTreeMap::new(), ScriptMutability::Immutable);
                    }
                }
            });
            let r = self.query(script, params);
            let _ = done.send(());
            r
        });
        let why = stopped.lock().ok().and_then(|s| s.clone());
        match (result, why) {
            (Err(_), Some(why)) => Err(StoreError::Db(format!(
                "query stopped: it {why}; a recursive rule over a cycle grows without end: bound it (a depth column, `d < 10`) or pass --timeout"
            ))),
            (r, _) => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_counted_outside_strings_and_comments() {
        assert!(check_nesting(&"(".repeat(MAX_NESTING)).is_ok());
        let deep = format!("?[x] := x = {}1{}", "(".repeat(10_000), ")".repeat(10_000));
        let e = check_nesting(&deep).unwrap_err();
        assert!(e.contains("line 1, column 77"), "{e}");
        let quoted = format!("?[x] := x = \"{}\" # {}\n/* {} */", "(".repeat(500), "[".repeat(500), "{".repeat(500));
        assert!(check_nesting(&quoted).is_ok());
    }
}
