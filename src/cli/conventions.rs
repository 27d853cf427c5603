//! `reproagent conventions [--suspect FILE]...`: the test conventions the reproduce
//! pipeline hands the model (and the key-free mode follows) for some suspect code.

use std::path::PathBuf;

use clap::Args;

use crate::reproduce::conventions;

/// Show the repository's test conventions for the code at the suspect files: languages,
/// framework, where the tests of that code live, the command that runs them, an example.
#[derive(Args, Debug)]
pub struct ConventionsArgs {
    /// The repository root (where `index` was run).
    #[arg(long, short = 'C', default_value = ".")]
    pub repo: PathBuf,
    /// A suspect file, relative to the root (repeatable; most suspect first).
    #[arg(long = "suspect", value_name = "FILE")]
    pub suspects: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ConventionsArgs) -> anyhow::Result<()> {
    let db = crate::store::db_path(&args.repo);
    if !db.exists() {
        return Err(super::with_hint(
            format!("{} holds no index", args.repo.display()),
            Some("run `reproagent index` there first"),
        ));
    }
    for s in &args.suspects {
        if !args.repo.join(s).is_file() {
            return Err(super::with_hint(
                format!("suspect {s:?} is not a file under {}", args.repo.display()),
                Some("give paths relative to the repository root"),
            ));
        }
    }
    let conv = conventions::conventions(&args.repo, &args.suspects);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&conv)?);
    } else {
        print!("{}", conv.text());
    }
    Ok(())
}
