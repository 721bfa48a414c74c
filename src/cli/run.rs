//! `sigmatop run -- CMD` and `sigmatop --record DIR -- CMD`: a program started under the preload,
//! watched in the dashboard (on a terminal) or followed headless with a summary at its end.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sigmatop_tui::{App, Theme};

use super::child::{
    Target, catch_signals, describe, exit_code, hung_up, in_terminal_foreground, passed_on,
    program_name, signal_name, terminate_with_sigmatop,
};
use super::dashboard::{Dashboard, Source, run_terminal_keep};
use super::diagnose::{LibraryWatch, NothingTraced};
use super::final_state::FinalStates;
use super::live_feed::{ChildWatch, Diagnosis, LiveFeed};
use super::{CliResult, RunArgs, layers_mask, table};
use crate::agg::Model;
use crate::event::Mode;
use crate::live::{LiveSource, ProcessFilter, default_socket_dir};
use crate::trace::reader::Recording;

pub use super::preload::{PRELOAD_NAME, find_preload};

fn absolute(p: &Path) -> Result<PathBuf, String> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .map_err(|e| format!("cannot resolve {}: {e}", p.display()))
    }
}

/// A line on stderr that never panics: after a hangup the terminal is gone, and sigmatop still
/// waits for the program and exits with its status.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// One run per record directory: a directory that already holds anything is refused, so that two
/// runs are never merged into one job that never happened.
fn refuse_used_record_dir(dir: &Path) -> Result<(), String> {
    let used = match std::fs::read_dir(dir) {
        Ok(mut rd) => rd.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(format!("record directory {}: {e}", dir.display())),
    };
    if used {
        return Err(format!(
            "record directory {} is not empty (it may hold an earlier run): give a new or empty directory, e.g. --record {}-2",
            dir.display(),
            dir.display().to_string().trim_end_matches('/')
        ));
    }
    Ok(())
}

/// The program sigmatop started died of a signal or exited non-zero: its process says so (JSON
/// `exit_signal` / `exit_code` and `problem`, the summary's row) instead of looking like any other
/// exit.
fn note_killed(model: &mut Model, pid: u32, status: std::process::ExitStatus) {
    let end = match (status.signal(), status.code()) {
        (Some(sig), _) => crate::event::ProcessEnd::Signal(sig),
        (None, Some(c)) if c != 0 => crate::event::ProcessEnd::Exit(c),
        _ => return,
    };
    model.note_end(None, pid, end);
}

/// A record directory this run created and nothing was written to (a program that traced
/// nothing) is removed, so that no empty directory is left to puzzle over; the line says so.
/// Removes the directories of processes that ended before their record began (a Ctrl-C a few ms
/// into the run: the directory made, the process file not yet holding the identity that names
/// it), saying so: such a directory holds nothing a reader can place, and a record of only
/// those is then empty.
fn prune_unstarted(args: &RunArgs) {
    let Some(dir) = args.record.as_deref() else {
        return;
    };
    let Ok(hosts) = std::fs::read_dir(dir) else {
        return;
    };
    for host in hosts.flatten() {
        let Ok(pids) = std::fs::read_dir(host.path()) else {
            continue;
        };
        for pd in pids.flatten() {
            let p = pd.path();
            if !p.is_dir() {
                continue;
            }
            let started = crate::trace::reader::ProcessRecording::open(&p).is_ok();
            // Only what a process that never began leaves: its process file (or none), no
            // thread file.
            let only_head = std::fs::read_dir(&p).is_ok_and(|rd| {
                rd.flatten()
                    .all(|f| f.file_name() == crate::trace::PROCESS_FILE)
            });
            if !started && only_head && std::fs::remove_dir_all(&p).is_ok() {
                say!(
                    "sigmatop: process {} ended before its record began; its empty directory {} removed",
                    pd.file_name().to_string_lossy(),
                    p.display()
                );
            }
        }
        let _ = std::fs::remove_dir(host.path());
    }
}

