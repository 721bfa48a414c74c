//! The `sigmatop` binary: parses the command line and hands off to `sigmatop::cli`.

use clap::Parser;
use sigmatop::cli::{Cli, Command, RunArgs, attach, export, relay, replay, report, run, serve};

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Some(Command::Serve(_))) {
        // Output piped into `head` or `less` that closes early ends sigmatop quietly, as it does
        // any Unix tool; `serve` keeps SIGPIPE ignored so that a scraper hanging up mid-response
        // costs only that response.
        // SAFETY: restoring the default disposition of a signal is always valid.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    if let Err(msg) = cli.apply_hang_after() {
        eprintln!("sigmatop: {msg}");
        std::process::exit(2);
    }
    let result = match cli.command {
        Some(Command::Run(a)) => run::run_cmd(&a),
        Some(Command::Attach(a)) => attach::attach(&a),
        Some(Command::Export(a)) => export::export(&a),
        Some(Command::Report(a)) => report::report(&a),
        Some(Command::Replay(a)) => replay::replay(&a),
        Some(Command::Demo(a)) => replay::demo(&a),
        Some(Command::Serve(a)) => serve::serve(&a),
        Some(Command::Relay(a)) => relay::relay(&a),
        None => {
            if cli.top.cmd.is_empty() {
                Err("nothing to do: try `sigmatop demo`, `sigmatop run -- CMD`, `sigmatop --record DIR -- CMD` or `sigmatop --help`".to_string())
            } else {
                let args = RunArgs {
                    mode: cli.top.mode.unwrap_or_else(|| "simple".into()),
                    record: cli.top.record,
                    layers: cli.top.layers,
                    sample: None,
                    headless: true,
                    json: None,
                    theme: None,
                    cmd: cli.top.cmd,
                };
                run::run_headless(&args)
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
