//! An NCCL-shaped ring all-reduce on the CPU (issue 36, item 4 and item 5's last test):
//! `tests/programs/nccl_ring.c`, R ranks, each its own simulated host of the software NIC
//! (`TESTNIC_HOST=rank+1`), real verbs posted the way NCCL 2.28's IB transport posts them (per
//! channel one RC QP pair per ring edge: the sender's RDMA writes with immediate, the receiver's
//! 64-byte FIFO credits back on the same pair) and NCCL's profiler-plugin calls in NCCL's order
//! (host: GroupApi, CollApi, Group, Coll; proxy thread: ProxyOp, ProxyStep and their states), the
//! plugin being sigmatop's preload, dlopened by path as NCCL does.
//! - Untraced, 3 and 4 ranks: every element of every call is the sum of the ranks' inputs
//!   ("check ok"), and the NIC log holds per rank exactly the writes the ring posts.
//! - Traced (`SIGMATOP_RECORD`): `export --json` gives per rank ITER AllReduce calls of SIZE
//!   bytes (count SIZE/4 float32), RING/SIMPLE, C channels, every verbs work request joined to
//!   them through the proxy steps, and their bytes are the NIC log's; `report` shows the table.
//! - Rank 1's sends to rank 2 held for good by the NIC after its K-th (mid-call): every rank stays
//!   alive and in the call — the plugin's own records, read through the tracker the preload runs,
//!   show the call open on all four — and `attach --json --once` shows the four ranks and the
//!   held QP's work outstanding. The hung collective's warning naming that edge and its wait
//!   state is the lead's (marked TODO below).
//!
//! Every wait is for a condition with a deadline; the guards end every rank.
mod common;
#[path = "common/testnic.rs"]
mod testnic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Bounded, PipeReader, Proc, Trace};
use sigmatop::nccl::format;
use sigmatop::nccl::live::Tracker;
use testnic::{build_nic, hex, nic_log, with_testnic};

const LIMIT: Duration = Duration::from_secs(30);

/// The program, built once per test binary.
fn program() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        common::build_program(
            "gcc",
            "nccl_ring.c",
            "nccl_ring",
            &["-Wall", "-Werror", "-libverbs", "-ldl"],
        )
    })
}

/// What a ring is asked to do.
#[derive(Clone, Copy, Debug)]
struct Shape {
    ranks: u64,
    channels: u64,
    size: u64,
    iters: u64,
}

impl Shape {
    /// Steps per proxy operation: reduce-scatter then all-gather, R-1 each.
    fn steps(&self) -> u64 {
        2 * (self.ranks - 1)
    }
    /// Bytes per step: each channel's share of SIZE, in R chunks.
    fn chunk(&self) -> u64 {
        self.size / (self.channels * self.ranks)
    }
    /// Data writes (RDMA_WRITE_WITH_IMM) one rank posts: one per send step.
    fn data_writes(&self) -> u64 {
        self.iters * self.channels * self.steps()
    }
}

/// One rank, running.
struct Rank {
    proc: Proc,
    out: PipeReader,
    err: PipeReader,
}

/// Starts the R ranks of `shape`, each `with-testnic.sh env TESTNIC_HOST=r+1 RANK=r ...`,
/// traced by `trace` (the preload, its record and socket, the plugin by path) when given, with
/// `more(r)` added to rank r's environment.
fn start(
    shape: Shape,
    dir: &Path,
    trace: Option<&Trace>,
    more: impl Fn(u64) -> Vec<String>,
) -> Vec<Rank> {
    start_with(shape, dir, trace, &[], more)
}

