//! The ibverbs layer on the real rdma-core stack over soft-RoCE (rdma_rxe), in a software-emulated
//! guest (reference/workloads.md, Tier 2). One guest boot runs tests/guest/verbs_batch.sh: every
//! workload untraced and under the preload in aggregate, simple and full mode (ibv_rc_pingpong,
//! ib_read_bw, ib_send_lat, UCT put_bw over rc_verbs, ib_write_bw -R, rping, fi_pingpong -p verbs,
//! UCT am_lat over rc_verbs, UCX io_demo over rc_verbs), then tests/guest/fi_pingpong_close.sh.
//! The iterations and sizes of every workload are [`PARAMS`], which this test hands to the guest
//! script; every expected figure is computed from them (and from the programs' sources, rules
//! next to each check), never from what the programs print or from what sigmatop recorded. Here,
//! on the host, for each traced run:
//! - exit statuses and the shape of the output equal the untraced run's, and what the programs
//!   print agrees with what they were asked to do;
//! - the counts of every QP, SRQ, libfabric endpoint and UCX endpoint or worker, one by one (not
//!   summed), equal the operations the parameters imply: sends, and for receives the receives that
//!   completed with the bytes that arrived, the buffers posted counted apart;
//! - every QP that carried traffic is matched to its peer QP: its RTR peer (QPN, GID) names a QP of
//!   the other process whose peer is this QP, and the peer hash is one of that process's own
//!   addresses;
//! - full mode counts the completions the programs polled (exact where the program polls every
//!   completion it caused);
//! - in simple and full mode the events on disk, read by a decoder written here from
//!   docs/FORMAT.md (not sigmatop's reader), are one per operation posted; rping's blocking
//!   `ibv_get_cq_event` calls lie within the bounds its -C count implies, and the Perfetto export
//!   has one slice and one instant per event that decoder finds.
//!
//! When the guest cannot boot (no virtme-ng, QEMU or kernel image) the test fails naming what is
//! missing; with SIGMATOP_SKIP_GUEST=1 (refused under CI=true) it records a visible skip instead.

#[path = "../common/mod.rs"]
mod common;
#[path = "../export_util.rs"]
mod util;

mod checks;
mod ondisk;
mod printed;

use checks::*;
use printed::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use sigmatop::event::{Dir, EndpointKind, Op, flags};
use sigmatop::trace::reader::{ProcessRecording, Recording};

const MODES: [&str; 3] = ["aggregate", "simple", "full"];
const WORKLOADS: [&str; 9] = [
    "rc_pingpong",
    "read_bw",
    "send_lat",
    "put_bw",
    "write_bw",
    "rping",
    "fi_pingpong",
    "am_lat",
    "io_demo",
];

/// virtme-ng and a kernel to boot, or what is missing.
pub fn guest_tools() -> Result<(PathBuf, String), String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venv = root.join("target/vng-venv/bin");
    let vng = if venv.join("vng").is_file() {
        venv.join("vng")
    } else {
        std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(|d| Path::new(d).join("vng"))
            .find(|p| p.is_file())
            .ok_or("virtme-ng (`vng`) is not installed: scripts/test.sh installs virtme-ng==1.42 into target/vng-venv")?
    };
    if !Path::new("/usr/bin/qemu-system-x86_64").is_file() {
        return Err(
            "qemu-system-x86_64 is missing: apt-get install qemu-system-x86 (scripts/test.sh does)"
                .into(),
        );
    }
    let mut kernels: Vec<String> = std::fs::read_dir("/lib/modules")
        .map_err(|_| "no /lib/modules: apt-get install linux-image-amd64 (scripts/test.sh does)")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|k| k.ends_with("-amd64") && Path::new(&format!("/boot/vmlinuz-{k}")).is_file())
        .collect();
    kernels.sort();
    let k = kernels
        .pop()
        .ok_or("no /boot/vmlinuz-*-amd64 with modules: apt-get install linux-image-amd64 (scripts/test.sh does)")?;
    Ok((vng, k))
}

