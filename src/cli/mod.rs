//! The command line: one file per subcommand, each an `XxxArgs` clap struct whose doc
//! comments are the help text and a `run()` that checks its input before any work.
//! Only this layer knows clap.

use clap::{Parser, Subcommand};

pub mod sandbox;

/// Turns a bug report into a test that reproduces it, on an embedded code knowledge graph.
#[derive(Parser, Debug)]
#[command(name = "reproagent", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Environment images and one-off commands in the sandbox.
    Sandbox(sandbox::SandboxArgs),
}

/// Run the CLI and return the process exit code. Errors are printed as one line
/// (`error: ...`) with a hint when there is one.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let result: anyhow::Result<()> = match cli.command {
        Command::Sandbox(args) => sandbox::run(args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => report(&e),
    }
}

/// Print an error chain on one line; a broken pipe (`reproagent ... | head`) is not an error.
fn report(e: &anyhow::Error) -> i32 {
    if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
        return 0;
    }
    let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    eprintln!("error: {}", msg.join(": "));
    1
}
