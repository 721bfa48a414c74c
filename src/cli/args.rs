//! The command line's arguments (clap): one struct per verb.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "sigmatop",
    version,
    about = "Per-operation RDMA traffic of unmodified programs: live dashboard, recorder, exporter",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  sigmatop demo\n  sigmatop run -- ucx_perftest 127.0.0.1 -t tag_bw\n  sigmatop --record out/ -- mpirun -np 4 ./app\n  sigmatop attach\n  sigmatop export out/ --json agg.json"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Record the run headless into this directory (the card's `sigmatop --record out/ -- CMD`).
    #[command(flatten)]
    pub top: TopRun,
}

#[derive(Args, Debug, Default)]
pub struct TopRun {
    /// Write a full record directory here.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// aggregate | simple | full
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// The program to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a program under the preload and watch it (dashboard on a terminal, summary otherwise).
    Run(RunArgs),
    /// Watch every traced process of this user on this host (or the given PIDs).
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
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// aggregate (counters), simple (+ one event per operation), full (+ progress and completions)
    #[arg(long, default_value = "simple")]
    pub mode: String,
    /// Also write a record directory.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Layers to trace: ucx,libfabric,ibverbs,mlx5,cuda (default all).
    #[arg(long)]
    pub layers: Option<String>,
    /// Send one event in N to the live view.
    #[arg(long, value_name = "N")]
    pub sample: Option<u32>,
    /// No dashboard: print a summary when the program ends.
    #[arg(long)]
    pub headless: bool,
    /// Print the summary as JSON (implies --headless).
    #[arg(long)]
    pub json: bool,
    /// Dashboard theme (dark, light, mono or a .toml file).
    #[arg(long)]
    pub theme: Option<String>,
    /// The program to run.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct AttachArgs {
    /// Only these processes (default: every traced process of this user on this host).
    pub pids: Vec<u32>,
    /// Print merged snapshots as JSON instead of the dashboard.
    #[arg(long)]
    pub json: bool,
    /// Print one merged snapshot and exit.
    #[arg(long)]
    pub once: bool,
    /// How long to collect before printing (with --once), or between prints.
    #[arg(long, default_value = "1000", value_name = "MS")]
    pub interval_ms: u64,
    /// Where traced processes put their sockets.
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<PathBuf>,
    #[arg(long)]
    pub theme: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// Record directories (one per node is fine).
    #[arg(required = true)]
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
    /// Record directories (one per node is fine). Several runs in them are reported apart.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// When the directory holds several runs recorded one after the other: which one (1 = the
    /// first). Runs are never merged.
    #[arg(long, value_name = "N")]
    pub run: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// The record directory (given to --record).
    pub dir: PathBuf,
    /// When the directory holds several runs recorded one after the other: which one (1 = the
    /// first). Runs are never merged.
    #[arg(long, value_name = "N")]
    pub run: Option<usize>,

    /// Playback speed multiplier.
    #[arg(long, default_value = "1.0")]
    pub speed: f64,
    #[arg(long)]
    pub theme: Option<String>,
    /// Print the final summary instead of the dashboard.
    #[arg(long)]
    pub headless: bool,
}

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    #[arg(long, default_value = "1.0")]
    pub speed: f64,
    #[arg(long)]
    pub theme: Option<String>,
    /// Print the summary of the bundled recording instead of the dashboard.
    #[arg(long)]
    pub headless: bool,
}

/// A one-line error for the user, with what to do.
pub type CliResult = Result<i32, String>;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Where to listen (ADDR:PORT). Loopback by default; another address exposes the counters to
    /// other hosts (a warning says so).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR:PORT")]
    pub listen: String,
    /// Also one series per QP (sigmatop_qp_*_bytes_total with device, port, qpn).
    #[arg(long)]
    pub qp_metrics: bool,
    /// Seconds a process's final counters stay after it exits (so the last scrape sees its tail).
    #[arg(long = "retention", default_value = "300", value_name = "SECONDS")]
    pub retention_s: u64,
    /// Where traced processes put their sockets.
    #[arg(long, value_name = "DIR")]
    pub socket_dir: Option<std::path::PathBuf>,
}