/// Boots the guest once and runs `script` with `args`; returns the guest's console output.
pub fn boot(vng: &Path, kernel: &str, out: &Path, script: &str, args: &[&str]) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/guest").join(script);
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let exec = format!("bash {} {}", script.display(), quoted.join(" "));
    let path = format!(
        "{}:{}",
        vng.parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    // `| cat`: vng loses the guest output when its stdout is a file (workloads.md). The batch
    // takes about 6 minutes on 2 idle cores; the limit leaves room for a machine shared with
    // other work (each program in the guest has its own limit too).
    let cmd = format!(
        "timeout 2400 '{}' --disable-kvm --run /boot/vmlinuz-{kernel} --cpus 2 -m 2G --rwdir='{}' --exec \"{exec}\" 2>&1 | cat",
        vng.display(),
        out.display()
    );
    let start = Instant::now();
    let o = Command::new("bash")
        .arg("-c")
        .arg(&cmd)
        .env("PATH", path)
        .output_within(Duration::from_secs(2460))
        .expect("run vng");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    eprintln!("guest ran {:?}", start.elapsed());
    text
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Output shape: hex numbers, timestamps and pointers become '#', then digits (common shape).
/// Lines that only report progress over time (ucx_perftest's periodic rows) are dropped.
fn shape(text: &str) -> Vec<String> {
    let mut cleaned = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        // ucx_perftest's "[thread 0] ..." rows are printed once per elapsed second: how many
        // appear depends on timing (in the emulated guest, on every run), not on sigmatop.
        if t.starts_with("[thread ") {
            continue;
        }
        if t.starts_with(|c: char| c.is_ascii_digit())
            && line.starts_with(' ')
            && !t.contains("bytes")
        {
            // ucx_perftest periodic progress rows: "   1234   ..." (time-driven, count varies)
            if t.split_whitespace().count() >= 8 && !line.contains(':') {
                continue;
            }
        }
        let mut out = String::new();
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'0' && i + 1 < b.len() && (b[i + 1] == b'x' || b[i + 1] == b'X') {
                i += 2;
                while i < b.len() && b[i].is_ascii_hexdigit() {
                    i += 1;
                }
                out.push('#');
            } else {
                out.push(b[i] as char);
                i += 1;
            }
        }
        cleaned.push_str(&out);
        cleaned.push('\n');
    }
    output_shape(&cleaned)
}

/// What each workload is asked to do: iterations (`_n`, `_c`, `_i`) and sizes (`_s`, `_d`, `_r`).
/// Handed to tests/guest/verbs_batch.sh as NAME=VALUE words (its variables of the same names);
/// every expected figure of this test is computed from them.
struct Params {
    /// ibv_rc_pingpong -n -s
    rc_n: u64,
    rc_s: u64,
    /// ib_read_bw -n -s
    rb_n: u64,
    rb_s: u64,
    /// ib_send_lat -n -s
    sl_n: u64,
    sl_s: u64,
    /// ucx_perftest -t put_bw -n -s
    pb_n: u64,
    pb_s: u64,
    /// ib_write_bw -R -n -s
    wb_n: u64,
    wb_s: u64,
    /// rping -C -S
    rp_c: u64,
    rp_s: u64,
    /// fi_pingpong -I -S
    fp_i: u64,
    fp_s: u64,
    /// ucx_perftest -t am_lat -n -s
    al_n: u64,
    al_s: u64,
    /// io_demo -o write -i -d -r
    io_i: u64,
    io_d: u64,
    io_r: u64,
    /// fi_pingpong_close.sh ITERS (its transfer size is [`FC_S`])
    fc_i: u64,
}

const P: Params = Params {
    rc_n: 100,
    rc_s: 4096,
    rb_n: 200,
    rb_s: 4096,
    sl_n: 200,
    sl_s: 2,
    pb_n: 1000,
    pb_s: 64,
    wb_n: 200,
    wb_s: 16384,
    rp_c: 5,
    rp_s: 64,
    fp_i: 100,
    fp_s: 4096,
    al_n: 200,
    al_s: 64,
    io_i: 20,
    io_d: 4096,
    io_r: 256,
    fc_i: 200,
};

/// fi_pingpong_close.sh's `-S` (fixed in the script).
const FC_S: u64 = 4096;

