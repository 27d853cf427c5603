//! The agent loop of one stage: think, act, observe, revise.
//!
//! Each turn sends the conversation and the tool specs (the registry's names,
//! descriptions and JSON schemas, plus the stage's submit tool) to the [`ChatModel`];
//! runs the tool calls through the registry and appends their results (bounded); stops
//! when the model submits the stage's artifact, through the submit tool or as JSON in a
//! plain answer, and the stage's handler accepts it.
//!
//! Recovery: a malformed tool call (unknown tool, arguments not JSON, wrong types) or an
//! invalid artifact gets an error message back to the model; the second consecutive
//! failure of the same kind ends the stage with the reason. A model that never submits
//! ends the stage at its budget of model calls ([`MAX_MODEL_CALLS`]), also with a reason.
//!
//! Endpoints: the tools go as native `tools` or, with [`ToolProtocol::Text`], described in
//! the system prompt with calls read from the answer's JSON (`{"tool", "arguments"}`);
//! `auto` switches to text for the rest of the run when the endpoint refuses `tools` or
//! the model writes a call in its text. A stage may ask JSON mode, dropped when the
//! endpoint refuses it. The run's [`Limits`] are checked before every call
//! ([`StageError::Spent`]); each retrieval is noted in the evidence ledger, and one
//! already made with the same arguments on the same tree is answered from it without
//! running the tool again.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::model::{excerpt, ChatModel, ChatRequest, ChatResponse, Message, ModelError, ToolCall, ToolSpec};
use crate::tools::{Registry, ToolContext};

/// The paper's budget: model calls per stage.
pub const MAX_MODEL_CALLS: u32 = 50;
/// The paper's budget: feedback iterations (test runs) in generation.
pub const MAX_FEEDBACK_ITERATIONS: u32 = 20;
/// Consecutive failures of one kind that end a stage.
pub const MAX_CONSECUTIVE_FAILURES: u32 = 2;
/// A tool result longer than this is cut, with a note saying so.
pub const MAX_TOOL_RESULT_CHARS: usize = 12_000;

/// One model call, as the run record keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelCallRecord {
    pub stage: String,
    /// The call's number within its stage, from 1.
    pub index: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: Option<f64>,
    pub latency_ms: u64,
    pub attempts: u32,
    pub finish_reason: Option<String>,
    /// Set when the call failed.
    pub error: Option<String>,
}

/// One tool call, as the run record keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolCallRecord {
    pub stage: String,
    pub name: String,
    /// The arguments as the model wrote them (cut at 500 characters).
    pub arguments: String,
    pub is_error: bool,
    pub millis: u64,
    /// Answered from the evidence ledger: the same call on the same tree had been made
    /// before, and the tool did not run again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_ledger: bool,
}

/// How tools are offered to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolProtocol {
    /// Native tool calls, switching to `text` for the rest of the run when the endpoint
    /// refuses `tools` or answers a tool call as JSON in its text.
    #[default]
    Auto,
    /// The OpenAI `tools` parameter and `tool_calls` in the answer.
    Native,
    /// Tools described in the system prompt; the model answers
    /// `{"tool": NAME, "arguments": {...}}` in its text.
    Text,
}

/// A run's spending limits (`--max-calls`, `--max-cost`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub max_calls: Option<u32>,
    pub max_cost_usd: Option<f64>,
}