fn remove_empty_record(args: &RunArgs) {
    let Some(dir) = args.record.as_deref() else {
        return;
    };
    let empty = std::fs::read_dir(dir).is_ok_and(|mut rd| rd.next().is_none());
    if empty && std::fs::remove_dir(dir).is_ok() {
        say!(
            "sigmatop: nothing was recorded; removed the empty record directory {}",
            dir.display()
        );
    }
}

/// Builds the command with the preload environment.
pub fn traced_command(args: &RunArgs, socket_dir: &Path) -> Result<Command, String> {
    let mode = Mode::parse(&args.mode)
        .ok_or_else(|| format!("--mode {}: expected aggregate, simple or full", args.mode))?;
    let preload = find_preload()?;
    let (prog, rest) = args
        .cmd
        .split_first()
        .ok_or("no program given: sigmatop run -- PROGRAM [ARGS...]")?;
    let mut cmd = Command::new(prog);
    cmd.args(rest);
    let ld = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.trim().is_empty() => format!("{}:{old}", preload.display()),
        _ => preload.display().to_string(),
    };
    cmd.env("LD_PRELOAD", ld)
        .env("SIGMATOP_MODE", mode.name())
        .env("SIGMATOP_SOCKET_DIR", socket_dir);
    // sigmatop is also NCCL's profiler plugin (docs/NCCL.md); a plugin the user chose is
    // chained behind it (NCCL loads one): sigmatop loads it and forwards every call to it.
    cmd.env("NCCL_PROFILER_PLUGIN", &preload);
    match std::env::var_os("NCCL_PROFILER_PLUGIN") {
        Some(v) if !v.is_empty() && v != preload.as_os_str() && v != "none" => {
            eprintln!(
                "sigmatop: NCCL_PROFILER_PLUGIN={} is yours: chained behind sigmatop's (NCCL loads sigmatop, sigmatop loads yours and forwards every event it asks for)",
                v.to_string_lossy()
            );
            cmd.env("SIGMATOP_NCCL_PROFILER_PLUGIN", &v);
        }
        Some(v) if v == "none" => {
            // The user switched NCCL's profiler off: so it stays.
            cmd.env("NCCL_PROFILER_PLUGIN", "none");
            eprintln!(
                "sigmatop: NCCL_PROFILER_PLUGIN=none is yours and stays: NCCL collectives are not attributed, verbs tracing goes on"
            );
        }
        _ => {
            cmd.env_remove("SIGMATOP_NCCL_PROFILER_PLUGIN");
        }
    }
    if let Some(r) = &args.record {
        let r = absolute(r)?;
        refuse_used_record_dir(&r)?;
        crate::trace::writer::create_private_dir(&r)
            .map_err(|e| format!("cannot create record directory {}: {e}", r.display()))?;
        cmd.env("SIGMATOP_RECORD", r);
    } else {
        cmd.env_remove("SIGMATOP_RECORD");
    }
    if let Some(l) = &args.layers {
        cmd.env("SIGMATOP_LAYERS", l);
    }
    if let Some(s) = args.sample {
        if s == 0 {
            return Err("--sample 0: give a positive N (one event in N is sent live)".into());
        }
        cmd.env("SIGMATOP_SAMPLE", s.to_string());
    }
    Ok(cmd)
}

/// Where `--json` sends the summary.
enum JsonOut {
    /// Standard output; the program's stdout is sent to stderr instead.
    Stdout,
    /// A file, created before the program starts (a bad path fails at once, not after the run).
    File(PathBuf, File),
}

impl JsonOut {
    fn open(path: &Path) -> Result<JsonOut, String> {
        if path.as_os_str() == "-" {
            return Ok(JsonOut::Stdout);
        }
        File::create(path)
            .map(|f| JsonOut::File(path.to_path_buf(), f))
            .map_err(|e| format!("--json {}: cannot create it: {e}", path.display()))
    }
}

