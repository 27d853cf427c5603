//! `sequential_thinking`: the thought record of the paper (decomposition and reflection).
//! Each call records one numbered thought, possibly revising an earlier one or starting a
//! branch; the record is kept per session (per [`super::ToolContext`]).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ToolContext, ToolError, TypedTool};

pub struct SequentialThinking;

/// One step of thinking.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThinkingArgs {
    /// The thought: an analysis step, a hypothesis, a check, a revision.
    pub thought: String,
    /// Its number in the sequence (1-based).
    pub number: u32,
    /// How many thoughts are expected in all (may grow as thinking goes on).
    pub total: u32,
    /// Whether another thought is needed after this one.
    pub next_needed: bool,
    /// The number of an earlier thought this one revises.
    #[serde(default)]
    pub revises: Option<u32>,
    /// A branch name: this thought explores an alternative under that name.
    #[serde(default)]
    pub branch: Option<String>,
}

/// A recorded thought.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Thought {
    pub number: u32,
    pub thought: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revises: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// The session's thoughts, in the order they came.
#[derive(Debug, Default)]
pub struct ThoughtRecord {
    pub thoughts: Vec<Thought>,
}

/// A thought longer than this is refused: thinking is in steps.
const MAX_THOUGHT_CHARS: usize = 20_000;
/// Thoughts kept per session; older ones are dropped first.
const MAX_THOUGHTS: usize = 1_000;

#[derive(Debug, Serialize, JsonSchema)]
pub struct ThinkingOutput {
    pub number: u32,
    pub total: u32,
    pub next_needed: bool,
    /// Thoughts recorded in this session so far.
    pub recorded: usize,
    /// Branch names started so far, with their thought counts.
    pub branches: BTreeMap<String, usize>,
    /// Thoughts revised so far (their numbers).
    pub revised: Vec<u32>,
}

impl TypedTool for SequentialThinking {
    const NAME: &'static str = "sequential_thinking";
    const DESCRIPTION: &'static str = "Record one numbered step of thinking: decompose the problem, state a hypothesis, check it, revise an earlier thought (`revises`) or explore an alternative (`branch`). The record is kept for the session; the answer summarizes it. Set next_needed to false when done.";
    type Args = ThinkingArgs;
    type Output = ThinkingOutput;

    fn run(&self, ctx: &ToolContext, a: ThinkingArgs) -> Result<ThinkingOutput, ToolError> {
        if a.number == 0 {
            return Err(ToolError::BadArgs { tool: Self::NAME.into(), message: "number starts at 1".into() });
        }
        if a.thought.trim().is_empty() {
            return Err(ToolError::BadArgs { tool: Self::NAME.into(), message: "thought is empty".into() });
        }
        if a.thought.chars().count() > MAX_THOUGHT_CHARS {
            return Err(ToolError::BadArgs {
                tool: Self::NAME.into(),
                message: format!("thought is longer than {MAX_THOUGHT_CHARS} characters; split it into steps"),
            });
        }
        let mut rec = ctx.thoughts.lock().map_err(|_| ToolError::Other("thought record lock poisoned".into()))?;
        if let Some(r) = a.revises {
            if r >= a.number || !rec.thoughts.iter().any(|t| t.number == r) {
                return Err(ToolError::BadArgs {
                    tool: Self::NAME.into(),
                    message: format!("revises={r}: no earlier thought {r} is recorded before thought {}", a.number),
                });
            }
        }
        rec.thoughts.push(Thought { number: a.number, thought: a.thought, revises: a.revises, branch: a.branch });
        if rec.thoughts.len() > MAX_THOUGHTS {
            rec.thoughts.remove(0);
        }
        let mut branches = BTreeMap::new();
        for t in &rec.thoughts {
            if let Some(b) = &t.branch {
                *branches.entry(b.clone()).or_insert(0) += 1;
            }
        }
        let mut revised: Vec<u32> = rec.thoughts.iter().filter_map(|t| t.revises).collect();
        revised.sort_unstable();
        revised.dedup();
        Ok(ThinkingOutput {
            number: a.number,
            total: a.total.max(a.number),
            next_needed: a.next_needed,
            recorded: rec.thoughts.len(),
            branches,
            revised,
        })
    }
}

impl ToolContext {
    /// The session's thoughts so far, for the run record.
    pub fn thoughts(&self) -> Vec<Thought> {
        self.thoughts.lock().map(|r| r.thoughts.clone()).unwrap_or_default()
    }
}