impl Params {
    /// The NAME=VALUE words verbs_batch.sh takes, in the order it writes them back to OUT/params.
    fn words(&self) -> String {
        format!(
            "RC_N={} RC_S={} RB_N={} RB_S={} SL_N={} SL_S={} PB_N={} PB_S={} WB_N={} WB_S={} \
             RP_C={} RP_S={} FP_I={} FP_S={} AL_N={} AL_S={} IO_I={} IO_D={} IO_R={} FC_I={}",
            self.rc_n,
            self.rc_s,
            self.rb_n,
            self.rb_s,
            self.sl_n,
            self.sl_s,
            self.pb_n,
            self.pb_s,
            self.wb_n,
            self.wb_s,
            self.rp_c,
            self.rp_s,
            self.fp_i,
            self.fp_s,
            self.al_n,
            self.al_s,
            self.io_i,
            self.io_d,
            self.io_r,
            self.fc_i
        )
    }
}

#[derive(Default, Debug, Clone)]
struct Run {
    client_rc: String,
    server_rc: String,
    client_out: String,
    server_out: String,
    dir: PathBuf,
}

fn load_dir(dir: PathBuf) -> Run {
    // A run the guest repeated once because its client lost perftest's own rdma_cm race
    // (tests/guest/verbs_batch.sh, `run`): listed with the suite's skips (a passing run shows
    // it); a traced first attempt that died of a signal fails the test, since nothing here can
    // tell perftest's crash from one sigmatop caused.
    let retried = read(&dir.join("retried"));
    if !retried.is_empty() {
        let rc: u32 = retried
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("rc "))
            .and_then(|r| r.trim().parse().ok())
            .unwrap_or(0);
        let traced = dir.file_name().is_some_and(|m| m != "none");
        assert!(
            !(traced && rc >= 128),
            "{}: the traced client died of signal {} before its retry:\n{retried}",
            dir.display(),
            rc.saturating_sub(128)
        );
        let why = retried
            .lines()
            .nth(1)
            .filter(|l| l.starts_with("the untraced server did not end"))
            .map_or_else(
                || {
                    format!(
                        "its client having lost perftest's rdma_cm race the first time (exit {rc})"
                    )
                },
                |l| format!("{l} the first time"),
            );
        common::note_retry(&format!("{}: run twice, {why}", dir.display()));
    }
    Run {
        client_rc: read(&dir.join("client.rc")).trim().to_string(),
        server_rc: read(&dir.join("server.rc")).trim().to_string(),
        client_out: read(&dir.join("client.out")),
        server_out: read(&dir.join("server.out")),
        dir,
    }
}

/// The counters of one (endpoint, op): operations accepted (for a receive: receives completed,
/// failed ones among them in `errors`), their bytes (for a receive: the bytes that arrived),
/// refusals, and receive buffers posted with their size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct C {
    ops: u64,
    bytes: u64,
    errors: u64,
    refused: u64,
    posted: u64,
    posted_bytes: u64,
}

/// `ops` operations carrying `bytes` (sends, RDMA, atomics).
fn done(ops: u64, bytes: u64) -> C {
    C {
        ops,
        bytes,
        ..C::default()
    }
}

/// A receive queue's figures: `ops` receives that completed with `bytes` in all; `posted`
/// buffers of `each` bytes.
fn recv(ops: u64, bytes: u64, posted: u64, each: u64) -> C {
    C {
        ops,
        bytes,
        posted,
        posted_bytes: posted * each,
        ..C::default()
    }
}

/// One endpoint's counters by op name.
type OpMap = BTreeMap<&'static str, C>;

fn om(ops: &[(Op, C)]) -> OpMap {
    ops.iter().map(|(o, c)| (o.name(), *c)).collect()
}

/// Ops that move payload (not completion polling, notification requests, waits or progress).
fn data_op(op: Op) -> bool {
    op.dir() != Dir::None && op != Op::VerbsOther
}

/// The data-op counters of every endpoint of `kind` of `p` that counted any, one entry per
/// endpoint, sorted: endpoint ids, QPNs and labels differ from run to run, what each endpoint
/// did does not.
fn eps(p: &ProcessRecording, kind: EndpointKind) -> Vec<OpMap> {
    let mut by_ep: BTreeMap<u32, OpMap> = BTreeMap::new();
    let Some(s) = p.last_snapshot() else {
        return Vec::new();
    };
    for c in &s.counts {
        let Some(def) = p.endpoints.iter().find(|e| e.id == c.ep) else {
            continue;
        };
        let Some(op) = Op::from_u8(c.op) else {
            continue;
        };
        if def.kind != kind || !data_op(op) {
            continue;
        }
        let e = by_ep.entry(c.ep).or_default().entry(op.name()).or_default();
        e.ops += c.ops;
        e.bytes += c.bytes;
        e.errors += c.errors;
        e.refused += c.refused;
        e.posted += c.posted;
        e.posted_bytes += c.posted_bytes;
    }
    let mut v: Vec<OpMap> = by_ep.into_values().collect();
    v.sort();
    v
}

