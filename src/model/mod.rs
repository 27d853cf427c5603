//! The model client: any OpenAI-compatible chat-completions endpoint with tool calling
//! (OpenAI, vLLM, Ollama, llama.cpp server, DeepSeek, Qwen, GLM), behind one synchronous
//! trait, [`ChatModel`], so the agent loop can run against the network, a cassette or a
//! test double alike.
//!
//! - [`http::HttpModel`] talks HTTP, with retries (429, 5xx, dropped connections,
//!   timeouts), a per-call timeout and token/cost accounting.
//! - [`cassette::Recorder`] wraps any model and writes every call to a JSONL cassette;
//!   [`cassette::Replayer`] serves a cassette back with no network and fails loudly on
//!   the first request that differs from the recorded one.
//! - [`config`] resolves a [`config::ModelConfig`] from flags, environment and
//!   `reproagent.toml`; [`price`] turns tokens into dollars.
//!
//! The API key lives only in [`config::ApiKey`], which neither serializes nor prints:
//! nothing this module writes (cassettes, run records) can carry it.

pub mod cassette;
pub mod config;
pub(crate) mod http;
pub(crate) mod price;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use cassette::{Recorder, Replayer};
pub use config::{resolve, resolve_from_process, ApiKey, ModelConfig, ModelOverrides};
pub use http::HttpModel;
pub use price::{Price, PriceTable, Spend};

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of a conversation, in the OpenAI chat format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// The text; `None` for an assistant turn that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// The tools an assistant turn calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    fn with(role: Role, content: impl Into<String>) -> Message {
        Message { role, content: Some(content.into()), tool_calls: Vec::new(), tool_call_id: None }
    }
    pub fn system(content: impl Into<String>) -> Message {
        Message::with(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message::with(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::with(Role::Assistant, content)
    }
    /// An assistant turn that calls tools (what the model returned, sent back as history).
    pub fn assistant_tool_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message { role: Role::Assistant, content, tool_calls, tool_call_id: None }
    }
    /// The result of a tool call, answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(tool_call_id.into()),
        }
    }

    /// The message as the chat-completions API wants it.
    pub fn to_wire(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("role".into(), serde_json::to_value(self.role).unwrap_or(Value::Null));
        m.insert("content".into(), self.content.clone().map(Value::String).unwrap_or(Value::Null));
        if !self.tool_calls.is_empty() {
            m.insert("tool_calls".into(), Value::Array(self.tool_calls.iter().map(ToolCall::to_wire).collect()));
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), Value::String(id.clone()));
        }
        Value::Object(m)
    }
}

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them. By the protocol they are a JSON
    /// object in a string, but models get it wrong; invalid JSON is kept here as is so the
    /// agent loop can tell the model what was wrong.
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as JSON, or a short reason why they are not valid JSON.
    pub fn arguments_json(&self) -> Result<Value, String> {
        serde_json::from_str(&self.arguments).map_err(|e| format!("tool arguments are not valid JSON: {e}"))
    }

    fn to_wire(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": { "name": self.name, "arguments": self.arguments },
        })
    }
}

/// A tool offered to the model: a name, what it does, and a JSON schema of its parameters
/// (the OpenAI `tools` format).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl ToolSpec {
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> ToolSpec {
        ToolSpec { name: name.into(), description: description.into(), parameters }
    }

    pub fn to_wire(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": { "name": self.name, "description": self.description, "parameters": self.parameters },
        })
    }
}

/// Sampling settings. On a request, a value that is set overrides the model's configured
/// one; on [`ModelInfo`], these are the configured values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl Sampling {
    /// `self`'s values where set, else `base`'s.
    pub fn over(&self, base: &Sampling) -> Sampling {
        Sampling {
            temperature: self.temperature.or(base.temperature),
            top_p: self.top_p.or(base.top_p),
            seed: self.seed.or(base.seed),
            max_tokens: self.max_tokens.or(base.max_tokens),
        }
    }
}

/// One chat-completions call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Overrides of the model's configured sampling for this call.
    #[serde(default)]
    pub sampling: Sampling,
    /// Another model name on the same endpoint for this call (`--review-model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The OpenAI `response_format` (`{"type": "json_object"}` for JSON mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
}

impl ChatRequest {
    pub fn new(messages: Vec<Message>) -> ChatRequest {
        ChatRequest { messages, tools: Vec::new(), sampling: Sampling::default(), model: None, response_format: None }
    }
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> ChatRequest {
        self.tools = tools;
        self
    }
    pub fn with_sampling(mut self, sampling: Sampling) -> ChatRequest {
        self.sampling = sampling;
        self
    }
}

/// Tokens, money and time spent on one call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// USD; `None` when the model is not in the price table (a local model, say).
    pub cost_usd: Option<f64>,
    /// Wall time of the whole call, retries and waits included.
    pub latency_ms: u64,
    /// HTTP attempts made (1 when the first one succeeded).
    pub attempts: u32,
}

/// The model's answer to one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant message, with its tool calls parsed out.
    pub message: Message,
    /// `stop`, `tool_calls`, `length`, ... as the server said; `None` if it did not.
    pub finish_reason: Option<String>,
    /// The model name the server reports (may be more specific than the one asked for).
    pub model: String,
    pub usage: Usage,
}

/// What a run record says about the model: which one, where, with which settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub model: String,
    /// The endpoint's host (and port), never the full URL's credentials or path.
    pub endpoint_host: String,
    pub sampling: Sampling,
}