/// The run's directory of final states (processes too short-lived to connect to), passed to the
/// program; None (and nothing passed) when it cannot be created.
fn final_states(cmd: &mut Command, socket_dir: &Path) -> Option<FinalStates> {
    let f = FinalStates::create(socket_dir)?;
    cmd.env("SIGMATOP_FINAL_DIR", f.dir());
    Some(f)
}

/// `sigmatop run` without the dashboard, and `sigmatop --record DIR -- CMD`: runs the program,
/// follows its processes live, prints a summary at the end, and exits with the program's status.
pub fn run_headless(args: &RunArgs) -> CliResult {
    // Signals are caught before anything is made (the record directory): a Ctrl-C from here on
    // reaches the program once it has started, and the run ends as any other, saying what it
    // left; one that came earlier ended sigmatop before it made anything.
    let caught = catch_signals();
    let socket_dir = default_socket_dir();
    let prepared = (|| -> Result<_, String> {
        let mut cmd = traced_command(args, &socket_dir)?;
        let finals = final_states(&mut cmd, &socket_dir);
        let json = args.json.as_deref().map(JsonOut::open).transpose()?;
        if let Some(JsonOut::Stdout) = json {
            // stdout is the JSON's alone: the program writes its own output to stderr.
            let err = io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| format!("cannot duplicate stderr for the program's output: {e}"))?;
            cmd.stdout(Stdio::from(err));
        }
        Ok((cmd, finals, json))
    })();
    let (mut cmd, mut finals, json) = match prepared {
        Ok(p) => p,
        Err(e) => {
            caught.pass_to(None);
            return Err(e);
        }
    };
    let name = program_name(&args.cmd);
    // On a terminal, in its foreground, the program shares sigmatop's process group, so that the
    // terminal's Ctrl-C, Ctrl-Z and hangup reach it as from a shell; anywhere else (`timeout`,
    // Slurm, a script, nohup) it leads a group of its own, and every signal sigmatop gets is
    // passed on to that whole group.
    let shared = in_terminal_foreground();
    if !shared {
        cmd.process_group(0);
    }
    terminate_with_sigmatop(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            caught.pass_to(None);
            return Err(format!("cannot start {}: {e}", args.cmd[0]));
        }
    };
    caught.pass_to(Some(if shared {
        Target::Process(child.id())
    } else {
        Target::Group(child.id())
    }));
    let mut model = Model::new();
    let mut live = LiveSource::new(socket_dir, ProcessFilter::DescendantsOf(child.id()));
    live.scan_every = Duration::from_millis(20);
    let mut libraries = LibraryWatch::new(child.id());
    // A NCCL collective that hangs is said as it happens (a batch job's log has it), and again
    // when it goes on.
    let mut hung = crate::agg::nccl::HungWatch::default();
    // So is a process that goes silent, or that the others wait on (`agg::waits`).
    let mut waits = crate::agg::waits::WaitWatch::default();
    // A QP whose send work stopped completing likewise (issue 36).
    let mut stalls = crate::agg::stalls::StallWatch::default();
    // And a GPU whose QPs stopped ringing doorbells (issue 40 item 3).
    let mut gpu_stops = crate::agg::gpu_stops::GpuStopWatch::default();
    let mut hung_checked = Instant::now();
    let mut stalls_checked = Instant::now();
    let status = loop {
        live.poll(&mut model);
        // Every 100 ms (cheap: processes only, peers resolved only when something stalled): a
        // stall is said within its threshold and an interval.
        if stalls_checked.elapsed() >= Duration::from_millis(100)
            && model.processes.values().any(|p| {
                p.queues.is_some()
                    || p.endpoints
                        .values()
                        .any(|d| d.gpu.is_some() || d.kind == crate::event::EndpointKind::DevxQp)
            })
        {
            stalls_checked = Instant::now();
            let at = crate::agg::ModelAt::new(
                &model,
                &crate::agg::AtOptions {
                    now_ns: Some(crate::agg::nccl::wall_ns()),
                    detail: crate::agg::Detail::Processes,
                    ..Default::default()
                },
            );
            for l in stalls.check(&at, crate::agg::warnings::hang_ns()) {
                say!("sigmatop: {l}");
            }
            for l in gpu_stops.check(&at, crate::agg::warnings::hang_ns()) {
                say!("sigmatop: {l}");
            }
        }
        if hung_checked.elapsed() >= Duration::from_millis(250) {
            hung_checked = Instant::now();
            let t = crate::agg::nccl::wall_ns();
            for l in hung.check(&model, t, crate::agg::warnings::hang_ns()) {
                say!("sigmatop: {l}");
            }
            for l in waits.check(&model, t, crate::agg::warnings::hang_ns()) {
                say!("sigmatop: {l}");
            }
        }
        if let Some(f) = finals.as_mut() {
            f.poll(&mut model);
        }
        // What the program loads is looked at until an operation is traced: a process traced
        // in one layer (UCX's verbs device discovery) may move its bytes through a library of a
        // layer --layers switched off.
        if !model.any_operation() {
            libraries.poll();
        }
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for {name}: {e}")),
        }
    };
    // Let the last frames (final snapshot, bye) arrive.
    let deadline = Instant::now() + Duration::from_millis(500);
    while live.connected() > 0 && Instant::now() < deadline {
        live.poll(&mut model);
        std::thread::sleep(Duration::from_millis(5));
    }
    // Processes that ended before sigmatop could connect to them left their final state.
    if let Some(f) = finals.as_mut() {
        f.poll(&mut model);
    }
    // A stall said and not yet cleared (the work completed between the last look and the end,
    // or the process ended stalled) is cleared now: a stall line is always followed by its end.
    {
        let at = crate::agg::ModelAt::new(
            &model,
            &crate::agg::AtOptions {
                detail: crate::agg::Detail::Processes,
                ..Default::default()
            },
        );
        for l in stalls.finish(&at) {
            say!("sigmatop: {l}");
        }
    }
    let code = exit_code(status);
    // With a record the summary comes from disk: it includes processes too short-lived to attach to.
    let mut from_record = false;
    prune_unstarted(args);
    // A record left empty (every process ended before its record began) is removed below, not
    // read: the live figures stand.
    let empty_record = args
        .record
        .as_deref()
        .is_some_and(|d| std::fs::read_dir(d).is_ok_and(|mut rd| rd.next().is_none()));
    if let Some(rec_dir) = args.record.as_ref().filter(|_| !empty_record) {
        let abs = absolute(rec_dir)?;
        match Recording::open(std::slice::from_ref(&abs)) {
            Ok(rec) => {
                model = Model::from_recording(&rec);
                from_record = true;
            }
            Err(_) if live.sockets_seen == 0 => {}
            Err(e) => say!("sigmatop: {e}"),
        }
    }
    if empty_record && live.sockets_seen > 0 {
        remove_empty_record(args);
    }
    note_killed(&mut model, child.id(), status);
    let report = if from_record {
        model.report()
    } else {
        model.report_at(Some(crate::agg::nccl::wall_ns()))
    };
    if let Some(f) = &finals {
        for path in f.loaded_objects() {
            libraries.note_library(&path);
        }
    }
    let why = NothingTraced {
        cmd: &args.cmd,
        layers_arg: args.layers.as_deref(),
        layers_on: args.layers.as_deref().map_or(Ok(u32::MAX), layers_mask)?,
        seen: &libraries,
        failed: (!status.success()).then(|| describe(status)),
    };
    let nothing = report.processes.is_empty() && live.sockets_seen == 0;
    drop(finals);
    if nothing {
        say!("sigmatop: {}", why.message());
        remove_empty_record(args);
        if json.is_none() {
            return Ok(code);
        }
        // --json still gets a valid (empty) summary: a script reads JSON, not nothing.
    }
    let t = &report.totals;
    // Processes traced, but not one operation: an MPI job over a transport sigmatop does not see.
    let used = model.processes.values().fold(0, |m, p| m | p.layers_used());
    let used = crate::event::layer_names(used);
    let idle_mpi = (!nothing && t.tx_ops + t.rx_ops + t.other_ops == 0)
        .then(|| why.idle_message(&used))
        .flatten();
    match json {
        Some(out) => {
            // The advice the terminal gets is in the JSON too (issue 25, item 9: a script read
            // `"messages": []` of a run that traced nothing).
            let mut report = report;
            if nothing {
                report.messages.push(why.message());
            }
            if let Some(h) = &idle_mpi {
                report.messages.push(h.clone());
            }
            let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            match out {
                JsonOut::Stdout => {
                    let _ = writeln!(io::stdout(), "{s}");
                }
                JsonOut::File(path, mut f) => {
                    f.write_all(s.as_bytes())
                        .and_then(|_| f.write_all(b"\n"))
                        .map_err(|e| format!("writing {}: {e}", path.display()))?;
                    say!(
                        "sigmatop: wrote {} (summary of {} process{}, JSON)",
                        path.display(),
                        report.processes.len(),
                        if report.processes.len() == 1 {
                            ""
                        } else {
                            "es"
                        }
                    );
                }
            }
        }
        None => {
            let _ = write!(
                io::stderr(),
                "{}",
                table::render(
                    &report,
                    (!from_record).then_some(&model),
                    table::width_for(io::stderr().is_terminal()),
                )
            );
            if let Some(r) = &args.record {
                say!("sigmatop: record written to {}", r.display());
            }
        }
    }
    if let Some(h) = idle_mpi {
        say!("sigmatop: {h}");
    }
    // A program that did not end by itself: say how it ended (an exit status of 0 says nothing
    // new after the summary).
    match passed_on() {
        Some((sig, _)) => say!(
            "sigmatop: {name} exited ({}) after sigmatop passed {} on to it",
            describe(status),
            signal_name(sig)
        ),
        None if status.signal().is_some() => {
            say!("sigmatop: {name} exited ({})", describe(status))
        }
        None => {}
    }
    Ok(code)
}

