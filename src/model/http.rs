//! [`HttpModel`]: a blocking client for `POST {base_url}/chat/completions`.
//!
//! Retries: 429 (after the server's `retry-after-ms` or `Retry-After` when it gives one,
//! capped), 5xx, refused or dropped connections and timeouts, with exponential backoff
//! and jitter, bounded by `max_retries` and by the total `retry_budget`, which also cuts
//! an attempt's timeout: with the defaults, a server that never answers costs a minute. The jitter is
//! drawn from the seed when one is configured, so a seeded run waits the same way twice.
//! Nothing else is retried: a refused key, a missing model, a refused request or a body
//! that is not a chat completion ends the call at once with its own error.

use std::error::Error as _;
use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::config::ModelConfig;
use super::{excerpt, ChatModel, ChatRequest, ChatResponse, Message, ModelError, ModelInfo, Role, ToolCall, Usage};

/// How much of a body an error message quotes.
const EXCERPT_CHARS: usize = 200;
const USER_AGENT: &str = concat!("reproagent/", env!("CARGO_PKG_VERSION"));

/// An OpenAI-compatible chat-completions endpoint.
pub struct HttpModel {
    config: ModelConfig,
    url: String,
    agent: ureq::Agent,
}

/// Why an attempt failed in a way worth retrying.
enum Fault {
    RateLimited { message: String, retry_after: Option<Duration> },
    Server { status: u16, message: String },
    Unreachable(String),
    Dropped(String),
    Timeout,
}

