//! The `reproagent` binary: parse the command line, run it, map errors to an exit code.

fn main() {
    std::process::exit(reproagent::cli::main());
}