/// Where `run` keeps the program's output when the dashboard holds the terminal: the state
/// directory of the XDG base-directory rules (`$XDG_STATE_HOME/sigmatop`, else
/// `~/.local/state/sigmatop`), never the current directory (a repository or a job's working
/// directory is not ours to write in). Returns the candidates in order; the temp dir is last.
pub fn log_dirs(xdg_state_home: Option<&str>, home: Option<&str>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    // The spec: a relative $XDG_STATE_HOME is invalid and is ignored.
    match xdg_state_home.filter(|d| Path::new(d).is_absolute()) {
        Some(d) => dirs.push(Path::new(d).join("sigmatop")),
        None => {
            if let Some(h) = home.filter(|h| Path::new(h).is_absolute()) {
                dirs.push(Path::new(h).join(".local/state/sigmatop"));
            }
        }
    }
    dirs.push(std::env::temp_dir());
    dirs
}

/// A path as a person types it: the home directory as `~` (the status line is narrow).
pub fn shown_path(p: &Path, home: Option<&str>) -> String {
    match home
        .filter(|h| h.len() > 1)
        .and_then(|h| p.strip_prefix(h).ok())
    {
        Some(rest) => format!("~/{}", rest.display()),
        None => p.display().to_string(),
    }
}

/// The log file for the program's output: sigmatop-run-<pid>.log in the first of [`log_dirs`] that can
/// be created and written.
fn open_log() -> Result<(PathBuf, File), String> {
    let name = format!("sigmatop-run-{}.log", std::process::id());
    let xdg = std::env::var("XDG_STATE_HOME").ok();
    let home = std::env::var("HOME").ok();
    let mut last = String::new();
    for dir in log_dirs(xdg.as_deref(), home.as_deref()) {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            last = format!("cannot create {}: {e}", dir.display());
            continue;
        }
        let p = dir.join(&name);
        match File::create(&p) {
            Ok(f) => return Ok((p, f)),
            Err(e) => last = format!("cannot create {}: {e}", p.display()),
        }
    }
    Err(format!(
        "{last}; set XDG_STATE_HOME to a writable directory for the program's output log"
    ))
}

