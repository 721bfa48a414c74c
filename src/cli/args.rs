//! The command line's arguments (clap): one struct per verb.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "sigmatop",
    version,
    about = "Per-operation RDMA traffic of unmodified programs: live dashboard, recorder, exporter",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  sigmatop demo\n  sigmatop run -- ucx_perftest 127.0.0.1 -t tag_bw\n  sigmatop run --layers -cuda --json summary.json -- ./app\n  sigmatop --record out/ -- mpirun --mca pml ucx -np 4 ./app   (Open MPI: ob1, its default without an RDMA NIC, is not traced)\n  sigmatop attach\n  sigmatop export out/ --json agg.json --perfetto trace.pftrace"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Record the run headless into this directory (the card's `sigmatop --record out/ -- CMD`).
    #[command(flatten)]
    pub top: TopRun,
    /// How long a NCCL collective may stay open, or a QP's send work go without a completion,
    /// before it is reported as hung or stalled: 500ms, 4s, 1m (default 2s; SIGMATOP_HANG_AFTER
    /// sets it too).
    #[arg(long, value_name = "DURATION", global = true, value_parser = parse_hang_arg)]
    pub hang_after: Option<u64>,
}

/// `--hang-after DURATION` (and `SIGMATOP_HANG_AFTER`): a positive duration, in ns.
pub fn parse_hang_arg(s: &str) -> Result<u64, String> {
    crate::agg::warnings::parse_duration(s).ok_or_else(|| {
        format!("{s:?} is not a duration: give a positive time such as 500ms, 4s or 1m")
    })
}

impl Cli {
    /// Sets the hang threshold of this run from `--hang-after`, else `SIGMATOP_HANG_AFTER`, else
    /// the default; a bad variable is said in one line and the default kept.
    pub fn apply_hang_after(&self) -> Result<(), String> {
        let ns = match self.hang_after {
            Some(ns) => ns,
            None => match std::env::var("SIGMATOP_HANG_AFTER") {
                Ok(v) if !v.is_empty() => {
                    parse_hang_arg(&v).map_err(|e| format!("SIGMATOP_HANG_AFTER: {e}"))?
                }
                _ => return Ok(()),
            },
        };
        crate::agg::warnings::set_hang_ns(ns);
        Ok(())
    }
}

#[derive(Args, Debug, Default)]
pub struct TopRun {
    /// Write a full record directory here.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// aggregate | simple | full
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Layers to trace, as `run --layers` takes them.
    #[arg(long, value_name = "LAYERS", allow_hyphen_values = true, value_parser = parse_layers_arg)]
    pub layers: Option<String>,
    /// The program to run, after `--` (the card's spelling: always headless, with a summary).
    #[arg(last = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a program under the preload and watch it (dashboard on a terminal, summary otherwise).
    Run(RunArgs),
    /// Watch every traced process of this user on this host (or the given PIDs), or on other
    /// hosts over ssh (`sigmatop attach node[01-16]`).
    Attach(AttachArgs),
    /// Turn record directories into JSON aggregates (and Perfetto traces).
    Export(ExportArgs),
    /// Print matrices, top talkers and skew of record directories.
    Report(ReportArgs),
    /// Drive the dashboard from a recording.
    Replay(ReplayArgs),
    /// Replay the bundled recording of a real run (no RDMA hardware or GPU needed).
    Demo(DemoArgs),
    /// Serve this node's traced processes' counters on /metrics for Prometheus (long-running).
    Serve(ServeArgs),
    /// Stream this host's traced processes on stdout for `sigmatop attach HOST` (run by it over
    /// ssh; not meant for hands, so left out of the help). The relay protocol is in docs/WIRE.md.
    #[command(hide = true)]
    Relay(RelayArgs),
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// aggregate (counters), simple (+ one event per operation), full (+ progress and completions)
    #[arg(long, default_value = "simple")]
    pub mode: String,
    /// Also write a record directory.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Layers to trace: ucx,libfabric,ibverbs,mlx5,cuda (default all); `-cuda` traces all but
    /// one, `all` and `none` also work.
    #[arg(long, value_name = "LAYERS", allow_hyphen_values = true, value_parser = parse_layers_arg)]
    pub layers: Option<String>,
    /// Send one event in N to the live view.
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_sample_arg)]
    pub sample: Option<u32>,
    /// No dashboard: print a summary when the program ends.
    #[arg(long)]
    pub headless: bool,
    /// Write the summary as JSON to FILE (implies --headless). `--json` alone (or `--json -`)
    /// writes it to stdout, and the program's own stdout then goes to stderr, so stdout holds
    /// the JSON only.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<PathBuf>,
    /// Dashboard theme: dark (default), light, mono, or a theme .toml file; NO_COLOR=1 means mono.
    #[arg(long, value_name = "THEME")]
    pub theme: Option<String>,
    /// The program and its arguments: `sigmatop run ./app -x` or `sigmatop run -- ./app -x`
    /// (everything from the program on is the program's, as with `strace` or `time`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub cmd: Vec<String>,
}