/// A chat model. Synchronous: the agent loop is.
pub trait ChatModel: Send + Sync {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError>;
    fn describe(&self) -> ModelInfo;
}

impl<M: ChatModel + ?Sized> ChatModel for Box<M> {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        (**self).chat(req)
    }
    fn describe(&self) -> ModelInfo {
        (**self).describe()
    }
}

impl<M: ChatModel + ?Sized> ChatModel for std::sync::Arc<M> {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        (**self).chat(req)
    }
    fn describe(&self) -> ModelInfo {
        (**self).describe()
    }
}

/// Errors of the model layer. Each says what failed; [`ModelError::hint`] says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Nothing answered at the endpoint (refused, no route, DNS); check the base URL and
    /// that the server runs.
    #[error("cannot reach the model endpoint {endpoint} after {attempts} attempt(s): {detail}")]
    Unreachable { endpoint: String, attempts: u32, detail: String },
    /// The connection dropped mid-call on every attempt.
    #[error("the connection to {endpoint} dropped on every one of {attempts} attempt(s): {detail}")]
    Connection { endpoint: String, attempts: u32, detail: String },
    /// Every attempt ran past the per-call timeout; raise `timeout_secs` or use a faster model.
    #[error("the model call timed out after {timeout_ms} ms on every one of {attempts} attempt(s)")]
    Timeout { timeout_ms: u64, attempts: u32 },
    /// The endpoint refused the key (401/403); set the key's environment variable.
    #[error("the endpoint refused the API key (HTTP {status}): {message}")]
    Auth { status: u16, key_env: String, key_set: bool, message: String },
    /// 404: the model (or the endpoint path) does not exist there.
    #[error("model {model:?} not found at {endpoint} (HTTP 404): {message}")]
    NotFound { model: String, endpoint: String, message: String },
    /// 429 on every attempt within the retry budget.
    #[error("rate limited (HTTP 429) on every one of {attempts} attempt(s) over {waited_ms} ms: {message}")]
    RateLimited { attempts: u32, waited_ms: u64, message: String },
    /// 5xx on every attempt within the retry budget.
    #[error("the endpoint failed with HTTP {status} on every one of {attempts} attempt(s): {message}")]
    Server { status: u16, attempts: u32, message: String },
    /// Another 4xx: the endpoint refused this request (context too long, tools unsupported...).
    #[error("the endpoint refused the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    /// The body was not a chat completion (garbage, an error object, no choices).
    #[error("the endpoint's answer is not a chat completion ({reason}): {excerpt:?}")]
    BadResponse { reason: String, excerpt: String },
    /// The configuration is invalid; the message names the setting.
    #[error("model configuration: {0}")]
    Config(String),
    /// The cassette could not be read or written.
    #[error("cassette {path}: {message}")]
    Cassette { path: String, message: String },
    /// Replay: the request differs from the recorded one at `path`.
    #[error("replay: call {index} differs from the cassette at `{path}`: recorded {recorded}, now {actual}")]
    ReplayMismatch { index: usize, path: String, recorded: String, actual: String },
    /// Replay: the run makes more calls than the cassette holds.
    #[error("replay: call {index} is not in the cassette, which holds {recorded} call(s)")]
    ReplayExhausted { index: usize, recorded: usize },
    /// Replay: the recorded call ended in this error, served back as it was.
    #[error("{0}")]
    Recorded(String),
}

impl ModelError {
    /// What the user can do about it. A `String`, unlike other modules' hints, because the
    /// key's hint names the configured environment variable.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ModelError::Unreachable { .. } => {
                "check the base URL (--base-url, OPENAI_BASE_URL or [model] base_url in reproagent.toml) and that the server runs".into()
            }
            ModelError::Connection { .. } => "the server or a proxy closes connections; check its logs, or retry later".into(),
            ModelError::Timeout { .. } => "raise [model] timeout_secs and retry_budget_secs in reproagent.toml (60 s each by default), or lower max_tokens".into(),
            ModelError::Auth { key_env, key_set: false, .. } => format!("no key was sent: set {key_env} to the endpoint's API key"),
            ModelError::Auth { key_env, .. } => format!("the key in {key_env} was refused: check it belongs to this endpoint"),
            ModelError::NotFound { .. } => {
                "check the model name (--model, REPROAGENT_MODEL) and that the base URL ends where /chat/completions can be appended (often /v1)".into()
            }
            ModelError::RateLimited { .. } => "wait and rerun, lower concurrency, or raise [model] max_retries".into(),
            ModelError::Server { .. } => "the endpoint is failing; retry later or use another endpoint".into(),
            ModelError::Rejected { .. } => "the message says why; a smaller context or a model with tool calling may help".into(),
            ModelError::BadResponse { .. } => {
                "the endpoint does not speak the OpenAI chat-completions format; check the base URL and the model".into()
            }
            ModelError::Config(_) => "fix the setting in the flags, the environment or reproagent.toml".into(),
            ModelError::Cassette { .. } => "check the cassette path; a cassette is JSONL written by --record".into(),
            ModelError::ReplayMismatch { .. } | ModelError::ReplayExhausted { .. } => {
                "the run no longer matches the recording: record the cassette again with --record".into()
            }
            ModelError::Recorded(_) => return None,
        })
    }
}

/// At most `max` characters of `s`, with `...` when cut; for error messages.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