/// [`start`] with `args` added to each rank's command line (`-s MS`: sleep after each call).
fn start_with(
    shape: Shape,
    dir: &Path,
    trace: Option<&Trace>,
    args: &[&str],
    more: impl Fn(u64) -> Vec<String>,
) -> Vec<Rank> {
    let rdv = dir.join("rendezvous");
    std::fs::create_dir_all(&rdv).expect("rendezvous dir");
    let nic = dir.join("nic");
    std::fs::create_dir_all(&nic).expect("NIC log dir");
    (0..shape.ranks)
        .map(|r| {
            let mut a: Vec<String> = vec![
                "env".into(),
                format!("TESTNIC_HOST={}", r + 1),
                format!("TESTNIC_LOG={}", nic.display()),
                // As a launcher (torchrun) would: sigmatop labels the process r<RANK>.
                format!("RANK={r}"),
                format!("WORLD_SIZE={}", shape.ranks),
            ];
            if let Some(t) = trace {
                a.push(format!("LD_PRELOAD={}", common::preload().display()));
                a.push(format!("SIGMATOP_MODE={}", t.mode));
                a.push(format!("SIGMATOP_RECORD={}", t.record.display()));
                a.push(format!("SIGMATOP_SOCKET_DIR={}", t.socket_dir.display()));
                a.push(format!(
                    "NCCL_PROFILER_PLUGIN={}",
                    common::preload().display()
                ));
            }
            a.extend(more(r));
            a.push(program().display().to_string());
            for (k, v) in [
                ("-n", shape.ranks),
                ("-r", r),
                ("-c", shape.channels),
                ("-b", shape.size),
                ("-i", shape.iters),
                ("-t", LIMIT.as_secs()),
            ] {
                a.push(k.into());
                a.push(v.to_string());
            }
            a.push("-d".into());
            a.push(rdv.display().to_string());
            a.extend(args.iter().map(|s| s.to_string()));
            let mut p = common::spawn(&mut with_testnic(&a));
            let out = PipeReader::new(p.stdout.take().expect("stdout"));
            let err = PipeReader::new(p.stderr.take().expect("stderr"));
            Rank { proc: p, out, err }
        })
        .collect()
}

