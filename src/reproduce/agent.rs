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

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::model::{excerpt, ChatModel, ChatRequest, ChatResponse, Message, ModelError, ToolSpec};
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
}

/// Every model and tool call of a run, in order.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trace {
    pub model_calls: Vec<ModelCallRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
}

impl Trace {
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

/// Run one stage to its artifact. `on_submit` judges each submission; it gets the trace
/// so it can make model calls of its own (generation's alignment review), which count
/// against the stage's budget.
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
    let mut failures = Failures { last: None };
    let submit = spec.submit.name.as_str();

    while trace.calls_in(spec.name) < spec.max_calls {
        let req = ChatRequest::new(messages.clone()).with_tools(tools.clone());
        let resp = trace.chat(model, spec.name, &req)?;
        let msg = resp.message;
        messages.push(Message::assistant_tool_calls(msg.content.clone(), msg.tool_calls.clone()));

        if msg.tool_calls.is_empty() {
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
            }
            continue;
        }

        for call in &msg.tool_calls {
            let started = Instant::now();
            let record = |trace: &mut Trace, is_error: bool| {
                trace.tool_calls.push(ToolCallRecord {
                    stage: spec.name.into(),
                    name: call.name.clone(),
                    arguments: excerpt(&call.arguments, 500),
                    is_error,
                    millis: started.elapsed().as_millis() as u64,
                });
            };
            let args = match call.arguments_json() {
                Ok(a) => a,
                Err(e) => {
                    record(trace, true);
                    let detail = format!("{}: {e}", call.name);
                    if let Some(reason) = failures.fail("malformed tool calls", &detail) {
                        return Err(StageError::Failed(reason));
                    }
                    messages.push(Message::tool(
                        &call.id,
                        bounded(
                            &json!({"error": e, "hint": "arguments are one JSON object, as the tool's schema gives"}),
                        ),
                    ));
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
                        messages.push(Message::tool(&call.id, bounded(&json!({"error": format!("invalid artifact: {m}"), "hint": format!("call `{submit}` again with arguments that fit its schema")}))));
                    }
                    Verdict::Feedback(m) => {
                        record(trace, false);
                        failures.ok();
                        messages.push(Message::tool(&call.id, m));
                    }
                    Verdict::Stop(r) => {
                        record(trace, false);
                        return Err(StageError::Stopped(r));
                    }
                }
                continue;
            }
            let known = spec.registry.get(&call.name).is_some();
            let out = spec.registry.call(ctx, &call.name, args);
            record(trace, out.is_error);
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
            messages.push(Message::tool(&call.id, bounded(&out.value)));
        }
    }
    Err(StageError::Budget(format!(
        "the {} stage used its budget of {} model calls without an accepted artifact",
        spec.name, spec.max_calls
    )))
}