/// Every model and tool call of a run, in order, and what the run learned on the way:
/// the evidence ledger, the tool protocol the endpoint speaks, its spending limits.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trace {
    pub model_calls: Vec<ModelCallRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
    #[serde(skip)]
    pub ledger: super::ledger::Ledger,
    #[serde(skip)]
    pub limits: Limits,
    /// The protocol in use: `auto` until the endpoint shows which it speaks.
    #[serde(skip)]
    pub protocol: ToolProtocol,
    /// Fallbacks taken (JSON mode refused, tools refused), in a line each.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Trace {
    /// What the run spent, in USD (calls of unknown price count 0).
    pub fn cost_usd(&self) -> f64 {
        self.model_calls.iter().filter_map(|c| c.cost_usd).sum()
    }

    /// `Some(reason)` once a limit is reached: no further model call is made.
    pub fn over_budget(&self) -> Option<String> {
        let calls = self.model_calls.len() as u32;
        if let Some(max) = self.limits.max_calls.filter(|m| calls >= *m) {
            return Some(format!("the run's budget of {max} model calls is spent"));
        }
        let max = self.limits.max_cost_usd?;
        // A call the price table cannot price would make the limit a silent no-op: the run
        // stops at the first one instead, saying why.
        if let Some(c) = self.model_calls.iter().find(|c| c.error.is_none() && c.cost_usd.is_none()) {
            return Some(format!(
                "--max-cost ${max:.4} cannot be kept: the model has no known price (the {} stage's call {} came back unpriced); add it under [prices] in reproagent.toml, or use --max-calls",
                c.stage.replace('_', " "),
                c.index
            ));
        }
        let cost = self.cost_usd();
        if cost >= max {
            return Some(format!("the run's budget of ${max:.4} is spent (${cost:.4} after {calls} calls)"));
        }
        None
    }

    /// Model calls made so far in `stage`.
    pub fn calls_in(&self, stage: &str) -> u32 {
        self.model_calls.iter().filter(|c| c.stage == stage).count() as u32
    }

    /// Call the model and record the call (a failed one too).
    pub fn chat(&mut self, model: &dyn ChatModel, stage: &str, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let index = self.calls_in(stage) + 1;
        let started = Instant::now();
        let r = model.chat(req);
        let rec = match &r {
            Ok(resp) => ModelCallRecord {
                stage: stage.into(),
                index,
                prompt_tokens: resp.usage.prompt_tokens,
                completion_tokens: resp.usage.completion_tokens,
                cost_usd: resp.usage.cost_usd,
                latency_ms: resp.usage.latency_ms,
                attempts: resp.usage.attempts,
                finish_reason: resp.finish_reason.clone(),
                error: None,
            },
            Err(e) => ModelCallRecord {
                stage: stage.into(),
                index,
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: None,
                latency_ms: started.elapsed().as_millis() as u64,
                attempts: 0,
                finish_reason: None,
                error: Some(e.to_string()),
            },
        };
        self.model_calls.push(rec);
        r
    }
}

/// What a stage's handler makes of a submitted artifact.
pub enum Verdict<T> {
    /// The stage is done.
    Accept(T),
    /// Not a valid artifact: the message goes back to the model, and it counts as a
    /// failure (two in a row end the stage).
    Invalid(String),
    /// Valid, but not good enough yet (a rejected test): the feedback goes back to the
    /// model for the next refinement; no failure is counted.
    Feedback(String),
    /// End the stage with this reason (an exhausted iteration budget, a broken sandbox).
    Stop(String),
    /// End the stage: the run's budget is spent (in a nested stage).
    Spent(String),
}

/// One stage: its prompts, tools, submit tool and budget.
pub struct StageSpec<'a> {
    pub name: &'a str,
    pub system: String,
    pub user: String,
    pub registry: &'a Registry,
    /// The tool the model calls with the stage's artifact as its arguments.
    pub submit: ToolSpec,
    pub max_calls: u32,
    /// Ask for JSON mode (`response_format: json_object`); dropped for the rest of the
    /// stage when the endpoint refuses it.
    pub json_mode: bool,
    /// Another model name on the endpoint for this stage (the review's `--review-model`).
    pub model: Option<String>,
}

impl<'a> StageSpec<'a> {
    /// A stage with native defaults: no JSON mode, the run's model.
    pub fn new(name: &'a str, system: String, user: String, registry: &'a Registry, submit: ToolSpec) -> Self {
        StageSpec { name, system, user, registry, submit, max_calls: MAX_MODEL_CALLS, json_mode: false, model: None }
    }
}

/// Why a stage ended without an artifact.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A model call failed (after the client's own retries).
    #[error("the model call failed: {0}")]
    Model(#[from] ModelError),
    /// The model failed the same way twice in a row.
    #[error("{0}")]
    Failed(String),
    /// The model-call budget ran out before an artifact was accepted.
    #[error("{0}")]
    Budget(String),
    /// The handler ended the stage.
    #[error("{0}")]
    Stopped(String),
    /// The run's budget (`--max-calls`, `--max-cost`) is spent.
    #[error("{0}")]
    Spent(String),
}

