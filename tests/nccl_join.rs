//! NCCL collectives joined to their verbs work requests, on the CPU, from a real run: the
//! committed fixture `fixtures/nccl/all_reduce_np2` is NVIDIA's `all_reduce_perf` (nccl-tests
//! 2.19.6, NCCL 2.28.9) with 2 ranks on the H200 over the software mlx5 NIC, GPU Direct RDMA,
//! traced in simple mode with sigmatop as NCCL's profiler plugin (`tests/gpu/nccl_device.sh OUT
//! diag`): the record (verbs events and NCCL profiler events of both ranks), the NIC's own WQE log
//! and the arguments nccl-tests was given. Exact: the collectives and their bytes are what the
//! arguments ask for, every verbs work request joins a collective, and the bytes of the work
//! requests joined to each rank's collectives are the NIC log's bytes of that rank.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sigmatop::nccl::model;
use sigmatop::trace::reader::Recording;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl/all_reduce_np2")
}

fn scaled(v: &str) -> u64 {
    let (n, s) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = n.parse().expect("number");
    n * match s {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        other => panic!("unit {other}"),
    }
}

/// nccl-tests' calls per rank for `all_reduce_perf ARGS` (common.cu 2.19.6: a warm-up of -w
/// calls per size doubling from -b to -e, then per size stepping by -f out-of-place and in-place
/// each 1 + n + c calls) and their bytes (float: the count is size / 4, bytes = size).
fn expected(args: &str) -> (u64, u64) {
    let t: Vec<&str> = args.split_whitespace().collect();
    let get = |k: &str| {
        t.iter()
            .position(|x| *x == k)
            .map(|i| scaled(t[i + 1]))
            .expect(k)
    };
    let (b, e, f, n, w, c) = (
        get("-b"),
        get("-e"),
        get("-f"),
        get("-n"),
        get("-w"),
        get("-c"),
    );
    let (mut calls, mut bytes) = (0, 0);
    let mut s = b;
    while s <= e {
        calls += w;
        bytes += w * s;
        s *= 2;
    }
    let mut s = b;
    while s <= e {
        calls += 2 * (1 + n + c);
        bytes += 2 * (1 + n + c) * s;
        s *= f;
    }
    (calls, bytes)
}

/// pid → bytes of every WQE the NIC executed for it.
fn nic_bytes(dir: &Path) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("nic dir").flatten() {
        let text = std::fs::read_to_string(e.path()).expect("nic log");
        for line in text.lines() {
            let field = |k: &str| {
                line.split_whitespace()
                    .find_map(|x| x.strip_prefix(k))
                    .unwrap_or_else(|| panic!("{k} in {line}"))
            };
            let pid: u32 = field("pid=").parse().expect("pid");
            let len: u64 = field("len=").parse().expect("len");
            *out.entry(pid).or_default() += len;
        }
    }
    out
}

#[test]
fn collectives_of_a_real_run_join_their_work_requests_exactly() {
    let dir = fixture();
    let args = std::fs::read_to_string(dir.join("args")).expect("args");
    let rec = Recording::open(&[dir.join("rec")]).expect("the fixture's record");
    assert_eq!(rec.processes.len(), 2, "two ranks");
    let report = model::load(&rec).expect("NCCL events in the fixture");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let (calls, bytes) = expected(args.trim());
    let nic = nic_bytes(&dir.join("nic"));
    let mut posts_total = 0;
    for p in &rec.processes {
        let pid = p.identity.pid;
        let rows: Vec<_> = report.collectives.iter().filter(|c| c.pid == pid).collect();
        assert_eq!(
            rows.len(),
            1,
            "pid {pid}: one row (AllReduce, one algorithm/protocol): {rows:?}"
        );
        let r = rows[0];
        assert_eq!(r.func, "AllReduce");
        assert_eq!(
            (r.count, r.bytes),
            (calls, bytes),
            "pid {pid}: collectives and bytes = {args}"
        );
        assert_eq!(r.nranks, 2);
        assert_eq!(r.incomplete, 0);
        assert!(r.time_ns > 0 && r.channels > 0, "{r:?}");
        let posts = model::posts_of(p);
        posts_total += posts.len() as u64;
        assert_eq!(
            r.wrs,
            posts.len() as u64,
            "pid {pid}: every work request joined"
        );
        assert_eq!(
            Some(&r.wr_bytes),
            nic.get(&pid),
            "pid {pid}: the joined work requests' bytes = the NIC log's"
        );
    }
    let j = &report.join;
    assert_eq!(j.wrs, posts_total);
    assert_eq!(j.wrs_unjoined, 0, "{j:?}");
    assert_eq!(j.wrs_via_qp_event + j.wrs_via_step, posts_total, "{j:?}");
    assert_eq!(j.dropped_records, 0);
    assert_eq!(
        j.steps_without_wr, 0,
        "every step that posted has its work requests"
    );
    // Both ranks took part in each collective: one arrival row for the communicator.
    assert_eq!(report.arrivals.len(), 1);
    assert_eq!(report.arrivals[0].collectives, calls);
}