impl HttpModel {
    pub fn new(config: ModelConfig) -> HttpModel {
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        // No proxy from the environment: the endpoint is what the user configured.
        let agent = ureq::AgentBuilder::new().timeout(config.timeout).user_agent(USER_AGENT).build();
        HttpModel { config, url, agent }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The JSON body sent for `req`: the model, the messages and tools in the wire format,
    /// and the sampling settings (the request's over the configured ones).
    pub fn request_body(&self, req: &ChatRequest) -> Value {
        let mut body = Map::new();
        let model = req.model.clone().unwrap_or_else(|| self.config.model.clone());
        body.insert("model".into(), Value::String(model));
        body.insert("messages".into(), Value::Array(req.messages.iter().map(Message::to_wire).collect()));
        if !req.tools.is_empty() {
            body.insert("tools".into(), Value::Array(req.tools.iter().map(|t| t.to_wire()).collect()));
        }
        let s = req.sampling.over(&self.config.sampling);
        if let Some(t) = s.temperature {
            body.insert("temperature".into(), Value::from(t));
        }
        if let Some(p) = s.top_p {
            body.insert("top_p".into(), Value::from(p));
        }
        if let Some(seed) = s.seed {
            body.insert("seed".into(), Value::from(seed));
        }
        if let Some(m) = s.max_tokens {
            body.insert("max_tokens".into(), Value::from(m));
        }
        if let Some(f) = &req.response_format {
            body.insert("response_format".into(), f.clone());
        }
        body.insert("stream".into(), Value::Bool(false));
        Value::Object(body)
    }

    /// One HTTP attempt: the body of a 200, a fault to retry, or an error that ends the call.
    fn attempt(&self, body: &str, timeout: Duration) -> Result<String, Result<Fault, ModelError>> {
        let mut r = self.agent.post(&self.url).set("Content-Type", "application/json").timeout(timeout);
        if let Some(key) = &self.config.api_key {
            r = r.set("Authorization", &format!("Bearer {}", key.expose()));
        }
        match r.send_string(body) {
            Ok(resp) => resp.into_string().map_err(|e| Ok(io_fault(&e))),
            Err(ureq::Error::Status(status, resp)) => {
                let retry_after = retry_after(&resp);
                let text = resp.into_string().unwrap_or_default();
                let message = error_message(&text);
                Err(match status {
                    401 | 403 => Err(ModelError::Auth {
                        status,
                        key_env: self.config.api_key_env.clone(),
                        key_set: self.config.api_key.is_some(),
                        message,
                    }),
                    404 => Err(ModelError::NotFound {
                        model: self.config.model.clone(),
                        endpoint: self.url.clone(),
                        message,
                    }),
                    429 => Ok(Fault::RateLimited { message, retry_after }),
                    500..=599 => Ok(Fault::Server { status, message }),
                    _ => Err(ModelError::Rejected { status, message }),
                })
            }
            Err(ureq::Error::Transport(t)) => Err(match t.kind() {
                ureq::ErrorKind::Dns | ureq::ErrorKind::ConnectionFailed => Ok(Fault::Unreachable(t.to_string())),
                ureq::ErrorKind::Io => Ok(match find_io_error(&t) {
                    Some(e) => io_fault(e),
                    None => Fault::Dropped(t.to_string()),
                }),
                ureq::ErrorKind::BadStatus | ureq::ErrorKind::BadHeader => {
                    Err(ModelError::BadResponse { reason: "not an HTTP response".into(), excerpt: t.to_string() })
                }
                _ => Err(ModelError::Config(format!("cannot call {}: {t}", self.url))),
            }),
        }
    }

    /// The wait before retry number `retry` (1-based): doubling from `backoff_base`, with
    /// jitter in [0.5, 1.0) of that, capped at `max_backoff`.
    fn backoff(&self, retry: u32, seed: Option<u64>) -> Duration {
        let base = self.config.backoff_base.as_secs_f64() * 2f64.powi(retry.saturating_sub(1).min(30) as i32);
        let noise = match seed {
            Some(s) => splitmix64(s ^ u64::from(retry).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            None => splitmix64(
                SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64) ^ u64::from(retry),
            ),
        };
        let factor = 0.5 + 0.5 * ((noise >> 11) as f64 / (1u64 << 53) as f64);
        Duration::from_secs_f64(base * factor).min(self.config.max_backoff)
    }

    fn fail(&self, fault: Fault, attempts: u32, waited: Duration) -> ModelError {
        match fault {
            Fault::RateLimited { message, .. } => {
                ModelError::RateLimited { attempts, waited_ms: waited.as_millis() as u64, message }
            }
            Fault::Server { status, message } => ModelError::Server { status, attempts, message },
            Fault::Unreachable(detail) => ModelError::Unreachable { endpoint: self.url.clone(), attempts, detail },
            Fault::Dropped(detail) => ModelError::Connection { endpoint: self.url.clone(), attempts, detail },
            Fault::Timeout => ModelError::Timeout { timeout_ms: self.config.timeout.as_millis() as u64, attempts },
        }
    }
}

impl ChatModel for HttpModel {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let body = self.request_body(req).to_string();
        let seed = req.sampling.over(&self.config.sampling).seed;
        let start = Instant::now();
        let mut attempts = 0u32;
        let mut waited = Duration::ZERO;
        loop {
            attempts += 1;
            // The retry budget bounds the whole call: a server that never answers is given up
            // on when it runs out, not a full timeout later.
            let left = self.config.retry_budget.saturating_sub(start.elapsed()).max(Duration::from_millis(100));
            let fault = match self.attempt(&body, self.config.timeout.min(left)) {
                Ok(text) => {
                    let asked = req.model.as_deref().unwrap_or(&self.config.model);
                    let mut resp = parse_completion(&text, asked)?;
                    resp.usage.cost_usd = self
                        .config
                        .prices
                        .cost(&resp.model, resp.usage.prompt_tokens, resp.usage.completion_tokens)
                        .or_else(|| {
                            self.config.prices.cost(asked, resp.usage.prompt_tokens, resp.usage.completion_tokens)
                        });
                    resp.usage.latency_ms = start.elapsed().as_millis() as u64;
                    resp.usage.attempts = attempts;
                    return Ok(resp);
                }
                Err(Err(fatal)) => return Err(fatal),
                Err(Ok(fault)) => fault,
            };
            if attempts > self.config.max_retries {
                return Err(self.fail(fault, attempts, waited));
            }
            let wait = match &fault {
                Fault::RateLimited { retry_after: Some(d), .. } => (*d).min(self.config.max_backoff),
                _ => self.backoff(attempts, seed),
            };
            if start.elapsed() + wait > self.config.retry_budget {
                return Err(self.fail(fault, attempts, waited));
            }
            std::thread::sleep(wait);
            waited += wait;
        }
    }

