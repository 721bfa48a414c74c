//! The `sigmatop` binary: parses the command line and hands off to `sigmatop::cli`.

use clap::Parser;
use sigmatop::cli::{Cli, Command, RunArgs, attach, export, relay, replay, report, run, serve};

fn main() {
    let cli = Cli::parse_from(hang_after_last(std::env::args_os().collect()));
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

/// `--hang-after D` given before the verb (`sigmatop --hang-after 1s run -- app`) moves after
/// it: clap refuses a verb after the card's own top-level options (`sigmatop --record out/ --
/// app`), and the threshold is an option of every verb.
fn hang_after_last(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const VERBS: &[&str] = &[
        "run", "attach", "export", "report", "replay", "demo", "serve", "relay",
    ];
    let verb = args
        .iter()
        .position(|a| a.to_str().is_some_and(|a| VERBS.contains(&a)));
    let Some(verb) = verb else { return args };
    let Some(at) = args[1..verb]
        .iter()
        .position(|a| {
            a.to_str()
                .is_some_and(|a| a == "--hang-after" || a.starts_with("--hang-after="))
        })
        .map(|i| i + 1)
    else {
        return args;
    };
    // Only options may stand before the verb: "--" or a program name there means no verb.
    if args[1..verb].iter().any(|a| a == "--") {
        return args;
    }
    let n = if args[at].to_str().is_some_and(|a| a.contains('=')) {
        1
    } else {
        2
    };
    if at + n > verb {
        return args;
    }
    let moved: Vec<std::ffi::OsString> = args.drain(at..at + n).collect();
    let verb = verb - n;
    for (i, a) in moved.into_iter().enumerate() {
        args.insert(verb + 1 + i, a);
    }
    args
}