impl StageError {
    pub fn hint(&self) -> Option<String> {
        match self {
            StageError::Model(e) => e.hint(),
            StageError::Failed(_) => Some(
                "the model does not follow the tool-calling protocol well: try a stronger model or a lower temperature"
                    .into(),
            ),
            StageError::Budget(_) => Some(
                "the model kept exploring without submitting: try a stronger model, or check the prompt's conventions"
                    .into(),
            ),
            StageError::Stopped(_) => None,
            StageError::Spent(_) => Some("raise --max-calls or --max-cost, or resume the run with --resume".into()),
        }
    }
}

/// The tool specs of a registry, as the model is offered them.
pub fn specs(registry: &Registry) -> Vec<ToolSpec> {
    registry.tools().map(|t| ToolSpec::new(t.name(), t.description(), t.schema())).collect()
}

/// A tool result as the model sees it: JSON, cut at [`MAX_TOOL_RESULT_CHARS`].
pub fn bounded(value: &Value) -> String {
    let text =
        serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\": \"unserializable result: {e}\"}}"));
    let total = text.chars().count();
    if total <= MAX_TOOL_RESULT_CHARS {
        return text;
    }
    let cut: String = text.chars().take(MAX_TOOL_RESULT_CHARS).collect();
    format!(
        "{cut}\n[truncated: {MAX_TOOL_RESULT_CHARS} of {total} characters shown; narrow the query or page with offset]"
    )
}

/// The JSON object in a plain answer: the whole text, a fenced block, or the outermost braces.
pub fn json_in_text(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(t) {
        return v.is_object().then_some(v);
    }
    let (start, end) = (t.find('{')?, t.rfind('}')?);
    if end <= start {
        return None;
    }
    serde_json::from_str::<Value>(&t[start..=end]).ok().filter(Value::is_object)
}

/// Tracks consecutive failures by kind.
struct Failures {
    last: Option<(&'static str, u32)>,
}

impl Failures {
    /// Count a failure; `Some(reason)` when it ends the stage.
    fn fail(&mut self, kind: &'static str, detail: &str) -> Option<String> {
        let n = match self.last {
            Some((k, n)) if k == kind => n + 1,
            _ => 1,
        };
        self.last = Some((kind, n));
        (n >= MAX_CONSECUTIVE_FAILURES).then(|| format!("{kind} {n} times in a row; the last: {detail}"))
    }
    fn ok(&mut self) {
        self.last = None;
    }
}

/// The system prompt's addition for the JSON-in-text tool protocol: each tool with its
/// description and parameters, and the one form an answer takes.
pub fn text_protocol_prompt(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "## Tools\n\nThis endpoint takes no native tool calls. To call a tool, answer with exactly one JSON object and nothing else:\n{\"tool\": \"NAME\", \"arguments\": {...}}\nThe tool's result comes back in the next message. One call per answer. The tools:\n",
    );
    for t in tools {
        s.push_str(&format!(
            "\n- `{}`: {}\n  parameters (JSON schema): {}\n",
            t.name,
            t.description,
            serde_json::to_string(&t.parameters).unwrap_or_default()
        ));
    }
    s
}

