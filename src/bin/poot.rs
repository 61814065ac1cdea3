//! `poot`: the command-line tool over the same core as the wasm build.
//!
//! The verbs (check, trace, sample, coverage, tokenize, eval, generate, serve) arrive with the
//! issues that build their engines; until then this prints the usage.

use std::process::ExitCode;

const USAGE: &str = "usage: poot <command> [options]\n\ncommands arrive with their engines; \
see README.md";

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("--version" | "-V") => {
            println!("poot {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