/// Waits for every rank to exit (within LIMIT), and returns each one's (exit status, stdout,
/// stderr); the ranks still running when the time is up are ended by their guards.
fn finish(ranks: Vec<Rank>, ctx: &str) -> Vec<(std::process::ExitStatus, String, String)> {
    let start = Instant::now();
    let mut out = Vec::new();
    for (r, mut k) in ranks.into_iter().enumerate() {
        let status = loop {
            if let Some(s) = k.proc.try_wait().expect("wait") {
                break s;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{ctx}: rank {r} still running after {LIMIT:?}:\n{}\n{}",
                k.out.text(),
                k.err.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        out.push((status, k.out.finish(), k.err.finish()));
    }
    out
}

/// The pids of the ranks as the NIC log knows them (the wrapper execs the program, so a rank's
/// pid is its guard's), rank by rank.
fn pids(ranks: &[Rank]) -> Vec<u32> {
    ranks.iter().map(|k| k.proc.id()).collect()
}

/// Every rank said "check ok" for the whole shape and exited 0.
fn assert_checked(shape: Shape, done: &[(std::process::ExitStatus, String, String)], ctx: &str) {
    for (r, (status, so, se)) in done.iter().enumerate() {
        let want = format!(
            "check ok: rank {r} of {}, {} channels, {} iterations of {} bytes",
            shape.ranks, shape.channels, shape.iters, shape.size
        );
        assert!(
            status.success() && so.contains(&want),
            "{ctx}: rank {r} ({status}): no {want:?}\nstdout:\n{so}\nstderr:\n{se}"
        );
        assert!(so.contains(&format!("iter {} ok", shape.iters - 1)), "{so}");
    }
}

/// Per pid, (op name, len) → WQEs, from the NIC's own log.
fn nic_counts(dir: &Path) -> BTreeMap<u32, BTreeMap<(String, u64), u64>> {
    let mut m: BTreeMap<u32, BTreeMap<(String, u64), u64>> = BTreeMap::new();
    for w in nic_log(&dir.join("nic")) {
        assert_eq!(w.status, 0, "the NIC refused a WQE: {w:?}");
        *m.entry(w.pid)
            .or_default()
            .entry((w.op.clone(), w.len))
            .or_default() += 1;
    }
    m
}

/// The NIC executed exactly the ring's writes for every rank: one data write with immediate of
/// a chunk per send step, one 64-byte FIFO write per receive step, nothing else.
fn assert_nic_log(shape: Shape, dir: &Path, pids: &[u32], ctx: &str) {
    let m = nic_counts(dir);
    for (r, pid) in pids.iter().enumerate() {
        let want: BTreeMap<(String, u64), u64> = [
            (
                ("RDMA_WRITE_IMM".to_string(), shape.chunk()),
                shape.data_writes(),
            ),
            (("RDMA_WRITE".to_string(), 64), shape.data_writes()),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            m.get(pid),
            Some(&want),
            "{ctx}: rank {r} (pid {pid}) in the NIC log"
        );
    }
}

#[test]
fn three_and_four_ranks_untraced_reduce_every_element_right() {
    build_nic();
    for ranks in [3, 4] {
        let shape = Shape {
            ranks,
            channels: 2,
            size: 49152,
            iters: 20,
        };
        let ctx = format!("{shape:?} untraced");
        let dir = common::scratch(&format!("nccl-ring-{ranks}"));
        let ring = start(shape, &dir, None, |_| vec![]);
        let pids = pids(&ring);
        let done = finish(ring, &ctx);
        assert_checked(shape, &done, &ctx);
        assert_nic_log(shape, &dir, &pids, &ctx);
    }
}

#[test]
fn traced_every_call_and_every_work_request_is_joined() {
    build_nic();
    let shape = Shape {
        ranks: 4,
        channels: 2,
        size: 49152,
        iters: 20,
    };
    let ctx = format!("{shape:?} traced");
    let dir = common::scratch("nccl-ring-traced");
    let trace = Trace::new("simple", &dir);
    let ring = start(shape, &dir, Some(&trace), |_| vec![]);
    let pids = pids(&ring);
    let done = finish(ring, &ctx);
    assert_checked(shape, &done, &ctx);
    for (_, so, _) in &done {
        assert!(so.contains("profiler sigmatop mask 2014"), "{so}");
    }
    assert_nic_log(shape, &dir, &pids, &ctx);

    let v = common::export_json(&trace.record, &ctx);
    let n = &v["nccl"];
    let rows = n["collectives"].as_array().expect("nccl.collectives");
    assert_eq!(
        rows.len() as u64,
        shape.ranks,
        "{ctx}: one row per rank: {n:#}"
    );
    // Per rank, per call and channel: a data write and a FIFO write per step (the NIC's), and a
    // receive per receive step.
    let wrs = shape.data_writes() * 3;
    let wr_bytes = shape.data_writes() * (shape.chunk() + 64);
    for (r, pid) in pids.iter().enumerate() {
        let row = rows
            .iter()
            .find(|c| c["pid"] == *pid)
            .unwrap_or_else(|| panic!("{ctx}: no row of rank {r} (pid {pid}): {n:#}"));
        let got = (
            row["func"].as_str(),
            row["algo"].as_str(),
            row["proto"].as_str(),
            row["channels"].as_u64(),
            row["count"].as_u64(),
            row["bytes"].as_u64(),
            row["rank"].as_u64(),
            row["nranks"].as_u64(),
            row["incomplete"].as_u64(),
        );
        assert_eq!(
            got,
            (
                Some("AllReduce"),
                Some("RING"),
                Some("SIMPLE"),
                Some(shape.channels),
                Some(shape.iters),
                Some(shape.iters * shape.size),
                Some(r as u64),
                Some(shape.ranks),
                Some(0)
            ),
            "{ctx}: rank {r}: {row:#}"
        );
        assert_eq!(
            (row["wrs"].as_u64(), row["wr_bytes"].as_u64()),
            (Some(wrs), Some(wr_bytes)),
            "{ctx}: rank {r}'s work requests joined to its calls: {row:#}"
        );
        assert!(row["time_ns"].as_u64() > Some(0), "{row:#}");
    }
    let j = &n["join"];
    let steps = shape.ranks * shape.data_writes() * 2;
    let want = [
        ("wrs", shape.ranks * wrs),
        ("wrs_via_step", shape.ranks * wrs),
        ("wrs_via_qp_event", 0),
        ("wrs_unjoined", 0),
        ("qp_events", 0),
        ("proxy_steps", steps),
        ("steps_without_wr", 0),
        ("dropped_records", 0),
        ("unknown_events", 0),
        ("profiler_version", 5),
    ];
    for (k, w) in want {
        assert_eq!(j[k].as_u64(), Some(w), "{ctx}: join.{k}: {j:#}");
    }
    let arr = n["arrivals"].as_array().expect("arrivals");
    assert_eq!(arr.len(), 1, "{ctx}: one communicator: {arr:#?}");
    assert_eq!(arr[0]["collectives"].as_u64(), Some(shape.iters));
    assert!(
        n["stalled"].as_array().is_none_or(|s| s.is_empty()),
        "{ctx}: {n:#}"
    );
    assert!(
        n["problems"].as_array().is_none_or(|p| p.is_empty()),
        "{ctx}: {n:#}"
    );

    // `report`: the table, one AllReduce row per rank with its calls.
    let out = Command::new(common::sigmatop_bin())
        .arg("report")
        .arg(&trace.record)
        .output_bounded()
        .expect("sigmatop report");
    let text = common::stdout_of(&out);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    assert!(text.contains("NCCL collectives"), "{ctx}: report:\n{text}");
    assert!(
        text.contains("NCCL events read through profiler interface v5"),
        "{ctx}: report:\n{text}"
    );
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("AllReduce") && l.contains("RING") && l.contains("SIMPLE"))
        .collect();
    assert_eq!(
        lines.len() as u64,
        shape.ranks,
        "{ctx}: one AllReduce row per rank in the report:\n{text}"
    );
}

/// The NIC's stall line `testnic: pid P stall: QP 0xQ holds WR W ...`: (pid, QPN, W).
fn stall_line(text: &str) -> (u32, u32, u64) {
    let line = text
        .lines()
        .find(|l| l.starts_with("testnic: pid ") && l.contains(" stall: QP 0x"))
        .unwrap_or_else(|| panic!("no NIC stall line in:\n{text}"));
    let word_after = |w: &str| {
        line.split(w)
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("no {w:?} in {line:?}"))
    };
    let pid = word_after("testnic: pid ").parse().expect("pid");
    let qpn = hex(word_after("QP ")) as u32;
    let wr = word_after("holds WR ").parse().expect("WR");
    (pid, qpn, wr)
}