/// A tool call written as JSON in the answer's text (`{"tool": NAME, "arguments": {...}}`,
/// or `"name"` for `"tool"`), when the text holds one.
pub fn text_tool_call(content: Option<&str>, id: String) -> Option<ToolCall> {
    let v = json_in_text(content?)?;
    let name = v.get("tool").or_else(|| v.get("name")).and_then(Value::as_str)?;
    if v.get("tool").is_none() && v.get("arguments").is_none() {
        return None;
    }
    let args = v.get("arguments").cloned().unwrap_or_else(|| json!({}));
    let arguments = match args {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Some(ToolCall { id, name: name.to_string(), arguments })
}

/// Does a refusal say the endpoint takes no `tools`?
fn refuses_tools(e: &ModelError) -> bool {
    match e {
        ModelError::Rejected { status: 400 | 422 | 501, message } => {
            let m = message.to_lowercase();
            m.contains("tool") || m.contains("function")
        }
        _ => false,
    }
}

/// Run one stage to its artifact. `on_submit` judges each submission; it gets the trace
/// so it can run stages of its own (generation's review and fix probe), which count
/// against the run's budget.
pub fn run_stage<T>(
    model: &dyn ChatModel,
    ctx: &ToolContext,
    spec: &StageSpec,
    trace: &mut Trace,
    mut on_submit: impl FnMut(Value, &mut Trace) -> Verdict<T>,
) -> Result<T, StageError> {
    let mut tools = specs(spec.registry);
    tools.push(spec.submit.clone());
    let mut messages = vec![Message::system(spec.system.clone()), Message::user(spec.user.clone())];
    let text_system = format!("{}\n\n{}", spec.system, text_protocol_prompt(&tools));
    let mut failures = Failures { last: None };
    let submit = spec.submit.name.as_str();
    let mut json_mode = spec.json_mode;

    while trace.calls_in(spec.name) < spec.max_calls {
        if let Some(reason) = trace.over_budget() {
            return Err(StageError::Spent(reason));
        }
        let text_mode = trace.protocol == ToolProtocol::Text;
        let mut req = if text_mode {
            let mut m = messages.clone();
            m[0] = Message::system(text_system.clone());
            ChatRequest::new(m)
        } else {
            ChatRequest::new(messages.clone()).with_tools(tools.clone())
        };
        req.model = spec.model.clone();
        if json_mode {
            req.response_format = Some(json!({"type": "json_object"}));
        }
        let resp = match trace.chat(model, spec.name, &req) {
            Ok(r) => r,
            Err(ModelError::Rejected { status: 400, message }) if json_mode => {
                json_mode = false;
                trace.notes.push(format!(
                    "{}: the endpoint refused JSON mode (HTTP 400: {message}); asked again without it, the answer still schema-checked",
                    spec.name
                ));
                continue;
            }
            Err(e) if !text_mode && trace.protocol == ToolProtocol::Auto && refuses_tools(&e) => {
                trace.protocol = ToolProtocol::Text;
                trace.notes.push(format!(
                    "{}: the endpoint refused native tools ({e}); the run switched to the JSON-in-text tool protocol",
                    spec.name
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let msg = resp.message;
        let mut calls = msg.tool_calls.clone();
        // A tool call written in the text: the text protocol's form, or (auto) an endpoint
        // whose model has no native tool support answering the same way.
        let textual = calls.is_empty() && trace.protocol != ToolProtocol::Native && {
            let n = trace.tool_calls.len();
            match text_tool_call(msg.content.as_deref(), format!("text_call_{n}")) {
                Some(c) => {
                    calls.push(c);
                    true
                }
                None => false,
            }
        };
        if textual && trace.protocol == ToolProtocol::Auto {
            trace.protocol = ToolProtocol::Text;
            trace.notes.push(format!(
                "{}: the model answered a tool call as JSON in its text; the run switched to the JSON-in-text tool protocol",
                spec.name
            ));
        }
        if textual {
            messages.push(Message::assistant(msg.content.clone().unwrap_or_default()));
        } else {
            messages.push(Message::assistant_tool_calls(msg.content.clone(), msg.tool_calls.clone()));
        }
        let answer = |messages: &mut Vec<Message>, call: &ToolCall, content: String| {
            if textual {
                messages.push(Message::user(format!("Result of `{}`:\n{content}", call.name)));
            } else {
                messages.push(Message::tool(&call.id, content));
            }
        };

        if calls.is_empty() {
            let text = msg.content.unwrap_or_default();
            let Some(value) = json_in_text(&text) else {
                let detail = format!("the answer has no tool call and no JSON artifact: {:?}", excerpt(&text, 200));
                if let Some(reason) = failures.fail("answers without a tool call or an artifact", &detail) {
                    return Err(StageError::Failed(reason));
                }
                messages.push(Message::user(format!(
                    "Error: {detail}. Call one of the tools to gather evidence, or call `{submit}` with the artifact as its arguments."
                )));
                continue;
            };
            match on_submit(value, trace) {
                Verdict::Accept(t) => return Ok(t),
                Verdict::Invalid(m) => {
                    if let Some(reason) = failures.fail("invalid artifacts", &m) {
                        return Err(StageError::Failed(reason));
                    }
                    messages.push(Message::user(format!(
                        "Error: the artifact is invalid: {m}. Call `{submit}` with a corrected one."
                    )));
                }
                Verdict::Feedback(m) => {
                    failures.ok();
                    messages.push(Message::user(m));
                }
                Verdict::Stop(r) => return Err(StageError::Stopped(r)),
                Verdict::Spent(r) => return Err(StageError::Spent(r)),
            }
            continue;
        }

        for call in &calls {
            let started = Instant::now();
            let record_as = |trace: &mut Trace, is_error: bool, from_ledger: bool| {
                trace.tool_calls.push(ToolCallRecord {
                    stage: spec.name.into(),
                    name: call.name.clone(),
                    arguments: excerpt(&call.arguments, 500),
                    is_error,
                    millis: started.elapsed().as_millis() as u64,
                    from_ledger,
                });
            };
            let record = |trace: &mut Trace, is_error: bool| record_as(trace, is_error, false);
            let args = match call.arguments_json() {
                Ok(a) => a,
                Err(e) => {
                    record(trace, true);
                    let detail = format!("{}: {e}", call.name);
                    if let Some(reason) = failures.fail("malformed tool calls", &detail) {
                        return Err(StageError::Failed(reason));
                    }
                    answer(
                        &mut messages,
                        call,
                        bounded(
                            &json!({"error": e, "hint": "arguments are one JSON object, as the tool's schema gives"}),
                        ),
                    );
                    continue;
                }
            };
            if call.name == submit {
                let verdict = on_submit(args, trace);
                match verdict {
                    Verdict::Accept(t) => {
                        record(trace, false);
                        return Ok(t);
                    }
                    Verdict::Invalid(m) => {
                        record(trace, true);
                        if let Some(reason) = failures.fail("invalid artifacts", &m) {
                            return Err(StageError::Failed(reason));
                        }
                        answer(
                            &mut messages,
                            call,
                            bounded(
                                &json!({"error": format!("invalid artifact: {m}"), "hint": format!("call `{submit}` again with arguments that fit its schema")}),
                            ),
                        );
                    }
                    Verdict::Feedback(m) => {
                        record(trace, false);
                        failures.ok();
                        answer(&mut messages, call, m);
                    }
                    Verdict::Stop(r) => {
                        record(trace, false);
                        return Err(StageError::Stopped(r));
                    }
                    Verdict::Spent(r) => {
                        record(trace, false);
                        return Err(StageError::Spent(r));
                    }
                }
                continue;
            }
            let known = spec.registry.get(&call.name).is_some();
            // A retrieval already made on the same tree is answered from the ledger.
            let tree = if known { ctx.state_for(&call.name, &args) } else { None };
            if let Some(v) = tree.as_deref().and_then(|t| trace.ledger.recall(spec.name, &call.name, &args, t)) {
                record_as(trace, false, true);
                failures.ok();
                answer(&mut messages, call, bounded(&v));
                continue;
            }
            let out = spec.registry.call(ctx, &call.name, args.clone());
            record(trace, out.is_error);
            trace.ledger.note(
                spec.name,
                &call.name,
                &args,
                &out.value,
                out.is_error || !known,
                tree.as_deref(),
                ctx.root(),
            );
            let malformed = !known
                || (out.is_error
                    && out.value.get("error").and_then(Value::as_str).is_some_and(|e| e.starts_with("bad arguments")));
            if malformed {
                let detail = out.value.get("error").and_then(Value::as_str).unwrap_or("malformed call").to_string();
                if let Some(reason) = failures.fail("malformed tool calls", &detail) {
                    return Err(StageError::Failed(reason));
                }
            } else {
                failures.ok();
            }
            answer(&mut messages, call, bounded(&out.value));
        }
    }
    Err(StageError::Budget(format!(
        "the {} stage used its budget of {} model calls without an accepted artifact",
        spec.name, spec.max_calls
    )))
}