fn qps(p: &ProcessRecording) -> Vec<OpMap> {
    eps(p, EndpointKind::VerbsQp)
}

/// The one SRQ of a UCX process (rc_verbs posts every receive through it): its SRQ_RECV
/// counters with the posted buffers checked and then cleared. UCX fills the SRQ to its
/// configured depth and refills it in batches, so how many buffers are posted is UCX's
/// configuration, not the workload's: there must be some, all of one size.
fn ucx_srq(ctx: &str, p: &ProcessRecording) -> C {
    let srqs = eps(p, EndpointKind::VerbsSrq);
    assert_eq!(srqs.len(), 1, "{ctx}: one SRQ: {srqs:?}");
    assert_eq!(
        srqs[0].keys().copied().collect::<Vec<_>>(),
        ["SRQ_RECV"],
        "{ctx}: {srqs:?}"
    );
    let mut c = srqs[0]["SRQ_RECV"];
    assert!(
        c.posted > 0 && c.posted_bytes.is_multiple_of(c.posted),
        "{ctx}: UCX posts its receive buffers, all of one size, through the SRQ: {c:?}"
    );
    c.posted = 0;
    c.posted_bytes = 0;
    c
}

/// Completions polled (full mode): sum of the poll_cq event `bytes` over all CQs.
fn completions(p: &ProcessRecording) -> u64 {
    let Some(s) = p.last_snapshot() else { return 0 };
    s.counts
        .iter()
        .filter(|c| c.op == Op::VerbsPollCq as u8)
        .map(|c| c.bytes)
        .sum()
}

/// The ops counted for `op` over every endpoint of `p` (control ops: get_cq_event, OTHER).
fn ops_of(p: &ProcessRecording, op: Op) -> u64 {
    p.last_snapshot()
        .map(|s| {
            s.counts
                .iter()
                .filter(|c| c.op == op as u8)
                .map(|c| c.ops)
                .sum()
        })
        .unwrap_or(0)
}

fn processes_of(dir: &Path) -> Vec<ProcessRecording> {
    let rec = Recording::open(&[dir.join("rec")])
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    assert!(
        rec.problems.is_empty(),
        "record problems: {:?}",
        rec.problems
    );
    let mut p = rec.processes;
    // The server is started first: the lower pid (tracing starts at first RDMA use, not at exec,
    // so start times do not order them).
    p.sort_by_key(|p| p.identity.pid);
    p
}

#[test]
fn soft_roce_guest_workloads() {
    let (vng, kernel) = match guest_tools() {
        Ok(t) => t,
        Err(what) if std::env::var("SIGMATOP_SKIP_GUEST").as_deref() == Ok("1") => {
            assert!(
                !ci(),
                "SIGMATOP_SKIP_GUEST=1 is a development shortcut, refused under CI=true; the soft-RoCE guest cannot boot: {what} (scripts/test.sh installs virtme-ng and the kernel)"
            );
            return skip(&format!(
                "the soft-RoCE guest cannot boot: {what} (SIGMATOP_SKIP_GUEST=1)"
            ));
        }
        Err(what) => {
            panic!("the soft-RoCE guest cannot boot: {what} (set SIGMATOP_SKIP_GUEST=1 to skip)")
        }
    };
    let pre = preload();
    // SIGMATOP_GUEST_REUSE=DIR re-checks the files of an earlier boot (a developer's shortcut
    // while changing the host-side checks; the preload is not re-run).
    if let Ok(dir) = std::env::var("SIGMATOP_GUEST_REUSE") {
        assert!(
            !ci(),
            "SIGMATOP_GUEST_REUSE is a development shortcut (it re-checks the files of an old boot without booting), refused under CI=true"
        );
        eprintln!("*** re-checking the guest files under {dir} without booting ***");
        return check_all(Path::new(&dir), String::new());
    }
    let out = scratch("verbs-guest");
    let modes = format!("none {}", MODES.join(" "));
    let mut workloads = WORKLOADS.to_vec();
    workloads.push("fi_close");
    let console = boot(
        &vng,
        &kernel,
        &out,
        "verbs_batch.sh",
        &[
            &out.display().to_string(),
            &pre.display().to_string(),
            &modes,
            &workloads.join(" "),
            &P.words(),
        ],
    );
    check_all(&out, console);
}