/// `rank R ch C send qp 0xQ -> rank N qp 0xP ...` lines: channel → (own send QPN, peer's QPN).
fn send_qps(stdout: &str) -> BTreeMap<u64, (u32, u32)> {
    stdout
        .lines()
        .filter(|l| l.starts_with("rank ") && l.contains(" send qp "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // rank R ch C send qp 0xQ -> rank N qp 0xP recv qp ...
            let ch: u64 = w[3].parse().expect("channel");
            (ch, (hex(w[6]) as u32, hex(w[11]) as u32))
        })
        .collect()
}

/// The newest state of rank `pid`'s calls, from its plugin file in the record (written every
/// 20 ms) through the tracker the preload itself runs: (started, completed, oldest open seq).
fn calls_of(record: &Path, pid: u32) -> Option<(u64, u64, Option<u64>)> {
    let name = format!("nccl-{pid}.stn");
    let path = std::fs::read_dir(record)
        .ok()?
        .flatten()
        .map(|h| h.path().join(&name))
        .find(|p| p.is_file())?;
    // Read while the writer appends: a record cut short at the end is left for next time.
    let d = format::decode(&std::fs::read(path).ok()?);
    let mut t = Tracker::new();
    for r in &d.recs {
        t.push(r);
    }
    let l = t.live();
    let c = l.comms.first()?;
    Some((c.started, c.completed, c.oldest_open.map(|o| o.seq)))
}