/// `--sample N`: a positive count, with one line saying so otherwise (clap's own tip for a
/// negative number, "use '-- -1'", would run `-1` as the program).
pub fn parse_sample_arg(s: &str) -> Result<u32, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n >= 1 && n <= u32::MAX as i64 => Ok(n as u32),
        Ok(_) => Err(format!(
            "{s} is not a positive count: give N of 1 or more (one event in N is sent live; 1 sends every one)"
        )),
        Err(_) => Err(format!(
            "{s} is not a number: give a positive N, e.g. --sample 10"
        )),
    }
}

/// Checks a `--layers` value against the names the preload knows (its own grammar: names,
/// `all`, `none`, `-NAME` to remove one), so a typo is an error here, not a warning from every
/// traced process.
pub fn parse_layers_arg(s: &str) -> Result<String, String> {
    layers_mask(s).map(|_| s.to_string())
}

/// The layers a `--layers` value leaves on, as a `Layer::bit` mask (the preload's rules: a list
/// of only removals starts from all layers).
pub fn layers_mask(s: &str) -> Result<u32, String> {
    use crate::event::Layer;
    let all: u32 = Layer::ALL.iter().map(|l| l.bit()).sum();
    let valid = "valid layers: ucx, libfabric, ibverbs, mlx5, cuda (also all, none, and -NAME to leave one out: --layers -cuda)";
    let mut add = 0u32;
    let mut remove = 0u32;
    let mut only_removals = true;
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.iter().all(|p| p.is_empty()) {
        return Err(format!("no layer given; {valid}"));
    }
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        let (minus, name) = match part.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, part),
        };
        let bits = match name.to_ascii_lowercase().as_str() {
            "all" if !minus => all,
            "none" if !minus => 0,
            _ => Layer::parse(name)
                .map(|l| l.bit())
                .ok_or_else(|| format!("unknown layer '{name}'; {valid}"))?,
        };
        if minus {
            remove |= bits;
        } else {
            add |= bits;
            only_removals = false;
        }
    }
    let base = if only_removals { all } else { add };
    Ok(base & !remove)
}