    fn describe(&self) -> ModelInfo {
        self.config.info()
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn io_fault(e: &io::Error) -> Fault {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Fault::Timeout,
        io::ErrorKind::ConnectionRefused => Fault::Unreachable(e.to_string()),
        _ => Fault::Dropped(e.to_string()),
    }
}

/// The first `io::Error` in an error's source chain.
fn find_io_error(e: &ureq::Transport) -> Option<&io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(err) = cur {
        if let Some(ioe) = err.downcast_ref::<io::Error>() {
            return Some(ioe);
        }
        cur = err.source();
    }
    None
}

/// `retry-after-ms` (OpenAI's) or `Retry-After` in seconds; an HTTP date is ignored.
fn retry_after(resp: &ureq::Response) -> Option<Duration> {
    if let Some(ms) = resp.header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return (ms.is_finite() && ms >= 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
    let secs = resp.header("retry-after")?.trim().parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// The `error.message` of an OpenAI-style error body, else an excerpt of the body.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message").or_else(|| v.get("error")).or_else(|| v.get("message")).and_then(Value::as_str)
    });
    match msg {
        Some(m) => excerpt(m, EXCERPT_CHARS),
        None if body.trim().is_empty() => "(empty body)".into(),
        None => excerpt(body, EXCERPT_CHARS),
    }
}

fn bad(reason: &str, body: &str) -> ModelError {
    ModelError::BadResponse { reason: reason.into(), excerpt: excerpt(body, EXCERPT_CHARS) }
}

/// A chat-completion body into a response (usage tokens filled; cost, latency and
/// attempts are the caller's).
pub fn parse_completion(body: &str, requested_model: &str) -> Result<ChatResponse, ModelError> {
    let v: Value = serde_json::from_str(body).map_err(|_| bad("not JSON", body))?;
    let Some(obj) = v.as_object() else {
        return Err(bad("not a JSON object", body));
    };
    if obj.get("choices").is_none() {
        if obj.get("error").is_some() {
            return Err(ModelError::BadResponse { reason: "an error object".into(), excerpt: error_message(body) });
        }
        return Err(bad("no choices", body));
    }
    let Some(choice) = obj.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
        return Err(bad("no choices", body));
    };
    let Some(msg) = choice.get("message").and_then(Value::as_object) else {
        return Err(bad("no message in the first choice", body));
    };
    let content = match msg.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        // Some servers send content parts: keep their text.
        Some(Value::Array(parts)) => {
            Some(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(""))
        }
        Some(_) => return Err(bad("message content is neither text nor null", body)),
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").filter(|c| !c.is_null()) {
        let Some(calls) = calls.as_array() else {
            return Err(bad("tool_calls is not a list", body));
        };
        for (i, call) in calls.iter().enumerate() {
            let Some(name) = call.pointer("/function/name").and_then(Value::as_str) else {
                return Err(bad("a tool call without a function name", body));
            };
            let id = call.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}"), str::to_string);
            // The protocol says a string; some servers send the object itself.
            let arguments = match call.pointer("/function/arguments") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            tool_calls.push(ToolCall { id, name: name.to_string(), arguments });
        }
    }
    let tokens = |k: &str| v.pointer(&format!("/usage/{k}")).and_then(Value::as_u64).unwrap_or(0);
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content, tool_calls, tool_call_id: None },
        finish_reason: choice.get("finish_reason").and_then(Value::as_str).map(str::to_string),
        model: obj.get("model").and_then(Value::as_str).unwrap_or(requested_model).to_string(),
        usage: Usage {
            prompt_tokens: tokens("prompt_tokens"),
            completion_tokens: tokens("completion_tokens"),
            ..Usage::default()
        },
    })
}