/// Rank `pid`'s steps of call `seq` on `channel`, send or receive side, that have not stopped,
/// each with the last state NCCL's calls recorded for it (none: 0), from its plugin file.
fn open_steps(record: &Path, pid: u32, seq: u64, channel: u64, send: bool) -> Vec<(u64, u8)> {
    use format::{etype, kind};
    let name = format!("nccl-{pid}.stn");
    let Some(path) = std::fs::read_dir(record).ok().and_then(|d| {
        d.flatten()
            .map(|h| h.path().join(&name))
            .find(|p| p.is_file())
    }) else {
        return vec![];
    };
    let recs = format::decode(&std::fs::read(path).unwrap_or_default()).recs;
    let starts = |t: u8| {
        recs.iter()
            .filter(move |r| r.kind() == kind::START && r.etype() == t)
    };
    let Some(call) = starts(etype::COLL).find(|r| r.p(0) == seq).map(|r| r.id()) else {
        return vec![];
    };
    let Some(op) = starts(etype::PROXY_OP)
        .find(|r| r.parent() == call && r.p(1) == channel && (r.p(5) == 1) == send)
        .map(|r| r.id())
    else {
        return vec![];
    };
    starts(etype::PROXY_STEP)
        .filter(|r| r.parent() == op)
        .filter(|st| {
            !recs
                .iter()
                .any(|r| r.kind() == kind::STOP && r.id() == st.id())
        })
        .map(|st| {
            let last = recs
                .iter()
                .rfind(|r| r.kind() == kind::STATE && r.id() == st.id())
                .map_or(0, |r| r.state());
            (st.p(0), last)
        })
        .collect()
}

