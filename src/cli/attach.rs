//! `sigmatop attach`: every traced process of this user on this host (or the named PIDs), in the
//! dashboard on a terminal, or printed as tables or JSON (`--json`, `--once`, no terminal).

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::dashboard::run;
use super::live_feed::LiveFeed;
use super::{AttachArgs, CliResult, table};
use crate::agg::Model;
use crate::live::{LiveSource, ProcessFilter, default_socket_dir, process_exists};

/// Named PIDs must exist: a typo or a finished job is said at once, not waited on forever.
fn check_pids(pids: &[u32]) -> Result<(), String> {
    let missing: Vec<String> = pids
        .iter()
        .filter(|p| !process_exists(**p))
        .map(|p| p.to_string())
        .collect();
    match missing.as_slice() {
        [] => Ok(()),
        [one] => Err(format!("no process with pid {one} on this host")),
        many => Err(format!(
            "no processes with pids {} on this host",
            many.join(", ")
        )),
    }
}

fn filter_of(args: &AttachArgs) -> ProcessFilter {
    if args.pids.is_empty() {
        ProcessFilter::All
    } else {
        ProcessFilter::Pids(args.pids.clone())
    }
}

/// Says which stale sockets were removed (once each).
fn say_stale(live: &LiveSource, said: &mut usize) {
    for p in &live.stale_removed[*said..] {
        eprintln!(
            "sigmatop: removed stale socket {} (its process is gone)",
            p.display()
        );
    }
    *said = live.stale_removed.len();
}

/// "no traced process found in DIR" with what to do; for named PIDs, which of them are there.
fn nothing_traced(dir: &Path, pids: &[u32]) -> String {
    if pids.is_empty() {
        return format!(
            "no traced process found in {} (start one with `sigmatop run -- CMD`, or set --socket-dir)",
            dir.display()
        );
    }
    let list: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    format!(
        "pid {} {} running but not traced: no socket in {} (start it under `sigmatop run`, or it has made no RDMA call yet; set --socket-dir if it uses another directory)",
        list.join(", "),
        if pids.len() == 1 { "is" } else { "are" },
        dir.display()
    )
}

/// `sigmatop attach`: the dashboard on a terminal; `--json`, `--once` or no terminal print instead.
pub fn attach(args: &AttachArgs) -> CliResult {
    check_pids(&args.pids)?;
    if args.json || args.once || !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return attach_print(args);
    }
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let feed = LiveFeed {
        live: LiveSource::new(dir, filter_of(args)),
        child: None,
    };
    run(feed, args.theme.as_deref())
}

/// `sigmatop attach --json/--once` (and the text form until a terminal is there). Nothing is
/// printed while there is nothing to show: stderr says once what sigmatop is waiting for.
pub fn attach_print(args: &AttachArgs) -> CliResult {
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let mut live = LiveSource::new(dir.clone(), filter_of(args));
    let mut model = Model::new();
    let interval = Duration::from_millis(args.interval_ms.max(10));
    let mut said = 0;
    let mut said_stale = 0;
    let mut said_waiting = false;
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
        say_stale(&live, &mut said_stale);
        if model.processes.is_empty() {
            if args.once {
                return Err(nothing_traced(&dir, &args.pids));
            }
            // Named processes that are all gone will never show up.
            if !args.pids.is_empty() && args.pids.iter().all(|p| !process_exists(*p)) {
                return Err(format!(
                    "{} exited without being traced",
                    if args.pids.len() == 1 {
                        format!("pid {}", args.pids[0])
                    } else {
                        "every named pid".to_string()
                    }
                ));
            }
            if !said_waiting {
                eprintln!(
                    "sigmatop: {}; waiting for one (Ctrl-C stops)",
                    nothing_traced(&dir, &args.pids)
                );
                said_waiting = true;
            }
            continue;
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
            let _ = write!(out, "{}", table::render(&report, Some(&model)));
        }
        let _ = out.flush();
        if args.once {
            return Ok(0);
        }
    }
}