#[derive(Args, Debug, Clone)]
pub struct AttachArgs {
    /// PIDs: only these processes of this host (a PID that does not exist is an error). HOSTs:
    /// ssh destinations as ssh takes them (`node7`, `user@node7`, `ssh://user@node7:2222`), in
    /// Slurm's hostlist syntax too (`node[01-16,20]`): every traced process of yours on each,
    /// through `ssh HOST sigmatop relay`. Default: every traced process of yours on this host.
    #[arg(value_name = "PID|HOST")]
    pub targets: Vec<String>,
    /// The sigmatop to run on remote hosts (default: `sigmatop` on their PATH).
    #[arg(long, value_name = "PATH", default_value = "sigmatop")]
    pub remote_cmd: String,
    /// An option for ssh, repeatable (`--ssh-opt=-p2222`, `--ssh-opt=-oProxyJump=gw`). Yours
    /// come first, so they win over sigmatop's defaults (BatchMode=yes, keep-alives).
    #[arg(long = "ssh-opt", value_name = "OPT", allow_hyphen_values = true)]
    pub ssh_opts: Vec<String>,
    /// Reach each host with this command instead of ssh: `{host}` is replaced by the host,
    /// `{cmd}` by the relay command (appended when absent). Run by `sh -c`. Example:
    /// `--via 'srun --overlap --jobid=1234 -w {host} -N1 -n1'`.
    #[arg(long, value_name = "TEMPLATE")]
    pub via: Option<String>,
    /// Every node of this Slurm job (`scontrol show hostnames`), reached with `srun --overlap`.
    #[arg(long, value_name = "JOBID")]
    pub slurm: Option<String>,
    /// Print merged snapshots as JSON instead of the dashboard.
    #[arg(long)]
    pub json: bool,
    /// Print one merged snapshot and exit.
    #[arg(long)]
    pub once: bool,
    /// How long to collect before printing (with --once), or between prints.
    #[arg(long, default_value = "1000", value_name = "MS")]
    pub interval_ms: u64,
    /// Where traced processes put their sockets (default $SIGMATOP_SOCKET_DIR, else
    /// $XDG_RUNTIME_DIR/sigmatop, else /tmp/sigmatop-$UID). Stale sockets of this user's
    /// processes that are gone are removed.
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<PathBuf>,
    /// Dashboard theme: dark (default), light, mono, or a theme .toml file; NO_COLOR=1 means mono.
    #[arg(long, value_name = "THEME")]
    pub theme: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// Record directories: what --record was given (DIR holding <host>/<pid>/), a host
    /// directory in it, or one process's directory; several (one per node) are read together.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Write JSON aggregates here ("-" for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a Perfetto trace here.
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// When the directory holds several runs recorded one after the other: which one (1 = the
    /// first). Runs are never merged.
    #[arg(long, value_name = "N")]
    pub run: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Record directories: what --record was given (DIR holding <host>/<pid>/), a host
    /// directory in it, or one process's directory; several (one per node) are read together.
    /// Several runs in them are reported apart.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// When the directory holds several runs recorded one after the other: which one (1 = the
    /// first). Runs are never merged.
    #[arg(long, value_name = "N")]
    pub run: Option<usize>,
    /// NCCL: list every call of every rank (as the user made it, its parts under it: sequence
    /// number, bytes, algorithm, protocol, channels, host and GPU times, work requests joined).
    #[arg(long)]
    pub calls: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// A record directory: what --record was given, a host directory in it, or one process's.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// When the directory holds several runs recorded one after the other: which one (1 = the
    /// first). Runs are never merged.
    #[arg(long, value_name = "N")]
    pub run: Option<usize>,
    /// Playback speed: 1 = as recorded, 10 = ten times faster, 0.5 = half; 0 = no playback: the
    /// dashboard opens on the end of the recording ([ ] step back through it). + and - change
    /// it while playing.
    #[arg(long, default_value = "1", value_name = "X", value_parser = parse_speed, allow_negative_numbers = true)]
    pub speed: f64,
    /// Dashboard theme: dark (default), light, mono, or a theme .toml file; NO_COLOR=1 means mono.
    #[arg(long, value_name = "THEME")]
    pub theme: Option<String>,
    /// Print the final summary instead of the dashboard.
    #[arg(long)]
    pub headless: bool,
}

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Which recording: `nccl` (default), an expert-parallel MoE dispatch/combine (torch
    /// all_to_all over NCCL 2.28, skewed routing: one hot node) with 4 ranks, each its own node,
    /// on an H200 over sigmatop's software mlx5 NIC; `collectives`, an NCCL-shaped MoE exchange
    /// on the CPU with its NCCL profiler events (AlltoAll and a group of sends and receives per
    /// step, one hot rank, one straggler; press c); `mpi`, a 4-rank Open MPI job over UCX with
    /// one hot rank; or `gpu`, NVIDIA's NVSHMEM shmem_put_bw with 2 PEs on an H200,
    /// GPU-initiated (IBGDA) over the software NIC (press d for its doorbells).
    #[arg(value_name = "WHICH", default_value = "nccl", value_parser = ["nccl", "collectives", "mpi", "gpu"])]
    pub which: String,
    /// Playback speed: 1 = as recorded, 10 = ten times faster, 0.5 = half (default 0.1: the
    /// recordings are seconds long); 0 = no playback: the dashboard opens on the end of the
    /// recording ([ ] step back through it).
    #[arg(long, value_name = "X", value_parser = parse_speed, allow_negative_numbers = true)]
    pub speed: Option<f64>,
    /// Play the recording once (by default it plays again, 4 s after its end, until q).
    #[arg(long)]
    pub once: bool,
    /// Dashboard theme: dark (default), light, mono, or a theme .toml file; NO_COLOR=1 means mono.
    #[arg(long, value_name = "THEME")]
    pub theme: Option<String>,
    /// Print the summary of the bundled recording instead of the dashboard.
    #[arg(long)]
    pub headless: bool,
}

/// A replay speed: a finite number ≥ 0 (0: the end at once).
pub fn parse_speed(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is no speed: give a number ≥ 0 (1 = as recorded, 10 = ten times faster, 0 = the end at once)"
        )),
    }
}

/// A one-line error for the user, with what to do.
pub type CliResult = Result<i32, String>;

#[derive(Args, Debug, Clone)]
pub struct RelayArgs {
    /// Where traced processes put their sockets (default as for attach).
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<PathBuf>,
    /// Send each process's counters of every QP every Nth snapshot only, and its totals every
    /// snapshot (1..=16; the dashboard sets it on the relay's stdin when it follows many QPs).
    #[arg(long, default_value = "1", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub qp_every: u32,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Where to listen (ADDR:PORT). Loopback by default; another address exposes the counters to
    /// other hosts (a warning says so).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR:PORT")]
    pub listen: String,
    /// Also one series per QP (sigmatop_qp_*_bytes_total with device, port, qpn).
    #[arg(long)]
    pub qp_metrics: bool,
    /// A series per process (a `pid` label): every job makes new series. By default series are
    /// per host, rank and program, and their counters go on across jobs (docs/METRICS.md).
    #[arg(long)]
    pub per_process: bool,
    /// Seconds a process's final counters stay after it exits (so the last scrape sees its tail).
    #[arg(long = "retention", default_value = "300", value_name = "SECONDS")]
    pub retention_s: u64,
    /// Where traced processes put their sockets.
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<std::path::PathBuf>,
}
