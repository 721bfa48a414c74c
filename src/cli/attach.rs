//! `sigmatop attach`: every traced process of this user on this host (or the named PIDs), or on
//! remote hosts through their relays (`cli::remote`), in the dashboard on a terminal, or printed
//! as tables or JSON (`--json`, `--once`, no terminal).

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use super::dashboard::run;
use super::live_feed::LiveFeed;
use super::remote::{self, Remote, RemoteFeed, Transport};
use super::{AttachArgs, CliResult, table};
use crate::agg::{LinkState, Model};
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

/// What `attach` follows: local processes (all, or the named PIDs) or remote hosts.
enum Targets {
    Local(Vec<u32>),
    Hosts(Vec<String>),
}

/// All-numeric arguments are PIDs of this host; anything else names hosts (a mix is an error).
fn targets_of(args: &AttachArgs) -> Result<Targets, String> {
    let numeric = |t: &String| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let remote_flags = args.via.is_some() || args.slurm.is_some() || !args.ssh_opts.is_empty();
    if let Some(job) = &args.slurm {
        if !args.targets.is_empty() {
            return Err(format!(
                "--slurm {job} takes the job's nodes itself: give no hosts with it"
            ));
        }
        if args.via.is_some() {
            return Err("--slurm and --via both say how to reach the hosts: give one".into());
        }
        return Ok(Targets::Hosts(remote::slurm_hosts(job)?));
    }
    if args.targets.iter().all(numeric) {
        if remote_flags && args.targets.is_empty() {
            return Err("--via and --ssh-opt need hosts: sigmatop attach HOST... --via ...".into());
        }
        let pids = args
            .targets
            .iter()
            .map(|t| {
                t.parse::<u32>()
                    .map_err(|_| format!("'{t}' is not a pid (too large)"))
            })
            .collect::<Result<Vec<u32>, String>>()?;
        if !pids.is_empty() && remote_flags {
            return Err("--via and --ssh-opt are for hosts, not PIDs".into());
        }
        return Ok(Targets::Local(pids));
    }
    if let Some(p) = args.targets.iter().find(|t| numeric(t)) {
        return Err(format!(
            "'{p}' looks like a pid, the other arguments like hosts: give PIDs of this host or hosts, not both"
        ));
    }
    Ok(Targets::Hosts(remote::destinations(&args.targets)?))
}

fn filter_of(pids: &[u32]) -> ProcessFilter {
    if pids.is_empty() {
        ProcessFilter::All
    } else {
        ProcessFilter::Pids(pids.to_vec())
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
    let pids = match targets_of(args)? {
        Targets::Hosts(hosts) => return attach_hosts(args, hosts),
        Targets::Local(p) => p,
    };
    check_pids(&pids)?;
    if args.json || args.once || !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return attach_print(args, &pids);
    }
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let feed = LiveFeed {
        live: LiveSource::new(dir, filter_of(&pids)),
        child: None,
        finals: None,
    };
    run(feed, args.theme.as_deref())
}

/// `sigmatop attach HOST...`: the dashboard over every host's relay, or printed snapshots.
fn attach_hosts(args: &AttachArgs, hosts: Vec<String>) -> CliResult {
    let transport = Transport::from_args(args)?;
    if args.json || args.once || !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return attach_hosts_print(args, hosts, transport);
    }
    let mut model = Model::new();
    let remote = Remote::new(hosts, transport, &mut model);
    super::dashboard::run_with_model(RemoteFeed::new(remote), model, args.theme.as_deref())
}

/// Prints what `model.messages` gained since `said`, one line each on stderr.
fn say_messages(model: &Model, said: &mut usize) {
    for m in &model.messages[*said..] {
        eprintln!("sigmatop: {m}");
    }
    *said = model.messages.len();
}

/// Prints one snapshot of `model` (JSON or tables), live: states and waits at the wall clock.
fn print_snapshot(model: &Model, json: bool, pretty: bool) -> Result<(), String> {
    let report = model.report_at(Some(crate::agg::nccl::wall_ns()));
    let mut out = std::io::stdout().lock();
    if json {
        let s = if pretty {
            serde_json::to_string_pretty(&report)
        } else {
            serde_json::to_string(&report)
        }
        .map_err(|e| e.to_string())?;
        let _ = writeln!(out, "{s}");
    } else {
        let _ = write!(
            out,
            "{}",
            table::render(
                &report,
                Some(model),
                table::width_for(io::stdout().is_terminal())
            )
        );
    }
    let _ = out.flush();
    Ok(())
}

/// `attach HOST... --json/--once`: waits until every host is up or has failed once, collects for
/// the interval after the last one came up, prints. With `--once`, the exit status is 1 when a
/// host could not be followed (its line is on stderr), 0 otherwise.
fn attach_hosts_print(args: &AttachArgs, hosts: Vec<String>, transport: Transport) -> CliResult {
    let mut model = Model::new();
    let mut remote = Remote::new(hosts, transport, &mut model);
    // One snapshot reports a host that failed; a stream of them keeps retrying it.
    remote.retry = !args.once;
    let interval = Duration::from_millis(args.interval_ms.max(10));
    let mut said = 0;
    let mut settled_at: Option<Instant> = None;
    let mut last_print = Instant::now();
    loop {
        remote.poll(&mut model);
        say_messages(&model, &mut said);
        if settled_at.is_none() && remote.settled(&model) {
            settled_at = Some(Instant::now());
            last_print = Instant::now();
        }
        if settled_at.is_some() && last_print.elapsed() >= interval {
            print_snapshot(&model, args.json, args.once)?;
            last_print = Instant::now();
            if args.once {
                let lost = model
                    .links
                    .iter()
                    .filter(|l| l.state != LinkState::Up)
                    .count();
                return Ok(i32::from(lost > 0));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `sigmatop attach --json/--once` (and the text form until a terminal is there). Nothing is
/// printed while there is nothing to show: stderr says once what sigmatop is waiting for.
pub fn attach_print(args: &AttachArgs, pids: &[u32]) -> CliResult {
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let mut live = LiveSource::new(dir.clone(), filter_of(pids));
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
        // One snapshot waits for the sockets it connected to until each process said hello or
        // did not answer for `NOT_ANSWERING` (a stopped process is listed as such, never
        // dropped, and never waited on for longer).
        if args.once {
            let deadline = Instant::now() + crate::live::NOT_ANSWERING + Duration::from_millis(300);
            while live.pending() > 0 && Instant::now() < deadline {
                live.poll(&mut model);
                std::thread::sleep(Duration::from_millis(10));
            }
            live.poll(&mut model);
        }
        // Refused sockets, bad frames: one line each on stderr, the output stays clean.
        say_messages(&model, &mut said);
        say_stale(&live, &mut said_stale);
        if model.processes.is_empty() && model.not_answering.is_empty() {
            if args.once {
                return Err(nothing_traced(&dir, pids));
            }
            // Named processes that are all gone will never show up.
            if !pids.is_empty() && pids.iter().all(|p| !process_exists(*p)) {
                return Err(format!(
                    "{} exited without being traced",
                    if pids.len() == 1 {
                        format!("pid {}", pids[0])
                    } else {
                        "every named pid".to_string()
                    }
                ));
            }
            if !said_waiting {
                eprintln!(
                    "sigmatop: {}; waiting for one (Ctrl-C stops)",
                    nothing_traced(&dir, pids)
                );
                said_waiting = true;
            }
            continue;
        }
        print_snapshot(&model, args.json, args.once)?;
        if args.once {
            return Ok(0);
        }
    }
}
