//! The `sigmatop` binary: parses the command line and hands off to `sigmatop::cli`.

use clap::Parser;
use sigmatop::cli::{Cli, Command, RunArgs, dashboard, launch, replay};

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Run(a)) => dashboard::run_cmd(&a),
        Some(Command::Attach(a)) => dashboard::attach(&a),
        Some(Command::Export(a)) => launch::export(&a),
        Some(Command::Report(a)) => launch::report(&a),
        Some(Command::Replay(a)) => replay::replay(&a),
        Some(Command::Demo(a)) => replay::demo(&a),
        None => {
            if cli.top.cmd.is_empty() {
                Err("nothing to do: try `sigmatop demo`, `sigmatop run -- CMD`, `sigmatop --record DIR -- CMD` or `sigmatop --help`".to_string())
            } else {
                let args = RunArgs {
                    mode: cli.top.mode.unwrap_or_else(|| "simple".into()),
                    record: cli.top.record,
                    layers: None,
                    sample: None,
                    headless: true,
                    json: false,
                    theme: None,
                    cmd: cli.top.cmd,
                };
                launch::run_headless(&args)
            }
        }
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(msg) => {
            eprintln!("sigmatop: {msg}");
            std::process::exit(2);
        }
    }
}