#[test]
fn a_damaged_nccl_file_keeps_what_came_before_and_says_so() {
    let dir = fixture();
    let rec = Recording::open(&[dir.join("rec")]).expect("record");
    let p = &rec.processes[0];
    let path = p
        .dir
        .parent()
        .expect("host dir")
        .join(format!("nccl-{}.stn", p.identity.pid));
    let bytes = std::fs::read(&path).expect("nccl file");
    let whole = sigmatop::nccl::format::decode(&bytes);
    assert!(whole.problem.is_none());
    let cut = sigmatop::nccl::format::decode(&bytes[..bytes.len() - 7]);
    assert_eq!(cut.recs.len(), whole.recs.len() - 1);
    assert!(cut.problem.expect("a problem line").contains("cut short"));
    let bad = sigmatop::nccl::format::decode(b"not a file of ours at all");
    assert!(bad.recs.is_empty() && bad.problem.is_some());
}

#[test]
fn a_rank_that_stopped_recording_is_named_as_the_one_the_others_wait_for() {
    let dir = fixture();
    let rec = Recording::open(&[dir.join("rec")]).expect("record");
    let report = model::load(&rec).expect("NCCL events");
    assert!(report.stalled.is_empty(), "{:?}", report.stalled);
    // The real run's inputs, with rank 1's NCCL records cut after its 7th collective started,
    // as a rank killed there leaves them.
    let mut inputs = Vec::new();
    for p in &rec.processes {
        let path = p
            .dir
            .parent()
            .expect("host dir")
            .join(format!("nccl-{}.stn", p.identity.pid));
        let mut recs = sigmatop::nccl::format::decode(&std::fs::read(&path).expect("file")).recs;
        if p.identity.rank == Some(1) {
            use sigmatop::nccl::format::{etype, kind};
            let seventh = recs
                .iter()
                .enumerate()
                .filter(|(_, r)| r.kind() == kind::START && r.etype() == etype::COLL)
                .nth(6)
                .map(|(i, _)| i)
                .expect("7 collectives");
            recs.truncate(seventh + 1);
        }
        inputs.push(model::ProcessInput {
            host: p.identity.host.clone(),
            pid: p.identity.pid,
            recs,
            posts: model::posts_of(p),
            problem: None,
        });
    }
    let cut = model::build(&inputs);
    assert_eq!(cut.stalled.len(), 1, "{:?}", cut.stalled);
    let s = &cut.stalled[0];
    assert_eq!(s.func, "AllReduce");
    // Collective 7 (seq 6) started on both ranks; rank 1 never saw it end.
    assert_eq!(
        (s.seq, &s.started, &s.incomplete),
        (6, &vec![0, 1], &vec![1])
    );
    assert!(s.waiting_for.is_empty(), "{s:?}");
    assert!(model::render(&cut).contains("did not complete"));
}

/// The reverse of an unjoined work request: profiler steps that posted work sigmatop never saw.
/// Rank 1's verbs record left out (its posts gone, as with the verbs layer off): each of its
/// steps that said it posted is counted, rank 0's are all joined, and the report says so.
#[test]
fn steps_whose_work_requests_were_not_seen_are_counted() {
    use sigmatop::nccl::format::{etype, kind, state};
    let dir = fixture();
    let rec = Recording::open(&[dir.join("rec")]).expect("record");
    let mut inputs = Vec::new();
    let mut posted_steps_r1 = std::collections::HashSet::new();
    for p in &rec.processes {
        let path = p
            .dir
            .parent()
            .expect("host dir")
            .join(format!("nccl-{}.stn", p.identity.pid));
        let recs = sigmatop::nccl::format::decode(&std::fs::read(&path).expect("file")).recs;
        let r1 = p.identity.rank == Some(1);
        if r1 {
            for r in &recs {
                if r.kind() == kind::STATE
                    && r.etype() == etype::PROXY_STEP
                    && matches!(
                        r.state(),
                        state::SEND_WAIT | state::RECV_WAIT | state::RECV_FLUSH_WAIT
                    )
                {
                    posted_steps_r1.insert(r.id());
                }
            }
        }
        inputs.push(model::ProcessInput {
            host: p.identity.host.clone(),
            pid: p.identity.pid,
            recs,
            posts: if r1 { Vec::new() } else { model::posts_of(p) },
            problem: None,
        });
    }
    assert!(!posted_steps_r1.is_empty());
    let r = model::build(&inputs);
    assert_eq!(r.join.steps_without_wr, posted_steps_r1.len() as u64);
    assert_eq!(r.join.wrs_unjoined, 0);
    assert!(
        model::render(&r).contains(&format!(
            "{} that posted with no WR seen",
            posted_steps_r1.len()
        )),
        "{}",
        model::render(&r)
    );
}

