//! The command line: one file per subcommand, each an `XxxArgs` clap struct whose doc
//! comments are the help text and a `run()` that checks its input before any work.
//! Only this layer knows clap.

mod bench;
mod conventions;
mod graph;
mod index;
mod localize;
mod query;
mod reproduce;
pub(crate) mod sandbox;
mod schema;
mod search;
mod serve;
mod table;
mod tool;

use clap::{Parser, Subcommand};

/// Turns a bug report into a test that reproduces it, on an embedded code knowledge graph.
#[derive(Parser, Debug)]
#[command(name = "reproagent", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    Index(index::IndexArgs),
    /// The bench harness: score reproducers on cases.
    Bench(bench::BenchArgs),
    Query(query::QueryArgs),
    Schema(schema::SchemaArgs),
    Graph(graph::GraphArgs),
    Search(search::SearchArgs),
    Localize(localize::LocalizeArgs),
    /// The test conventions for some suspect code: framework, test module, command.
    Conventions(conventions::ConventionsArgs),
    Reproduce(Box<reproduce::ReproduceArgs>),
    /// Environment images and one-off commands in the sandbox.
    Sandbox(sandbox::SandboxArgs),
    /// Run one agent tool and print its JSON output.
    Tool(tool::ToolArgs),
    /// The MCP server over stdio: the agent tools on an indexed repository.
    Serve(serve::ServeArgs),
}

/// Run the CLI and return the process exit code. Errors are printed as one line
/// (`error: ...`) with a hint when there is one.
pub fn main() -> i32 {
    quiet_broken_pipe();
    let cli = Cli::parse();
    let result: anyhow::Result<()> = match cli.command {
        Command::Index(a) => index::run(a),
        Command::Bench(a) => match bench::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Query(a) => query::run(a),
        Command::Schema(a) => schema::run(a),
        Command::Graph(a) => graph::run(a),
        Command::Search(a) => search::run(a),
        Command::Localize(a) => localize::run(a),
        Command::Conventions(a) => conventions::run(a),
        Command::Reproduce(a) => match reproduce::run(*a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Sandbox(args) => sandbox::run(args),
        Command::Tool(a) => tool::run(a),
        Command::Serve(a) => serve::run(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => report(&e),
    }
}

/// `reproagent graph ... | head` closes our stdout early: `println!` then panics with a
/// broken pipe, which is no error of ours. Exit 0 quietly instead.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Print an error chain on one line; a broken pipe (`reproagent ... | head`) is not an error.
fn report(e: &anyhow::Error) -> i32 {
    if e.chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
    {
        return 0;
    }
    let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    eprintln!("error: {}", msg.join(": "));
    1
}

/// The endpoint and sampling flags of the commands that call a model (`reproduce`,
/// `bench run`): one definition, one way to turn them into the config's overrides.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ModelFlags {
    /// The OpenAI-compatible endpoint (default: OPENAI_BASE_URL, reproagent.toml, OpenAI).
    #[arg(long)]
    pub base_url: Option<String>,
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long)]
    pub top_p: Option<f64>,
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long)]
    pub max_tokens: Option<u32>,
}

impl ModelFlags {
    /// The overrides these flags make, for `model`.
    pub fn overrides(&self, model: &str) -> crate::model::ModelOverrides {
        crate::model::ModelOverrides {
            base_url: self.base_url.clone(),
            model: Some(model.to_string()),
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            max_tokens: self.max_tokens,
            ..crate::model::ModelOverrides::default()
        }
    }
}

/// What the model pipeline does past its four stages, and its limits: the flags of
/// `reproduce` and `bench run --adapter pipeline`, one definition for both.
#[derive(clap::Args, Debug, Clone)]
pub struct PipelineFlags {
    /// The model of the independent review: another model name on the same endpoint
    /// (default: `[model] review_model` in reproagent.toml, else the run's model).
    #[arg(long, env = "REPROAGENT_REVIEW_MODEL")]
    pub review_model: Option<String>,
    /// Do not ask the review for JSON mode (`response_format`); its verdict is still
    /// schema-checked. Without this flag JSON mode is dropped by itself when the endpoint
    /// refuses it.
    #[arg(long)]
    pub no_json_mode: bool,
    /// Skip the fix probe (a proposed fix applied in a sandbox copy, with which the
    /// accepted test must pass).
    #[arg(long)]
    pub no_probe: bool,
    /// Stop the run cleanly after this many model calls (outcome `budget`, exit 3); with
    /// `bench run`, per case.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_calls: Option<u32>,
    /// Stop the run cleanly once it has spent this many US dollars (outcome `budget`,
    /// exit 3); with `bench run`, per case. The model needs a price (built in, or
    /// `[prices]` in reproagent.toml).
    #[arg(long, value_parser = parse_cost)]
    pub max_cost: Option<f64>,
    /// How tools are offered: `native` tool calls, `text` (JSON in the answer's text, for
    /// endpoints without tool calling), or `auto` (native, switching to text when the
    /// endpoint refuses tools or answers a tool call in text).
    #[arg(long, value_enum, default_value = "auto")]
    pub tool_protocol: ProtocolArg,
}

