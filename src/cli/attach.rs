//! `sigmatop attach`: every traced process of this user on this host (or the named PIDs), in the
//! dashboard on a terminal, or printed as tables or JSON (`--json`, `--once`, no terminal).

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

use super::dashboard::run;
use super::live_feed::LiveFeed;
use super::{AttachArgs, CliResult, table};
use crate::agg::Model;
use crate::live::{LiveSource, ProcessFilter, default_socket_dir};

/// `sigmatop attach`: the dashboard on a terminal; `--json`, `--once` or no terminal print instead.
pub fn attach(args: &AttachArgs) -> CliResult {
    if args.json || args.once || !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return attach_print(args);
    }
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let filter = if args.pids.is_empty() {
        ProcessFilter::All
    } else {
        ProcessFilter::Pids(args.pids.clone())
    };
    let feed = LiveFeed {
        live: LiveSource::new(dir, filter),
        child: None,
    };
    run(feed, args.theme.as_deref())
}

/// `sigmatop attach --json/--once` (and the text form until a terminal is there).
pub fn attach_print(args: &AttachArgs) -> CliResult {
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let filter = if args.pids.is_empty() {
        ProcessFilter::All
    } else {
        ProcessFilter::Pids(args.pids.clone())
    };
    let mut live = LiveSource::new(dir.clone(), filter);
    let mut model = Model::new();
    let interval = Duration::from_millis(args.interval_ms.max(10));
    let mut said = 0;
    loop {
        let start = Instant::now();
        while start.elapsed() < interval {
            live.poll(&mut model);
            std::thread::sleep(Duration::from_millis(10));
        }
        // Refused sockets, bad frames: one line each on stderr, the output stays clean.
        for m in &model.messages[said..] {
            eprintln!("sigmatop: {m}");
        }
        said = model.messages.len();
        if model.processes.is_empty() && args.once {
            return Err(format!(
                "no traced process found in {} (start one with `sigmatop run -- CMD`, or set --socket-dir)",
                dir.display()
            ));
        }
        let report = model.report();
        let mut out = std::io::stdout().lock();
        if args.json {
            let s = if args.once {
                serde_json::to_string_pretty(&report)
            } else {
                serde_json::to_string(&report)
            }
            .map_err(|e| e.to_string())?;
            let _ = writeln!(out, "{s}");
        } else {
            let _ = write!(out, "{}", table::render(&report));
        }
        let _ = out.flush();
        if args.once {
            return Ok(0);
        }
    }
}
