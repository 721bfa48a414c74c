//! `sigmatop run`, `--record`, `attach`, `export` and `report`: launching a program under the
//! preload, following live processes, and reading recordings.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{AttachArgs, CliResult, ExportArgs, ReportArgs, RunArgs, table};
use crate::agg::Model;
use crate::event::Mode;
use crate::live::{Filter, LiveSource, default_socket_dir};
use crate::trace::reader::Recording;

pub const PRELOAD_NAME: &str = "libsigmatop_preload.so";

/// The preload library: $SIGMATOP_PRELOAD, or beside the sigmatop binary (also ../lib/).
pub fn find_preload() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SIGMATOP_PRELOAD").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("SIGMATOP_PRELOAD={} does not exist", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate sigmatop itself: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for cand in [
        dir.join(PRELOAD_NAME),
        dir.join("../lib").join(PRELOAD_NAME),
    ] {
        if cand.is_file() {
            return cand
                .canonicalize()
                .map_err(|e| format!("{}: {e}", cand.display()));
        }
    }
    Err(format!(
        "{PRELOAD_NAME} not found beside {}: build it with `cargo build --release --workspace` or set SIGMATOP_PRELOAD",
        exe.display()
    ))
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .map_err(|e| format!("cannot resolve {}: {e}", p.display()))
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
    if let Some(r) = &args.record {
        let r = absolute(r)?;
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

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// Ignores SIGINT/SIGQUIT in sigmatop while the child runs (the terminal delivers them to the
/// child too), so the summary still prints when the user interrupts the program.
fn ignore_interrupts() {
    // SAFETY: installing SIG_IGN is always valid.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}

/// `sigmatop run` without the dashboard, and `sigmatop --record DIR -- CMD`: runs the program,
/// follows its processes live, prints a summary at the end, and exits with the program's status.
pub fn run_headless(args: &RunArgs) -> CliResult {
    let socket_dir = default_socket_dir();
    let mut cmd = traced_command(args, &socket_dir)?;
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", args.cmd[0]))?;
    ignore_interrupts();
    let mut model = Model::new();
    let mut live = LiveSource::new(socket_dir, Filter::DescendantsOf(child.id()));
    live.scan_every = Duration::from_millis(20);
    let status = loop {
        live.poll(&mut model);
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for {}: {e}", args.cmd[0])),
        }
    };
    // Let the last frames (final snapshot, bye) arrive.
    let deadline = Instant::now() + Duration::from_millis(500);
    while live.connected() > 0 && Instant::now() < deadline {
        live.poll(&mut model);
        std::thread::sleep(Duration::from_millis(5));
    }
    let code = exit_code(status);
    // With a record the summary comes from disk: it includes processes too short-lived to attach to.
    if let Some(rec_dir) = &args.record {
        let abs = absolute(rec_dir)?;
        match Recording::open(std::slice::from_ref(&abs)) {
            Ok(rec) => model = Model::from_recording(&rec),
            Err(_) if live.sockets_seen == 0 => {}
            Err(e) => eprintln!("sigmatop: {e}"),
        }
    }
    let report = model.report();
    if report.processes.is_empty() && live.sockets_seen == 0 {
        eprintln!(
            "sigmatop: {} used no RDMA library sigmatop traces (UCX, libfabric, ibverbs, mlx5): nothing was traced",
            args.cmd[0]
        );
        return Ok(code);
    }
    if args.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{s}");
    } else {
        eprint!("{}", table::render(&report));
        if let Some(r) = &args.record {
            eprintln!("sigmatop: record written to {}", r.display());
        }
    }
    Ok(code)
}

/// `sigmatop attach --json/--once` (and the text form until a terminal is there).
pub fn attach_print(args: &AttachArgs) -> CliResult {
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let filter = if args.pids.is_empty() {
        Filter::All
    } else {
        Filter::Pids(args.pids.clone())
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

pub fn export(args: &ExportArgs) -> CliResult {
    if args.json.is_none() && args.perfetto.is_none() {
        return Err("nothing to export: give --json FILE and/or --perfetto FILE".into());
    }
    let rec = Recording::open(&args.dirs)?;
    for p in &rec.problems {
        eprintln!("sigmatop: skipped {p}");
    }
    for p in &rec.processes {
        if p.is_cut() {
            eprintln!(
                "sigmatop: {}: record cut (the process did not exit cleanly); exported up to its last flushed chunk",
                p.dir.display()
            );
        }
    }
    let corr = crate::correlate::Correlation::new(&rec);
    let opts = crate::correlate::RunOptions::default();
    let (analysis, pstats) = match &args.perfetto {
        Some(path) => {
            let f = std::fs::File::create(path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            // The sink gathers packets into large writes itself.
            let mut sink = crate::export::perfetto::PerfettoSink::new(f);
            let a = corr.run(&opts, &mut sink);
            let stats = sink.stats.clone();
            sink.into_inner()
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            (a, Some(stats))
        }
        None => (corr.run(&opts, &mut crate::correlate::NoSink), None),
    };
    for p in &analysis.problems {
        eprintln!("sigmatop: skipped {p}");
    }
    if let Some(st) = &pstats
        && let Some(path) = &args.perfetto
    {
        eprintln!(
            "sigmatop: wrote {} ({} operations, {} flows, {} bytes)",
            path.display(),
            st.op_instants,
            st.flows,
            st.bytes
        );
    }
    if let Some(path) = &args.json {
        let mut ex =
            crate::export::json::build(&corr, &analysis, Model::from_recording(&rec).report());
        ex.perfetto = pstats;
        let s = serde_json::to_string_pretty(&ex).map_err(|e| e.to_string())?;
        if path.as_os_str() == "-" {
            println!("{s}");
        } else {
            std::fs::write(path, s + "\n")
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
    }
    Ok(0)
}

pub fn report(args: &ReportArgs) -> CliResult {
    let rec = Recording::open(&args.dirs)?;
    let corr = crate::correlate::Correlation::new(&rec);
    let analysis = corr.run(
        &crate::correlate::RunOptions::default(),
        &mut crate::correlate::NoSink,
    );
    let ex = crate::export::json::build(&corr, &analysis, Model::from_recording(&rec).report());
    print!("{}", crate::export::text::render(&ex));
    Ok(0)
}
