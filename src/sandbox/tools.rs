//! The runtime tools of the paper's Table 1, as plain typed functions over a
//! [`Sandbox`]: `run_command`, `run_python`, `run_test`. Arguments and outputs are
//! serde types so the tool layer (agent loop, MCP, CLI) can wrap them unchanged.
//! Every command is checked by the [`policy`] first: a refusal comes back as
//! [`SandboxError::Refused`] with its reason, and nothing ran.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::runners::{self, Framework, TestResult, REPORT_DIR};
use super::{policy, ExecOutput, ExecRequest, Result, Sandbox, SandboxError};

fn default_timeout() -> u64 {
    120
}

/// `run_command`: a shell line in the repository copy.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    pub command: String,
    /// Directory relative to the repository root.
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

pub async fn run_command(sb: &dyn Sandbox, args: &RunCommandArgs) -> Result<ExecOutput> {
    super::check_timeout(args.timeout_secs, super::MAX_TOOL_TIMEOUT_SECS)?;
    policy::check_command(&args.command, sb.workdir()).map_err(SandboxError::Refused)?;
    let mut req = ExecRequest::shell(&args.command).timeout(Duration::from_secs(args.timeout_secs));
    req.cwd = args.cwd.clone();
    sb.exec(&req).await
}

/// `run_python`: a snippet run with the repository importable (on `PYTHONPATH`, run from its root).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPythonArgs {
    pub code: String,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

pub async fn run_python(sb: &dyn Sandbox, args: &RunPythonArgs) -> Result<ExecOutput> {
    super::check_timeout(args.timeout_secs, super::MAX_TOOL_TIMEOUT_SECS)?;
    policy::check_python(&args.code, sb.workdir()).map_err(SandboxError::Refused)?;
    let file = format!("{REPORT_DIR}/snippet_{}.py", super::new_session_id());
    sb.write_file(&file, args.code.as_bytes()).await?;
    let req = ExecRequest::new(vec!["python3".into(), file.clone()])
        .timeout(Duration::from_secs(args.timeout_secs))
        .env("PYTHONPATH", sb.workdir())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = sb.exec(&req).await;
    let _ = sb.exec(&ExecRequest::new(vec!["rm".into(), "-f".into(), file])).await;
    out
}

/// `run_test`: one test file (or one test in it) with the repository's own framework.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTestArgs {
    /// The test file, relative to the repository root.
    pub file: String,
    /// One test in it: a pytest/unittest/Django name (`test_a`, `Case.test_a`; pytest
    /// reads it as `Case::test_a`), a node/jest name pattern, a JUnit method. Without
    /// it, a Python file runs by the tests it defines itself.
    #[serde(default)]
    pub test: Option<String>,
    /// Force a framework: one of `pytest`, `unittest`, `django` (Django's tests/runtests.py),
    /// `django-manage` (`manage.py test`), `node-test`, `jest`, `vitest`, `junit4`, `junit5`.
    #[serde(default)]
    #[schemars(schema_with = "super::runners::framework_schema")]
    pub framework: Option<String>,
    /// A command template instead of the framework's (`{file}`, `{test}` substituted).
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

/// Run a test and parse its result. `repo` is the user's tree, read (never written) to
/// detect the framework from its manifests.
pub async fn run_test(sb: &dyn Sandbox, repo: &Path, args: &RunTestArgs) -> Result<TestResult> {
    super::check_timeout(args.timeout_secs, super::MAX_TOOL_TIMEOUT_SECS)?;
    super::check_rel(&args.file)?;
    let content = String::from_utf8_lossy(&sb.read_file(&args.file).await?).into_owned();
    let framework = match (&args.command, &args.framework) {
        (Some(_), fw) => fw.as_deref().and_then(Framework::parse_name).unwrap_or(Framework::Custom),
        (None, Some(f)) => {
            Framework::parse_name(f).ok_or_else(|| SandboxError::Other(format!("unknown framework {f:?}")))?
        }
        (None, None) => runners::detect(repo, &args.file, &content).ok_or_else(|| {
            SandboxError::Other(format!("cannot tell the test framework of {}; pass framework or command", args.file))
        })?,
    };
    if let Some(t) = &args.command {
        policy::check_command(t, sb.workdir()).map_err(SandboxError::Refused)?;
    }
    // An environment without pytest: its own runner, and the fix, rather than the system's pytest.
    let mut note = None;
    let framework = match sb.environment().map(|e| &e.python) {
        Some(py) if framework == Framework::Pytest && args.command.is_none() && py.pytest == Some(false) => {
            let other = runners::without_pytest(repo, &args.file);
            let name = if other == Framework::Django { "Django's tests/runtests.py" } else { "unittest" };
            note = Some(format!(
                "pytest is not installed in {}: ran with {name} instead (fix: `{}`)",
                py.prefix.as_deref().unwrap_or(&py.interpreter).display(),
                py.pytest_fix()
            ));
            other
        }
        _ => framework,
    };
    let line = if note.is_some() && framework == Framework::Unittest && runners::has_test_functions(&content) {
        runners::unittest_functions_line(&args.file, args.test.as_deref())
    } else {
        runners::command_line(
            framework,
            &args.file,
            args.test.as_deref(),
            &content,
            args.command.as_deref(),
            &runners::Layout::of(repo),
        )
    };
    let req = ExecRequest::shell(&line)
        .timeout(Duration::from_secs(args.timeout_secs))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("COLUMNS", "200")
        .env("NO_COLOR", "1")
        .env("CI", "1");
    let output = sb.exec(&req).await?;
    let report = match runners::report_file(framework) {
        Some(f) if args.command.is_none() => sb.read_file(f).await.ok(),
        _ => None,
    };
    let _ = sb.exec(&ExecRequest::new(vec!["rm".into(), "-rf".into(), REPORT_DIR.into()])).await;
    let mut result = runners::parse(framework, line, output, report.as_deref());
    if let Some(n) = note {
        if let Some(e) = result.error.as_mut() {
            e.push_str(&format!("\n({n})"));
        }
        result.note = Some(n);
    }
    Ok(result)
}