/// `sigmatop attach --json --once` over `sock` until `ok` holds of its JSON.
fn attach_until(
    sock: &Path,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < LIMIT {
        let mut c = Command::new(common::sigmatop_bin());
        c.args(["attach", "--json", "--once"])
            .env("SIGMATOP_SOCKET_DIR", sock)
            .env("SIGMATOP_HANG_AFTER", "1s")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let o = common::wait_timeout(common::spawn(&mut c), LIMIT);
        last = format!("{}\n{}", common::stdout_of(&o), common::stderr_of(&o));
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&common::stdout_of(&o))
            && ok(&v)
        {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("waited {LIMIT:?} for {what}; the last attach said:\n{last}");
}

#[test]
fn a_held_edge_keeps_every_rank_in_the_call() {
    build_nic();
    let shape = Shape {
        ranks: 4,
        channels: 2,
        size: 49152,
        iters: 1000,
    };
    // Rank 1's data writes to rank 2 (host 3) are the WQEs that count (TESTNIC_STALL_PEER: a
    // process-wide stall would also hold rank 1's FIFO credits to rank 0, and then rank 0 waits
    // for credit and rank 1 for data, with no data write to rank 2 necessarily held): C x 2(R-1)
    // = 12 per call. K = 2 x 12 + 4: calls #0 and #1 complete and #2 is under way everywhere.
    // Why 4: rank 0's last receive of a call needs rank 1's send step 3 (it travels 1 → 2 →
    // 3 → 0), so rank 0 would complete call #2 once steps 0..3 of both channels ran (8 writes):
    // at most 7 may; 4 also leaves 4 for the NIC taking one channel's call-#2 writes before the
    // other channel's last of call #1.
    let per_call = shape.channels * shape.steps();
    let (held_call, into) = (2u64, 4u64);
    let k = held_call * per_call + into;
    let ctx = format!("{shape:?}, rank 1 TESTNIC_STALL={k}:0 TESTNIC_STALL_PEER=3");
    let dir = common::scratch("nccl-ring-stall");
    let trace = Trace::new("simple", &dir);
    std::fs::create_dir_all(&trace.socket_dir).expect("socket dir");
    // The live socket's directory must be private (docs/WIRE.md).
    std::fs::set_permissions(
        &trace.socket_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let mut ring = start(shape, &dir, Some(&trace), |r| {
        if r == 1 {
            vec![
                format!("TESTNIC_STALL={k}:0"),
                "TESTNIC_STALL_PEER=3".into(),
            ]
        } else {
            vec![]
        }
    });
    let pids = pids(&ring);

    // The NIC holds rank 1's next write to rank 2: which QP, so which channel.
    let text = ring[1].err.wait_for(" stall: QP 0x", LIMIT);
    let (pid, qpn, wr) = stall_line(&text);
    assert_eq!((pid, wr), (pids[1], k + 1), "{ctx}: {text}");
    let qps = send_qps(&ring[1].out.wait_for("rank 1 ch 1 send qp", LIMIT));
    let (&channel, &(_, peer_qpn)) = qps
        .iter()
        .find(|(_, (q, _))| *q == qpn)
        .unwrap_or_else(|| panic!("{ctx}: QP 0x{qpn:x} is none of rank 1's send QPs {qps:?}"));

    // Every rank completed the calls before and is inside call #2, for good: its plugin records
    // say #2 started and open, #0 and #1 completed.
    for (r, rank) in ring.iter().enumerate() {
        rank.out
            .wait_for(&format!("iter {} ok", held_call - 1), LIMIT);
        let start = Instant::now();
        loop {
            let got = calls_of(&trace.record, pids[r]);
            if got == Some((held_call + 1, held_call, Some(held_call))) {
                break;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{ctx}: rank {r}: (started, completed, oldest open) = {got:?}, want ({}, {held_call}, Some({held_call}))",
                held_call + 1
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // What NCCL's calls say of that edge: rank 1's send step of the held write sits in SendWait
    // (posted, never completed), rank 2's receive of it in RecvWait (posted, credit sent).
    for (r, send, state) in [
        (1, true, format::state::SEND_WAIT),
        (2, false, format::state::RECV_WAIT),
    ] {
        let start = Instant::now();
        loop {
            let open = open_steps(&trace.record, pids[r], held_call, channel, send);
            if open.iter().any(|&(_, s)| s == state) {
                break;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{ctx}: rank {r} ch {channel} call #{held_call}: no open step in state {state}: {open:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // attach: the four ranks, alive, labelled by rank; rank 1's edge to rank 2 stalled past the
    // threshold (1 s), its held QP with its writes outstanding.
    let v = attach_until(
        &trace.socket_dir,
        "rank 1's edge stalled in attach's JSON",
        |v| {
            v["stalls"].as_array().is_some_and(|s| {
                s.iter().any(|s| {
                    s["pid"] == pid && s["peer"].as_str().is_some_and(|p| p.contains(" r2 pid "))
                })
            })
        },
    );
    let procs = v["processes"].as_array().expect("processes");
    for (r, p) in pids.iter().enumerate() {
        let e = procs
            .iter()
            .find(|x| x["pid"] == *p)
            .unwrap_or_else(|| panic!("{ctx}: rank {r} (pid {p}) not in attach: {v:#}"));
        assert_eq!(e["rank"].as_u64(), Some(r as u64), "{e:#}");
        assert!(
            e["exit_code"].is_null() && e["exit_signal"].is_null(),
            "{e:#}"
        );
    }
    let ep = procs
        .iter()
        .filter(|x| x["pid"] == pid)
        .flat_map(|x| x["endpoints"].as_array().into_iter().flatten())
        .find(|e| e["label"] == format!("qp 0x{qpn:x}").as_str())
        .unwrap_or_else(|| panic!("{ctx}: no qp 0x{qpn:x} of rank 1: {v:#}"));
    let q = &ep["queue"];
    let out = q["sq_outstanding"].as_u64().unwrap_or(0);
    assert!(
        (1..=8).contains(&out)
            && q["sq_posted"].as_u64() == q["sq_completed"].as_u64().map(|c| c + out),
        "{ctx}: the held QP's queue (at most NCCL_STEPS = 8 writes in flight): {q:#}"
    );
    assert_eq!(
        ep["peer"]["pid"].as_u64(),
        Some(pids[2] as u64),
        "{ctx}: the held QP's peer is rank 2 (its QP 0x{peer_qpn:x}): {ep:#}"
    );

    // The hung collective, every rank in it and reporting: located on the held edge, waiting on
    // the network with the held QP's writes outstanding (issue 36, item 4). It is the one stalled
    // edge: rank 1's credits to rank 0 flow, the idle FIFO QPs' unsignaled writes wait for
    // nothing.
    let v = attach_until(&trace.socket_dir, "the hung AllReduce located", |v| {
        v["nccl_hung"].as_array().is_some_and(|h| {
            h.iter().any(|h| {
                h["waiting_for"].as_array().is_some_and(|w| w.is_empty())
                    && !h["wheres"].as_array().is_none_or(|w| w.is_empty())
            })
        })
    });
    let hung = &v["nccl_hung"][0];
    let text = hung["text"].as_str().unwrap_or_default();
    // The first wait is one of rank 1's send channels to rank 2 (both are held), on the
    // network, on that channel's QP.
    let w = &hung["wheres"][0];
    let c = w["channel"].as_u64().unwrap_or(u64::MAX);
    let c_qpn = qps.get(&c).map(|q| q.0);
    assert_eq!(
        (
            &w["rank"],
            &w["send"],
            &w["peer"],
            &w["state"],
            w["qpn"].as_u64()
        ),
        (
            &1.into(),
            &true.into(),
            &2.into(),
            &"network".into(),
            c_qpn.map(u64::from)
        ),
        "{ctx}: rank 1's channel {c} send QP ({c_qpn:x?}) waits on the network: {hung:#}"
    );
    let want = format!("AllReduce #{held_call}: all 4 ranks in it ");
    let edge = format!(
        "; r1→r2 ch{c} waits on the network (QP 0x{:x}: ",
        c_qpn.unwrap_or_default()
    );
    assert!(
        text.starts_with(&want) && text.contains(&edge) && text.contains(" none completed "),
        "{ctx}: the hung collective: {hung:#}"
    );
    // Both of rank 1's channels to rank 2 are held (the stall names host 3): every wait on the
    // network is that edge's, none other.
    assert!(
        hung["wheres"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["state"] == "network")
            .all(|w| w["rank"] == 1 && w["peer"] == 2 && w["send"] == true),
        "{ctx}: only r1→r2 waits on the network: {hung:#}"
    );
    let stalls = v["stalls"].as_array().expect("stalls");
    assert_eq!(stalls.len(), 1, "{ctx}: one stalled edge: {stalls:#?}");
    assert!(
        stalls[0]["pid"] == pid
            && stalls[0]["peer"]
                .as_str()
                .is_some_and(|p| p.contains(&format!(" r2 pid {}", pids[2]))),
        "{ctx}: the stalled edge is r1 → r2: {stalls:#?}"
    );

    // No rank got past the held call; all four are still running (their guards end them).
    for (r, rank) in ring.iter().enumerate() {
        assert!(
            !rank.out.text().contains(&format!("iter {held_call} ok")),
            "{ctx}: rank {r} finished the held call:\n{}",
            rank.out.text()
        );
    }
    // All checked before any is ended: a killed rank's peers see their QPs' peer die.
    for (r, rank) in ring.iter_mut().enumerate() {
        assert!(
            rank.proc.try_wait().expect("wait").is_none(),
            "{ctx}: rank {r} exited:\n{}\n{}",
            rank.out.text(),
            rank.err.text()
        );
    }
    // Killed where they stand, the record (cut) still says where the call waited when it ended:
    // `export --json` locates it on the held edge, on the network.
    drop(ring);
    // At the threshold the live view used (1 s): the call was held at least that long.
    let out = Command::new(common::sigmatop_bin())
        .arg("export")
        .arg(&trace.record)
        .args(["--json", "-", "--hang-after", "1s"])
        .output_bounded()
        .expect("sigmatop export");
    assert!(
        out.status.success(),
        "{ctx}: export: {}",
        common::stderr_of(&out)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("export JSON");
    let hung = &v["nccl_hung"][0];
    let text = hung["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with(&format!("AllReduce #{held_call}: all 4 ranks in it "))
            && text.contains("; r1→r2 ch")
            && text.contains(" waits on the network (QP 0x"),
        "{ctx}: the record's hung call: {:#}",
        v["nccl_hung"]
    );
    // `report` says the same, under where the record ends waiting.
    let out = Command::new(common::sigmatop_bin())
        .arg("report")
        .arg(&trace.record)
        .args(["--hang-after", "1s"])
        .output_bounded()
        .expect("sigmatop report");
    let text = common::stdout_of(&out);
    let at = text
        .find("where it waits at the end of the record:")
        .unwrap_or_else(|| panic!("{ctx}: report:\n{text}"));
    assert!(
        text[at..].contains(&format!("AllReduce #{held_call}: all 4 ranks in it "))
            && text[at..].contains(" waits on the network (QP 0x"),
        "{ctx}: report:\n{text}"
    );
}

/// NCCL's receiver posts its FIFO credits unsignaled but for one in 256 (net_ib.cc
/// `ncclIbPostFifo`: signaled when the slot is the device index), so between calls every
/// receive-side QP keeps up to 255 executed work requests that no completion will ever report,
/// in a perfectly healthy job. They must not make a stalled edge.
#[test]
fn an_idle_healthy_ring_names_no_stalled_edge() {
    build_nic();
    let shape = Shape {
        ranks: 3,
        channels: 2,
        size: 49152,
        iters: 2,
    };
    let ctx = format!("{shape:?}, idle 20 s after each call");
    let dir = common::scratch("nccl-ring-idle");
    let trace = Trace::new("simple", &dir);
    std::fs::create_dir_all(&trace.socket_dir).expect("socket dir");
    std::fs::set_permissions(
        &trace.socket_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let ring = start_with(shape, &dir, Some(&trace), &["-s", "20000"], |_| vec![]);
    for k in &ring {
        k.out.wait_for("iter 0 ok", LIMIT);
    }
    // Idle past the threshold (1 s): every QP's last completion is older, and the receive-side
    // QPs hold unsignaled FIFO writes no completion will report (outstanding, awaited by none).
    let v = attach_until(&trace.socket_dir, "the QPs idle past 1.5 s", |v| {
        let qs: Vec<&serde_json::Value> = v["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["endpoints"].as_array().into_iter().flatten())
            .map(|e| &e["queue"])
            .filter(|q| q.is_object())
            .collect();
        qs.len() as u64 == shape.ranks * shape.channels * 2
            && qs
                .iter()
                .all(|q| q["last_completion_s"].as_f64().is_some_and(|s| s >= 1.5))
            && qs.iter().any(|q| {
                q["sq_outstanding"].as_u64().unwrap_or(0) > 0 && q["sq_signaled_outstanding"] == 0
            })
    });
    for k in &ring {
        assert!(!k.out.text().contains("iter 1 ok"), "{ctx}: not idle");
    }
    assert!(
        v["stalls"].as_array().is_none_or(|s| s.is_empty()),
        "{ctx}: a healthy ring between two calls: {:#}",
        v["stalls"]
    );
}

/// Aggregate mode (issue 38): the plugin asks NCCL for its host calls only (mask 6), counts them
/// and writes no per-event record: per rank the record's NCCL file holds its communicator, clocks,
/// one COUNTS record and the totals (under 1 KiB against ~700 bytes per proxy step in simple
/// mode), and `export --json` gives the ITER AllReduce of SIZE bytes each rank made.
#[test]
fn aggregate_mode_counts_the_calls_and_records_no_event() {
    build_nic();
    let shape = Shape {
        ranks: 3,
        channels: 2,
        size: 49152,
        iters: 20,
    };
    let ctx = format!("{shape:?} aggregate");
    let dir = common::scratch("nccl-ring-aggregate");
    let trace = Trace::new("aggregate", &dir);
    let ring = start(shape, &dir, Some(&trace), |_| vec![]);
    let pids = pids(&ring);
    let done = finish(ring, &ctx);
    assert_checked(shape, &done, &ctx);
    for (_, so, _) in &done {
        assert!(so.contains("profiler sigmatop mask 6"), "{so}");
    }
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&trace.record)
        .expect("record")
        .flatten()
        .flat_map(|h| std::fs::read_dir(h.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "stn"))
        .collect();
    assert_eq!(files.len() as u64, shape.ranks, "{files:?}");
    for f in &files {
        let len = std::fs::metadata(f).expect("stat").len();
        assert!(len < 1024, "{ctx}: {} is {len} bytes", f.display());
    }
    let v = common::export_json(&trace.record, &ctx);
    let rows = v["nccl"]["collectives"]
        .as_array()
        .expect("nccl.collectives");
    assert_eq!(rows.len() as u64, shape.ranks, "{ctx}: {rows:#?}");
    for pid in &pids {
        let row = rows
            .iter()
            .find(|c| c["pid"] == *pid)
            .unwrap_or_else(|| panic!("{ctx}: no row of pid {pid}: {rows:#?}"));
        assert_eq!(
            (
                row["func"].as_str(),
                row["count"].as_u64(),
                row["bytes"].as_u64()
            ),
            (
                Some("AllReduce"),
                Some(shape.iters),
                Some(shape.iters * shape.size)
            ),
            "{ctx}: {row:#}"
        );
    }
    assert_eq!(v["nccl"]["join"]["proxy_steps"].as_u64(), Some(0));
}