/// nccl-tests' sizes in call order for `ARGS` (as `expected` counts them): the warm-up's sizes
/// doubling from -b to -e (-w calls each), then each size stepping by -f, 2 (1 + n + c) calls.
fn sizes_in_order(args: &str) -> Vec<u64> {
    let t: Vec<&str> = args.split_whitespace().collect();
    let get = |k: &str| {
        t.iter()
            .position(|x| *x == k)
            .map(|i| scaled(t[i + 1]))
            .expect(k)
    };
    let (b, e, f, n, w, c) = (
        get("-b"),
        get("-e"),
        get("-f"),
        get("-n"),
        get("-w"),
        get("-c"),
    );
    let mut v = Vec::new();
    let mut s = b;
    while s <= e {
        v.extend(std::iter::repeat_n(s, w as usize));
        s *= 2;
    }
    let mut s = b;
    while s <= e {
        v.extend(std::iter::repeat_n(s, (2 * (1 + n + c)) as usize));
        s *= f;
    }
    v
}

/// Per-call records (`export --json`'s `nccl.calls[]`, `report --calls`) and the rows by
/// message size: per rank the calls in the order nccl-tests made them, each of the size it
/// asked for, NCCL's sequence numbers 0.., every call completed with its work requests (their
/// sum the rank's NIC log bytes); by power-of-two bucket the counts the arguments give.
#[test]
fn every_call_is_recorded_with_its_size_and_work_requests() {
    let dir = fixture();
    let args = std::fs::read_to_string(dir.join("args")).expect("args");
    let sizes = sizes_in_order(args.trim());
    let rec = Recording::open(&[dir.join("rec")]).expect("the fixture's record");
    let report = model::load(&rec).expect("NCCL events");
    let nic = nic_bytes(&dir.join("nic"));
    assert_eq!(report.calls.len(), 2 * sizes.len());
    for p in &rec.processes {
        let pid = p.identity.pid;
        let calls: Vec<&model::CallRec> = report.calls.iter().filter(|c| c.pid == pid).collect();
        let got: Vec<u64> = calls.iter().map(|c| c.bytes).collect();
        assert_eq!(got, sizes, "pid {pid}: the calls' bytes in order = {args}");
        let seqs: Vec<u64> = calls.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (0..sizes.len() as u64).collect::<Vec<_>>());
        for c in &calls {
            assert_eq!(
                (c.func.as_str(), c.kind, c.dtype_size, c.count * 4),
                ("AllReduce", "collective", 4, c.bytes)
            );
            assert_eq!(c.size_bucket, c.bytes.next_power_of_two());
            assert!(
                c.end_ns.is_some() && c.time_ns.is_some() && c.wrs > 0,
                "{c:?}"
            );
            assert!(c.end_ns.unwrap_or(0) > c.host_call_ns);
            assert_eq!((c.algo, c.proto), (Some("RING"), Some("LL")));
        }
        assert_eq!(
            Some(calls.iter().map(|c| c.wr_bytes).sum::<u64>()),
            nic.get(&pid).copied(),
            "pid {pid}: per-call work request bytes sum to the NIC log's"
        );
        let mut want: BTreeMap<u64, u64> = BTreeMap::new();
        for s in &sizes {
            *want.entry(s.next_power_of_two()).or_default() += 1;
        }
        let got: BTreeMap<u64, u64> = report
            .by_size
            .iter()
            .filter(|z| z.pid == pid)
            .map(|z| (z.size_bucket, z.count))
            .collect();
        assert_eq!(got, want, "pid {pid}: calls per size bucket");
    }
    let text = model::render_calls(&report);
    assert_eq!(
        text.lines().filter(|l| l.contains("AllReduce")).count(),
        2 * sizes.len(),
        "{text}"
    );
    assert!(model::render(&report).contains("NCCL calls by message size"));
}
