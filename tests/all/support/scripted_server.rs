//! A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.
//!
//! It serves a script of replies in the order requests arrive (text, tool calls, or
//! faults: an HTTP status with optional `Retry-After`, a dropped connection, a delay, a
//! garbage body; optionally with something done just before the reply goes out) and keeps every request it received, so a test can assert what the
//! client sent. A request past the end of the script gets a 500 saying so (and is kept).
//!
//! ```ignore
//! let server = ScriptedServer::start(vec![
//!     Reply::status(429).retry_after_ms(10),
//!     Reply::tool_call("search_code", json!({"query": "parse"})),
//!     Reply::text("done"),
//! ]);
//! let model = HttpModel::new(ModelConfig::new(server.base_url(), "test-model"));
//! ...
//! assert_eq!(server.requests()[1].body["model"], "test-model");
//! ```

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// One scripted reply.
#[derive(Clone, Debug)]
pub struct Reply {
    kind: Kind,
    delay: Option<Duration>,
    headers: Vec<(String, String)>,
    usage: (u64, u64),
    finish_reason: Option<String>,
    model: Option<String>,
    before: Option<Hook>,
}

/// Something a test does just before a reply goes out (say, change the tree the run reads).
#[derive(Clone)]
struct Hook(Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

#[derive(Clone, Debug)]
enum Kind {
    /// An assistant message: text and tool calls `(name, raw arguments)`.
    Completion { content: Option<String>, tool_calls: Vec<(String, String)> },
    /// A status with a JSON error body.
    Status(u16, String),
    /// Any status and body, verbatim.
    Raw(u16, String),
    /// Read the request, then close the connection without a byte.
    Drop,
}

impl Reply {
    fn of(kind: Kind) -> Reply {
        Reply { kind, delay: None, headers: Vec::new(), usage: (10, 5), finish_reason: None, model: None, before: None }
    }

    /// An assistant message with text content; finish_reason `stop`.
    pub fn text(content: &str) -> Reply {
        Reply::of(Kind::Completion { content: Some(content.into()), tool_calls: Vec::new() })
    }

    /// One tool call with JSON arguments; finish_reason `tool_calls`.
    pub fn tool_call(name: &str, arguments: Value) -> Reply {
        Reply::tool_calls(vec![(name, arguments)])
    }

    /// Several tool calls in one assistant turn.
    pub fn tool_calls(calls: Vec<(&str, Value)>) -> Reply {
        Reply::of(Kind::Completion {
            content: None,
            tool_calls: calls.into_iter().map(|(n, a)| (n.to_string(), a.to_string())).collect(),
        })
    }

    /// A tool call whose arguments string is sent verbatim (for invalid JSON).
    pub fn raw_tool_call(name: &str, raw_arguments: &str) -> Reply {
        Reply::of(Kind::Completion { content: None, tool_calls: vec![(name.into(), raw_arguments.into())] })
    }

    /// An error status with an OpenAI-style error body.
    pub fn status(code: u16) -> Reply {
        Reply::of(Kind::Status(code, format!("scripted status {code}")))
    }

    /// An error status with this error message.
    pub fn status_msg(code: u16, message: &str) -> Reply {
        Reply::of(Kind::Status(code, message.into()))
    }

    /// A response with this status and body, verbatim (garbage, half a completion...).
    pub fn raw(code: u16, body: &str) -> Reply {
        Reply::of(Kind::Raw(code, body.into()))
    }

    /// A 200 whose body is not a chat completion.
    pub fn garbage(body: &str) -> Reply {
        Reply::raw(200, body)
    }

    /// Close the connection after reading the request, without answering.
    pub fn drop_connection() -> Reply {
        Reply::of(Kind::Drop)
    }

    /// Wait this long before acting (past the client's timeout, say).
    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = Some(d);
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// `Retry-After: secs`.
    pub fn retry_after(self, secs: u64) -> Reply {
        self.header("Retry-After", &secs.to_string())
    }

    /// `retry-after-ms: ms` (OpenAI's header).
    pub fn retry_after_ms(self, ms: u64) -> Reply {
        self.header("retry-after-ms", &ms.to_string())
    }

    pub fn usage(mut self, prompt: u64, completion: u64) -> Reply {
        self.usage = (prompt, completion);
        self
    }

    pub fn finish_reason(mut self, r: &str) -> Reply {
        self.finish_reason = Some(r.into());
        self
    }

    /// Run `f` just before this reply is sent: the client sees its effect when it acts
    /// on the reply.
    pub fn before(mut self, f: impl Fn() + Send + Sync + 'static) -> Reply {
        self.before = Some(Hook(Arc::new(f)));
        self
    }

    /// The model name the completion reports (default: the one requested).
    pub fn model(mut self, m: &str) -> Reply {
        self.model = Some(m.into());
        self
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Value::Null` if it was not JSON; see `raw_body`).
    pub body: Value,
    pub raw_body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    received: Mutex<Vec<Received>>,
    served: Mutex<usize>,
    stop: AtomicBool,
}

pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl ScriptedServer {
    /// Listen on 127.0.0.1 (a free port) and serve `script` in order.
    pub fn start(script: Vec<Reply>) -> ScriptedServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            received: Mutex::new(Vec::new()),
            served: Mutex::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || handle(conn, &s));
            }
        });
        ScriptedServer { addr, shared, accept: Some(accept) }
    }

    /// `http://127.0.0.1:PORT/v1`: what a client's base URL should be.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Scripted replies not used yet.
    pub fn remaining(&self) -> usize {
        self.shared.script.lock().unwrap().len()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag; the port is free once it returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn read_request(conn: &mut TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let body = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    Some(Received { method, path, headers, body, raw_body })
}

fn handle(mut conn: TcpStream, s: &Shared) {
    if s.stop.load(Ordering::SeqCst) {
        return;
    }
    let Some(req) = read_request(&mut conn) else { return };
    let requested_model = req.body.get("model").and_then(Value::as_str).unwrap_or("unknown").to_string();
    // Take the reply and record the request under one lock order, so arrival order is
    // the order of both.
    let (reply, n) = {
        let mut script = s.script.lock().unwrap();
        let mut received = s.received.lock().unwrap();
        let mut served = s.served.lock().unwrap();
        received.push(req);
        *served += 1;
        (script.pop_front(), *served)
    };
    let Some(reply) = reply else {
        let _ = respond(&mut conn, 500, &[], &json!({"error": {"message": "the script is exhausted"}}).to_string());
        return;
    };
    if let Some(d) = reply.delay {
        std::thread::sleep(d);
    }
    if let Some(Hook(f)) = &reply.before {
        f();
    }
    match reply.kind {
        Kind::Drop => {
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
        Kind::Status(code, message) => {
            let body = json!({"error": {"message": message, "type": "scripted", "code": code}}).to_string();
            let _ = respond(&mut conn, code, &reply.headers, &body);
        }
        Kind::Raw(code, body) => {
            let _ = respond(&mut conn, code, &reply.headers, &body);
        }
        Kind::Completion { content, tool_calls } => {
            let calls: Vec<Value> = tool_calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_{n}_{i}"), "type": "function", "function": {"name": name, "arguments": args}})
                })
                .collect();
            let finish = reply
                .finish_reason
                .clone()
                .unwrap_or_else(|| if calls.is_empty() { "stop" } else { "tool_calls" }.into());
            let mut message = json!({"role": "assistant", "content": content});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            let body = json!({
                "id": format!("chatcmpl-{n}"),
                "object": "chat.completion",
                "created": 0,
                "model": reply.model.clone().unwrap_or(requested_model),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": reply.usage.0, "completion_tokens": reply.usage.1,
                          "total_tokens": reply.usage.0 + reply.usage.1},
            });
            let _ = respond(&mut conn, 200, &reply.headers, &body.to_string());
        }
    }
}

fn respond(conn: &mut TcpStream, code: u16, headers: &[(String, String)], body: &str) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(code),
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    conn.write_all(out.as_bytes())?;
    conn.flush()
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