fn parse_cost(s: &str) -> Result<f64, String> {
    match s.trim().trim_start_matches('$').parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not an amount of US dollars above 0 (e.g. 0.50)")),
    }
}

impl PipelineFlags {
    /// The pipeline's options; the review's model falls back to `[model] review_model`
    /// in `dir`'s reproagent.toml.
    pub fn options(&self, dir: &std::path::Path) -> anyhow::Result<crate::reproduce::pipeline::Options> {
        let review_model = match &self.review_model {
            Some(m) => Some(m.clone()),
            None => {
                crate::model::config::FileConfig::load(dir)
                    .map_err(|e| with_hint(e.to_string(), e.hint().as_deref()))?
                    .model
                    .review_model
            }
        };
        Ok(crate::reproduce::pipeline::Options {
            review_model: review_model.filter(|m| !m.trim().is_empty()),
            json_mode: !self.no_json_mode,
            probe: !self.no_probe,
            limits: crate::reproduce::agent::Limits { max_calls: self.max_calls, max_cost_usd: self.max_cost },
            tool_protocol: self.tool_protocol.into(),
        })
    }

    /// A cost limit needs a price: refused before the first call, not found out after it.
    pub fn check_price(&self, config: &crate::model::ModelConfig) -> anyhow::Result<()> {
        if let (Some(max), None) = (self.max_cost, config.prices.lookup(&config.model)) {
            return Err(with_hint(
                format!("--max-cost {max} cannot be kept: model '{}' has no known price", config.model),
                Some(&format!(
                    "add it to reproagent.toml: [prices] \"{}\" = {{ input = USD_PER_MTOK, output = USD_PER_MTOK }}, or use --max-calls",
                    config.model
                )),
            ));
        }
        Ok(())
    }
}

/// `--tool-protocol`: clap's side of [`ToolProtocol`](crate::reproduce::agent::ToolProtocol)
/// (only `cli` knows clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProtocolArg {
    Auto,
    Native,
    Text,
}

impl From<ProtocolArg> for crate::reproduce::agent::ToolProtocol {
    fn from(p: ProtocolArg) -> Self {
        use crate::reproduce::agent::ToolProtocol;
        match p {
            ProtocolArg::Auto => ToolProtocol::Auto,
            ProtocolArg::Native => ToolProtocol::Native,
            ProtocolArg::Text => ToolProtocol::Text,
        }
    }
}

/// The environment tests run in: `--python`, and where a Docker image keeps the repository.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EnvFlags {
    /// The Python tests run with (local sandbox): an interpreter or a virtualenv directory.
    /// Default: `[sandbox] python` in reproagent.toml, else VIRTUAL_ENV, else the
    /// repository's .venv/venv/env/.tox env, else poetry/pipenv/uv/hatch/conda's, else the system's.
    #[arg(long, value_name = "PATH")]
    pub python: Option<std::path::PathBuf>,
    /// Docker: the directory the image keeps the repository in (e.g. /testbed); the copy is
    /// uploaded over it and every command runs there.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// Docker: a shell line every command runs after, in bash (e.g. `source
    /// /opt/miniconda3/bin/activate && conda activate testbed`).
    #[arg(long, value_name = "LINE")]
    pub activate: Option<String>,
}

impl EnvFlags {
    pub fn options(&self) -> crate::sandbox::env::EnvOptions {
        crate::sandbox::env::EnvOptions {
            python: self.python.clone(),
            workdir: self.workdir.clone(),
            activate: self.activate.clone(),
        }
    }

    /// Resolve the environment for `repo` once, and say it (on stderr).
    pub fn resolve(&self, repo: &std::path::Path) -> anyhow::Result<std::sync::Arc<crate::sandbox::env::Environment>> {
        let e = crate::sandbox::env::resolve(repo, &self.options()).map_err(|e| with_hint(e.to_string(), e.hint()))?;
        eprintln!("{}", e.summary());
        Ok(std::sync::Arc::new(e))
    }
}

/// An error message with its hint, as one line: `what went wrong (hint: what to do)`.
pub(crate) fn with_hint(msg: String, hint: Option<&str>) -> anyhow::Error {
    match hint {
        Some(h) => anyhow::anyhow!("{msg} (hint: {h})"),
        None => anyhow::anyhow!("{msg}"),
    }
}
