//! Runtime tools: `run_command`, `run_python`, `run_test`, wrapping the sandbox's typed
//! functions ([`crate::sandbox::tools`]). They are in the registry only when asked for
//! ([`super::with_runtime`]) and work only on a context that has a sandbox
//! ([`super::ToolContext::with_runtime`]). Commands are checked by the sandbox policy
//! first: a refusal is an error result with its reason, and nothing ran. Output is
//! bounded by the sandbox (`truncated`, with the byte counts of all that was written).

use std::path::PathBuf;
use std::sync::Arc;

use crate::sandbox::runners::TestResult;
use crate::sandbox::tools::{self as st, RunCommandArgs, RunPythonArgs, RunTestArgs};
use crate::sandbox::{ExecOutput, Sandbox};

use super::{ToolContext, ToolError, TypedTool};

/// A sandbox and the runtime to drive it. Tools are synchronous: call them from a
/// thread that is not a runtime worker (e.g. inside `spawn_blocking`).
pub struct RuntimeContext {
    pub sandbox: Arc<dyn Sandbox>,
    pub handle: tokio::runtime::Handle,
    /// The user's tree (read only, to detect the test framework).
    pub repo: PathBuf,
}

fn rt(ctx: &ToolContext) -> Result<&RuntimeContext, ToolError> {
    ctx.runtime.as_ref().ok_or(ToolError::NoSandbox)
}

pub struct RunCommand;
pub struct RunPython;
pub struct RunTest;

impl TypedTool for RunCommand {
    const NAME: &'static str = "run_command";
    const DESCRIPTION: &'static str = "Run a shell command in the sandbox's copy of the repository (never the user's tree), with a timeout (default 120 s). Dangerous commands are refused with a reason. Output is bounded; byte counts say how much was written in all.";
    type Args = RunCommandArgs;
    type Output = ExecOutput;

    fn run(&self, ctx: &ToolContext, a: RunCommandArgs) -> Result<ExecOutput, ToolError> {
        let r = rt(ctx)?;
        Ok(r.handle.block_on(st::run_command(r.sandbox.as_ref(), &a))?)
    }
}

impl TypedTool for RunPython {
    const NAME: &'static str = "run_python";
    const DESCRIPTION: &'static str = "Run a Python snippet in the sandbox with the repository importable (on PYTHONPATH, run from its root), with a timeout (default 120 s). Output is bounded.";
    type Args = RunPythonArgs;
    type Output = ExecOutput;

    fn run(&self, ctx: &ToolContext, a: RunPythonArgs) -> Result<ExecOutput, ToolError> {
        let r = rt(ctx)?;
        Ok(r.handle.block_on(st::run_python(r.sandbox.as_ref(), &a))?)
    }
}

impl TypedTool for RunTest {
    const NAME: &'static str = "run_test";
    const DESCRIPTION: &'static str = "Run one test file (or one test in it) in the sandbox with the repository's own framework (pytest, unittest, django, node:test, jest, vitest, JUnit), and parse the result: status, counts, failures with their messages. Output is bounded.";
    type Args = RunTestArgs;
    type Output = TestResult;

    fn run(&self, ctx: &ToolContext, a: RunTestArgs) -> Result<TestResult, ToolError> {
        let r = rt(ctx)?;
        Ok(r.handle.block_on(st::run_test(r.sandbox.as_ref(), &r.repo, &a))?)
    }
}