/// One traced run against its untraced twin `base`.
fn check_run(w: &str, mode: &str, base: &Run, run: &Run) {
    assert_eq!(
        run.client_rc,
        base.client_rc,
        "{w}/{mode}: client exit status; stderr: {}",
        read(&run.dir.join("client.err"))
    );
    assert_eq!(
        run.server_rc,
        base.server_rc,
        "{w}/{mode}: server exit status; stderr: {}",
        read(&run.dir.join("server.err"))
    );
    check_printed(w, run);
    if w != "io_demo" {
        // (io_demo prints timestamps, pids and rates on every line.)
        assert_eq!(
            shape(&run.client_out),
            shape(&base.client_out),
            "{w}/{mode}: client output shape"
        );
        assert_eq!(
            shape(&run.server_out),
            shape(&base.server_out),
            "{w}/{mode}: server output shape"
        );
    }
    let procs = processes_of(&run.dir);
    assert_eq!(procs.len(), 2, "{w}/{mode}: server and client recorded");
    let (srv, cli) = (&procs[0], &procs[1]);
    check_matched(&format!("{w}/{mode}"), srv, cli);
    check_matched(&format!("{w}/{mode}"), cli, srv);
    check_printed_qpns(w, run, srv, cli);
    check_counts(w, mode, srv, cli);
    check_one_sided(w, mode, run);
    check_blocking(w, mode, run);
    if mode != "full" {
        assert_eq!(
            completions(srv) + completions(cli),
            0,
            "{w}/{mode}: poll_cq only in full mode"
        );
    }
    if mode == "simple" || mode == "full" {
        check_events(&format!("{w}/{mode} server"), srv);
        check_events(&format!("{w}/{mode} client"), cli);
    }
}

/// A workload, its untraced run's directory, and its traced runs' directories by mode.
type Runs = (&'static str, PathBuf, Vec<(&'static str, PathBuf)>);

fn check_all(out: &Path, console: String) {
    assert!(
        read(&out.join("batch.log")).contains("BATCH_DONE"),
        "guest batch did not finish:\n{console}\n{}",
        read(&out.join("batch.log"))
    );
    assert_eq!(
        read(&out.join("params")).trim(),
        P.words(),
        "the guest script ran with other parameters than this test computes from"
    );
    assert!(
        read(&out.join("fi_close/close.log")).contains("CLOSE_DONE"),
        "fi_pingpong_close.sh did not finish:\n{}",
        read(&out.join("batch.log"))
    );
    let mut runs: Vec<Runs> = WORKLOADS
        .iter()
        .map(|w| {
            (
                *w,
                out.join(w).join("none"),
                MODES.iter().map(|m| (*m, out.join(w).join(m))).collect(),
            )
        })
        .collect();
    // fi_pingpong_close.sh: untraced, then simple mode with every layer.
    let close = out.join("fi_close");
    runs.push((
        "fi_close",
        close.join("none"),
        vec![("simple", close.join("simple"))],
    ));
    let mut failures = Vec::new();
    for (w, base_dir, traced) in runs {
        let base = load_dir(base_dir);
        if base.client_rc != "0" {
            failures.push(format!(
                "{w}: untraced client failed ({}): {}",
                base.client_rc,
                read(&base.dir.join("client.err"))
            ));
            continue;
        }
        if let Err(e) = std::panic::catch_unwind(|| check_printed(w, &base)) {
            failures.push(panic_text(e));
        }
        for (mode, dir) in traced {
            let run = load_dir(dir);
            if let Err(e) = std::panic::catch_unwind(|| check_run(w, mode, &base, &run)) {
                failures.push(panic_text(e));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "guest failures ({} of them; guest files under {}):\n{}",
        failures.len(),
        out.display(),
        failures.join("\n---\n")
    );
}

fn panic_text(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}
