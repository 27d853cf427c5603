//! Cassettes: a run's model calls on disk, so the run replays offline and tests need no key.
//!
//! A cassette is JSONL. The first line is a header (`{"cassette":1,"model":{...}}`, the
//! recording model's [`ModelInfo`]); each further line is one call in order:
//! `{"index":N,"request":{...},"response":{...}}`, or `"error":"..."` in place of the
//! response when the call failed. The request is the [`ChatRequest`] as JSON (messages,
//! tools, sampling overrides): it never holds the key or any header. Responses keep
//! their usage, latency included, so a replayed run writes the same artifacts; latency
//! is never part of matching, since only requests are matched.
//!
//! [`Replayer`] serves the calls in order and refuses a request that differs from the
//! recorded one, naming the call and the first differing JSON path (`messages[3].content`).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{excerpt, ChatModel, ChatRequest, ChatResponse, ModelError, ModelInfo};

pub const CASSETTE_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Header {
    cassette: u32,
    model: ModelInfo,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    index: usize,
    request: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    response: Option<ChatResponse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The form of a request that is recorded and matched.
pub fn normalize(req: &ChatRequest) -> Value {
    serde_json::to_value(req).unwrap_or(Value::Null)
}

fn cassette_err(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Cassette { path: path.display().to_string(), message: message.into() }
}

/// Wraps a model and appends every call to a cassette as it happens (flushed per call, so
/// a killed run keeps the calls it made).
pub struct Recorder<M: ChatModel> {
    inner: M,
    path: PathBuf,
    state: Mutex<(BufWriter<File>, usize)>,
}

impl<M: ChatModel> Recorder<M> {
    /// Create (or truncate) the cassette at `path` and write its header.
    pub fn create(path: &Path, inner: M) -> Result<Recorder<M>, ModelError> {
        let file = File::create(path).map_err(|e| cassette_err(path, e.to_string()))?;
        let mut w = BufWriter::new(file);
        let header = Header { cassette: CASSETTE_VERSION, model: inner.describe() };
        write_line(&mut w, &header).map_err(|e| cassette_err(path, e))?;
        Ok(Recorder { inner, path: path.to_path_buf(), state: Mutex::new((w, 0)) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn into_inner(self) -> M {
        self.inner
    }
}

fn write_line<T: Serialize>(w: &mut BufWriter<File>, value: &T) -> Result<(), String> {
    let line = serde_json::to_string(value).map_err(|e| e.to_string())?;
    w.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    w.write_all(b"\n").map_err(|e| e.to_string())?;
    w.flush().map_err(|e| e.to_string())
}

impl<M: ChatModel> ChatModel for Recorder<M> {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        // The lock is held across the call so that lines are in call order.
        let mut state = self.state.lock().map_err(|_| cassette_err(&self.path, "a recording thread panicked"))?;
        let result = self.inner.chat(req);
        let (w, index) = &mut *state;
        let entry = Entry {
            index: *index,
            request: normalize(req),
            response: result.as_ref().ok().cloned(),
            error: result.as_ref().err().map(|e| e.to_string()),
        };
        write_line(w, &entry).map_err(|e| cassette_err(&self.path, e))?;
        *index += 1;
        result
    }

    fn describe(&self) -> ModelInfo {
        self.inner.describe()
    }
}

/// Serves a cassette back, in order, with no network.
pub struct Replayer {
    path: PathBuf,
    info: ModelInfo,
    entries: Vec<Entry>,
    next: Mutex<usize>,
}

impl Replayer {
    pub fn open(path: &Path) -> Result<Replayer, ModelError> {
        let file = File::open(path).map_err(|e| cassette_err(path, e.to_string()))?;
        let mut lines = BufReader::new(file).lines().enumerate();
        let header: Header = loop {
            match lines.next() {
                None => return Err(cassette_err(path, "empty file, no header")),
                Some((n, line)) => {
                    let line = line.map_err(|e| cassette_err(path, e.to_string()))?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    break serde_json::from_str(&line)
                        .map_err(|e| cassette_err(path, format!("line {}: not a cassette header: {e}", n + 1)))?;
                }
            }
        };
        if header.cassette != CASSETTE_VERSION {
            return Err(cassette_err(
                path,
                format!("cassette format {} (this reproagent reads {CASSETTE_VERSION})", header.cassette),
            ));
        }
        let mut entries = Vec::new();
        for (n, line) in lines {
            let line = line.map_err(|e| cassette_err(path, e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let entry: Entry =
                serde_json::from_str(&line).map_err(|e| cassette_err(path, format!("line {}: {e}", n + 1)))?;
            if entry.index != entries.len() {
                return Err(cassette_err(
                    path,
                    format!("line {}: call {} where call {} was expected", n + 1, entry.index, entries.len()),
                ));
            }
            if entry.response.is_none() && entry.error.is_none() {
                return Err(cassette_err(path, format!("line {}: a call with neither response nor error", n + 1)));
            }
            entries.push(entry);
        }
        Ok(Replayer { path: path.to_path_buf(), info: header.model, entries, next: Mutex::new(0) })
    }

    /// Calls in the cassette.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Calls not served yet: a replayed run that ends with some left made fewer calls
    /// than the recorded one.
    pub fn remaining(&self) -> usize {
        let next = self.next.lock().map_or(0, |n| *n);
        self.entries.len().saturating_sub(next)
    }
}

impl ChatModel for Replayer {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let mut next = self.next.lock().map_err(|_| cassette_err(&self.path, "a replaying thread panicked"))?;
        let index = *next;
        let Some(entry) = self.entries.get(index) else {
            return Err(ModelError::ReplayExhausted { index, recorded: self.entries.len() });
        };
        let actual = normalize(req);
        if let Some((path, recorded, now)) = first_difference(&entry.request, &actual) {
            return Err(ModelError::ReplayMismatch { index, path, recorded, actual: now });
        }
        *next += 1;
        match (&entry.response, &entry.error) {
            (Some(resp), _) => Ok(resp.clone()),
            (None, Some(err)) => Err(ModelError::Recorded(err.clone())),
            (None, None) => Err(cassette_err(&self.path, format!("call {index} has neither response nor error"))),
        }
    }

    /// The recording model's description, so the replayed run's record names it.
    fn describe(&self) -> ModelInfo {
        self.info.clone()
    }
}

fn show(v: Option<&Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => excerpt(&v.to_string(), 80),
    }
}

/// The first JSON path at which two values differ (keys in sorted order, arrays by
/// index), with both sides shown briefly; `None` when they are equal.
pub fn first_difference(recorded: &Value, actual: &Value) -> Option<(String, String, String)> {
    fn walk(a: Option<&Value>, b: Option<&Value>, path: &str) -> Option<(String, String, String)> {
        let here = || Some((if path.is_empty() { "(root)".to_string() } else { path.to_string() }, show(a), show(b)));
        match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|k| {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(x.get(k), y.get(k), &p)
                })
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) => {
                (0..x.len().max(y.len())).find_map(|i| walk(x.get(i), y.get(i), &format!("{path}[{i}]")))
            }
            (a, b) if a == b => None,
            _ => here(),
        }
    }
    walk(Some(recorded), Some(actual), "")
}