/// `sigmatop run -- CMD`: the dashboard when stdin and stdout are a terminal and not `--headless`
/// or `--json`; the program's output goes to a log file. On `q` the dashboard closes and sigmatop
/// waits for the program; when the program exits first the dashboard stays open until `q`.
pub fn run_cmd(args: &RunArgs) -> CliResult {
    if args.headless
        || args.json.is_some()
        || !io::stdout().is_terminal()
        || !io::stdin().is_terminal()
    {
        return run_headless(args);
    }
    let theme = Theme::from_env(args.theme.as_deref()).map_err(|e| e.to_string())?;
    // Signals are caught before anything is made (the record directory, the log): see
    // run_headless.
    let caught = catch_signals();
    let socket_dir = default_socket_dir();
    let prepared = (|| -> Result<_, String> {
        let mut cmd = traced_command(args, &socket_dir)?;
        let finals = final_states(&mut cmd, &socket_dir);
        let (log, file) = open_log()?;
        let err = file
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(file).stderr(err);
        Ok((cmd, finals, log))
    })();
    let (mut cmd, finals, log) = match prepared {
        Ok(p) => p,
        Err(e) => {
            caught.pass_to(None);
            return Err(e);
        }
    };
    let shown = shown_path(&log, std::env::var("HOME").ok().as_deref());
    // A process group of its own: the dashboard holds the terminal in raw mode, where Ctrl-C is
    // a key, not a signal; the dashboard sends SIGINT to this group instead (as a shell's Ctrl-C
    // reaches the whole foreground job), and sigmatop passes on to it the signals it gets, from
    // before the program starts until it has been reaped.
    cmd.process_group(0);
    terminate_with_sigmatop(&mut cmd);
    let name = program_name(&args.cmd);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            caught.pass_to(None);
            return Err(format!("cannot start {name}: {e}"));
        }
    };
    let pid = child.id();
    caught.pass_to(Some(Target::Group(pid)));
    let mut live = LiveSource::new(socket_dir, ProcessFilter::DescendantsOf(pid));
    live.scan_every = Duration::from_millis(100);
    let feed = LiveFeed {
        live,
        child: Some(ChildWatch {
            child,
            name: name.clone(),
            log_shown: shown.clone(),
            status: None,
            interrupts: 0,
            interrupt_error: None,
            diagnosis: Diagnosis::new(&args.cmd, args.layers.as_deref(), pid),
        }),
        finals,
    };
    let (mut dash, result) = run_terminal_keep(Dashboard::new(feed, App::new(theme)));
    if let Err(e) = &result {
        // The terminal failed (or went away): sigmatop still waits for the program, as after `q`.
        say!("sigmatop: {e}");
    }
    let Some(mut c) = dash.source.child.take() else {
        return Ok(0);
    };
    let status = match c.status {
        Some(st) => st,
        None => {
            match passed_on() {
                Some((sig, _)) => say!(
                    "sigmatop: {} passed on to {name} (pid {pid}); waiting for it to exit (output in {})",
                    signal_name(sig),
                    shown
                ),
                None => say!(
                    "sigmatop: stopped watching; waiting for {name} (pid {pid}) to exit (output in {}); Ctrl-C sends it SIGINT",
                    shown
                ),
            }
            // Signals to sigmatop (the terminal's Ctrl-C) go on to the program's group. The
            // processes go on being followed, for the summary.
            loop {
                dash.source.poll(&mut dash.model);
                match c.child.try_wait() {
                    Ok(Some(st)) => break st,
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => return Err(format!("waiting for {name}: {e}")),
                }
            }
        }
    };
    // The last frames (final snapshots, goodbyes) and final states, then the summary: what the
    // dashboard showed last, in a form that stays on the terminal.
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        dash.source.poll(&mut dash.model);
        if dash.source.live.connected() == 0 || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    prune_unstarted(args);
    remove_empty_record(args);
    note_killed(&mut dash.model, pid, status);
    let report = dash.model.report();
    let summary = if report.processes.is_empty() {
        String::new()
    } else {
        table::render(
            &report,
            Some(&dash.model),
            table::width_for(io::stderr().is_terminal()),
        )
    };
    let last = format!(
        "sigmatop: {name} exited ({}); its output is in {}",
        describe(status),
        shown
    );
    let _ = write!(io::stderr().lock(), "{summary}");
    say!("{last}");
    // Nothing was traced: the same advice as a headless run's (the dashboard showed it too).
    let t = &report.totals;
    let m = if report.processes.is_empty() && dash.source.live.sockets_seen == 0 {
        Some(match c.diagnosis.told.take() {
            Some(m) => m,
            None => c.diagnosis.message(status, dash.source.finals.as_ref()),
        })
    } else if t.tx_ops + t.rx_ops + t.other_ops == 0 {
        // Traced, but not one operation: a layer it used was switched off, or an MPI job over
        // a transport sigmatop does not see (as a headless run says).
        let used = dash
            .model
            .processes
            .values()
            .fold(0, |m, p| m | p.layers_used());
        c.diagnosis.idle_message(
            status,
            dash.source.finals.as_ref(),
            &crate::event::layer_names(used),
        )
    } else {
        None
    };
    let advice = match m {
        Some(m) => {
            say!("sigmatop: {m}");
            format!("sigmatop: {m}\n")
        }
        None => String::new(),
    };
    // The summary also follows the program's output in its log: after an ssh drop or a
    // `tmux kill-window` no terminal is left to read it on.
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&log) {
        let why = if hung_up() {
            " (the terminal hung up)"
        } else {
            ""
        };
        let _ = writeln!(f, "{summary}{last}{why}");
        let _ = write!(f, "{advice}");
    }
    Ok(exit_code(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_goes_to_the_state_directory_not_the_working_directory() {
        let tmp = std::env::temp_dir();
        assert_eq!(
            log_dirs(Some("/s"), Some("/h")),
            vec![PathBuf::from("/s/sigmatop"), tmp.clone()]
        );
        assert_eq!(
            log_dirs(None, Some("/h")),
            vec![PathBuf::from("/h/.local/state/sigmatop"), tmp.clone()]
        );
        // A relative XDG_STATE_HOME is ignored (the XDG rules), as is a relative HOME.
        assert_eq!(
            log_dirs(Some("state"), Some("/h")),
            vec![PathBuf::from("/h/.local/state/sigmatop"), tmp.clone()]
        );
        assert_eq!(log_dirs(None, Some("h")), vec![tmp.clone()]);
        assert_eq!(log_dirs(None, None), vec![tmp]);
    }

    #[test]
    fn a_path_under_home_is_shown_with_a_tilde() {
        let p = Path::new("/home/ann/.local/state/sigmatop/sigmatop-run-7.log");
        assert_eq!(
            shown_path(p, Some("/home/ann")),
            "~/.local/state/sigmatop/sigmatop-run-7.log"
        );
        assert_eq!(shown_path(p, Some("/home/an")), p.display().to_string());
        assert_eq!(shown_path(p, Some("/")), p.display().to_string());
        assert_eq!(shown_path(p, None), p.display().to_string());
    }
}
