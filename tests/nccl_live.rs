//! NCCL collectives, live, on the CPU from a real run: the committed fixture
//! `fixtures/nccl/all_reduce_np2` (a 2-rank `all_reduce_perf -b 4K -e 32K -f 8 -n 2 -w 1 -c 1`
//! on the H200, see tests/nccl_join.rs) replayed record by record through the tracker the preload
//! runs (`nccl::live::Tracker`) gives what the record's own analysis (`nccl::model`) gives: the
//! same collectives, bytes and times. The frames it makes, fed to the model as the live socket
//! would, give the Collectives view's rows and arrivals; a rank cut before a collective the
//! other started, and silent, is named by the hung-collective warning, which clears once the
//! records go on.
use std::path::{Path, PathBuf};

use sigmatop::agg::nccl::{self as anccl, HungWatch};
use sigmatop::agg::{Model, ProcKey};
use sigmatop::event::{Identity, Snapshot};
use sigmatop::nccl::format::{self, Rec, etype, kind};
use sigmatop::nccl::live::{NcclLive, Tracker};
use sigmatop::nccl::model;
use sigmatop::trace::reader::Recording;
use sigmatop::wire::{self, Frame};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl/all_reduce_np2")
}

/// (host, pid, records) of each rank's NCCL file, in file order.
fn files() -> Vec<(String, u32, Vec<Rec>)> {
    let mut out = Vec::new();
    for host in ["softhost0", "softhost1"] {
        let dir = fixture().join("rec").join(host);
        for e in std::fs::read_dir(&dir).expect("host dir").flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("nccl-")
                .and_then(|n| n.strip_suffix(".stn"))
            else {
                continue;
            };
            let d = format::decode(&std::fs::read(e.path()).expect("nccl file"));
            assert!(d.problem.is_none(), "{:?}", d.problem);
            out.push((host.to_string(), pid.parse().expect("pid"), d.recs));
        }
    }
    assert_eq!(out.len(), 2);
    out
}

fn track(recs: &[Rec]) -> NcclLive {
    let mut t = Tracker::new();
    for r in recs {
        t.push(r);
    }
    t.live()
}

#[test]
fn the_tracker_gives_what_the_record_analysis_gives() {
    let rec = Recording::open(&[fixture().join("rec")]).expect("fixture opens");
    let m = model::load(&rec).expect("NCCL files");
    let files = files();
    let mut comm_ids = Vec::new();
    let mut unknown = 0;
    for (host, pid, recs) in &files {
        let live = track(recs);
        // Nothing unmatched; the plugin's own counts are its file's last record's.
        assert_eq!((live.untracked, live.dropped_records), (0, 0));
        unknown += live.unknown_events;
        assert_eq!(live.comms.len(), 1, "{host}");
        let c = &live.comms[0];
        comm_ids.push(c.comm_id);
        let want: Vec<&model::CollRow> = m
            .collectives
            .iter()
            .filter(|r| r.host == *host && r.pid == *pid)
            .collect();
        assert_eq!(c.rows.len(), want.len(), "{host}: {:?}", c.rows);
        for (got, want) in c.rows.iter().zip(&want) {
            assert_eq!(format::name(format::FUNCS, got.func), want.func);
            assert_eq!(format::name(format::ALGOS, got.algo), want.algo);
            assert_eq!(format::name(format::PROTOS, got.proto), want.proto);
            assert_eq!(
                (got.count, got.bytes, got.channels as u32, got.open),
                (want.count, want.bytes, want.channels, 0),
                "{host}"
            );
            // The same time, up to rounding: the model converts each call's two ends to ns,
            // the tracker the sum of their ticks (a few ns per call).
            assert!(
                got.time_ns.abs_diff(want.time_ns) <= got.count * 100,
                "{host}: {} ns and {} ns",
                got.time_ns,
                want.time_ns
            );
            assert!(got.time_ns > 0);
        }
        // 20 AllReduce per rank (tests/nccl_join.rs derives it from the arguments).
        assert_eq!((c.started, c.completed), (20, 20));
        assert_eq!((c.nranks, c.oldest_open), (2, None));
        assert_eq!(c.recent.len(), 20);
        assert_eq!(c.last_completed, c.last_started.map(|a| a.seq));
    }
    assert_eq!(comm_ids[0], comm_ids[1], "one communicator, the same id");
    assert_eq!(unknown, m.join.unknown_events);
}

/// A process's frames as the live socket sends them, into the model.
fn feed(model: &mut Model, host: &str, pid: u32, snapshot_ns: Option<u64>, live: NcclLive) {
    let key = ProcKey {
        host: host.into(),
        pid,
        start_ns: 0,
    };
    // Through the wire encoding and decoder, as a reader gets them.
    let mut bytes = Vec::new();
    let mut frames = vec![Frame::hello(Identity {
        host: host.into(),
        pid,
        ..Default::default()
    })];
    if let Some(at_ns) = snapshot_ns {
        frames.push(Frame::Snapshot(Snapshot {
            at_ns,
            ..Default::default()
        }));
    }
    frames.push(Frame::Nccl(live));
    for f in &frames {
        wire::encode(f, &mut bytes).expect("encodes");
    }
    let mut d = wire::Decoder::new();
    d.push(&bytes);
    let mut n = 0;
    while let Some(f) = d.next_frame().expect("decodes") {
        assert_eq!(f, frames[n]);
        model.apply(&key, f);
        n += 1;
    }
    assert_eq!(n, frames.len());
}

#[test]
fn live_frames_give_the_rows_and_arrivals_and_a_cut_rank_is_named() {
    let files = files();
    // The whole run: rows and arrivals of both ranks, nothing hung.
    let mut m = Model::new();
    let mut end = 0;
    for (host, pid, recs) in &files {
        let live = track(recs);
        end = end.max(live.at_ns);
        feed(&mut m, host, *pid, Some(live.at_ns), live);
    }
    let v = anccl::collectives(&m, end + 1_000_000, anccl::HANG_NS);
    assert_eq!(v.comms.len(), 1);
    let c = &v.comms[0];
    assert_eq!((c.nranks, c.ranks.len(), c.rows.len()), (2, 2, 1));
    let r = &c.rows[0];
    assert_eq!((r.func.as_str(), r.count, r.open), ("AllReduce", 20, 0));
    // 20 AllReduce (tests/nccl_join.rs): a warm-up call of 4, 8, 16 and 32 KiB, then 8 calls
    // (out of place and in place, 1 + 2 + 1 each) of 4 and of 32 KiB.
    assert_eq!(r.bytes, 4096 + 8192 + 16384 + 32768 + 8 * 4096 + 8 * 32768);
    assert!(r.busbw_gbs > 0.0);
    assert_eq!(c.arrivals, 20, "every collective compared");
    assert!(c.max_spread_ns >= c.median_spread_ns);
    assert_eq!(
        c.ranks.iter().map(|r| r.last_arrivals).sum::<u64>(),
        20,
        "one rank last at each"
    );
    assert!(v.hung.is_empty());

    // Rank 1 cut right before the start of the 12th collective; rank 0 cut right after it
    // started it (its proxy operations open): rank 0 waits, rank 1 went silent.
    let coll_starts = |recs: &[Rec]| -> Vec<usize> {
        recs.iter()
            .enumerate()
            .filter(|(_, r)| r.kind() == kind::START && r.etype() == etype::COLL)
            .map(|(i, _)| i)
            .collect()
    };
    let (h0, p0, r0) = &files[0];
    let (h1, p1, r1) = &files[1];
    let s0 = coll_starts(r0);
    let s1 = coll_starts(r1);
    let cut0 = &r0[..s0[11] + 1];
    let cut1 = &r1[..s1[11]];
    let l0 = track(cut0);
    let l1 = track(cut1);
    let open = l0.comms[0].oldest_open.expect("rank 0 has one open");
    let seq = open.seq;
    assert_eq!(l1.comms[0].last_started.map(|a| a.seq < seq), Some(true));
    let t = open.start_ns + 2_500_000_000;
    let mut m = Model::new();
    let silent_since = l1.at_ns;
    feed(&mut m, h0, *p0, Some(t - 100_000_000), l0);
    feed(&mut m, h1, *p1, Some(silent_since), l1);
    let v = anccl::collectives(&m, t, anccl::HANG_NS);
    assert_eq!(v.hung.len(), 1, "{:?}", v.hung);
    let h = &v.hung[0];
    assert_eq!((h.func.as_str(), h.seq, h.nranks), ("AllReduce", seq, 2));
    assert_eq!(
        (h.waiting_for.clone(), h.silent.clone()),
        (vec![1], vec![1])
    );
    assert_eq!(h.open_ns, 2_500_000_000);
    // Before the threshold: nothing.
    assert!(
        anccl::collectives(&m, open.start_ns + 1_900_000_000, anccl::HANG_NS)
            .hung
            .is_empty()
    );
    // The warning, as the dashboard and `run --headless` say it.
    let mut watch = HungWatch::default();
    let lines = watch.check(&m, t, anccl::HANG_NS);
    let comm = format!("{:08x}", h.comm_id >> 32);
    assert_eq!(
        lines,
        vec![format!(
            "⚠ AllReduce #{seq} waits for r1 (silent) 2.5s · comm {comm}"
        )]
    );
    assert!(watch.check(&m, t + 250_000_000, anccl::HANG_NS).is_empty());
    let at = sigmatop::agg::ModelAt::new(
        &m,
        &sigmatop::agg::AtOptions {
            now_ns: Some(t),
            ..Default::default()
        },
    );
    let w = sigmatop::agg::warnings::warnings(&at, &Default::default());
    assert_eq!(
        w.first().map(|w| (w.kind, w.subject.as_str())),
        Some((
            sigmatop::agg::warnings::WarningKind::HungCollective,
            lines[0].trim_start_matches("⚠ ")
        ))
    );
    // Rank 1 goes on: the collective completes everywhere, the warning clears.
    let full0 = track(r0);
    let full1 = track(r1);
    let t2 = full0.at_ns.max(full1.at_ns) + 1_000_000;
    feed(&mut m, h0, *p0, Some(t2), full0);
    feed(&mut m, h1, *p1, Some(t2), full1);
    let lines = watch.check(&m, t2, anccl::HANG_NS);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!("✓ AllReduce #{seq} · comm {comm}: no longer hung")),
        "{lines:?}"
    );
}

/// `serve`'s NCCL series, read back from the OpenMetrics text: per rank the collectives, their
/// bytes and seconds of the fixture's frames (base units), none open, nothing lost.
#[test]
fn serve_counts_collectives_per_communicator() {
    let mut m = Model::new();
    let mut want = Vec::new();
    for (host, pid, recs) in files() {
        let live = track(&recs);
        want.push((host.clone(), live.comms[0].clone()));
        feed(&mut m, &host, pid, Some(live.at_ns), live);
    }
    // Per communicator: `serve --per-process` (by default a communicator's id is no label).
    let text = sigmatop::export::openmetrics::encode_model(
        &m,
        sigmatop::export::openmetrics::MetricsOptions {
            per_process: true,
            ..Default::default()
        },
    )
    .expect("text");
    let value = |name: &str, host: &str| -> f64 {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(name) && l.contains(&format!("host=\"{host}\"")))
            .collect();
        assert_eq!(lines.len(), 1, "{name} {host}:\n{text}");
        lines[0]
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    for (host, c) in &want {
        let r = &c.rows[0];
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("sigmatop_nccl_collectives_total{") && l.contains(host.as_str())
            })
            .expect("a collectives series");
        for label in [
            format!("comm=\"{:016x}\"", c.comm_id),
            "collective=\"AllReduce\"".into(),
            format!("rank=\"{}\"", c.rank),
            "nranks=\"2\"".into(),
        ] {
            assert!(line.contains(&label), "{label} in {line}");
        }
        assert_eq!(value("sigmatop_nccl_collectives_total", host), 20.0);
        assert_eq!(
            value("sigmatop_nccl_collective_bytes_total", host),
            r.bytes as f64
        );
        let s = value("sigmatop_nccl_collective_seconds_total", host);
        assert!((s - r.time_ns as f64 / 1e9).abs() < 1e-9, "{s}");
        assert_eq!(value("sigmatop_nccl_collectives_open", host), 0.0);
    }
    assert!(text.contains("sigmatop_nccl_events_lost_total{"), "{text}");
}

/// Every rank started the collective and reports, and nothing completes: the warning names the
/// ranks where it is open; `run --headless` says it once it held over two checks (a rank that
/// just resumed reports before its tracker read its progress: the H200 stall run's transient).
#[test]
fn a_collective_open_everywhere_is_said_after_two_checks() {
    let files = files();
    let mut m = Model::new();
    let mut since = 0;
    for (host, pid, recs) in &files {
        let starts: Vec<usize> = recs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.kind() == kind::START && r.etype() == etype::COLL)
            .map(|(i, _)| i)
            .collect();
        let live = track(&recs[..starts[11] + 1]);
        let c = &live.comms[0];
        let a = c.oldest_open.expect("open");
        since = since.max(a.start_ns.max(c.last_completed_ns));
        let at = live.at_ns + 3_000_000_000;
        feed(&mut m, host, *pid, Some(at), live);
    }
    let t = since + 2_600_000_000;
    let v = anccl::collectives(&m, t, anccl::HANG_NS);
    assert_eq!(v.hung.len(), 1);
    let h = &v.hung[0];
    assert!(h.waiting_for.is_empty(), "{h:?}");
    assert_eq!(h.incomplete, vec![0, 1]);
    let mut watch = HungWatch::default();
    assert!(watch.check(&m, t, anccl::HANG_NS).is_empty(), "not at once");
    let lines = watch.check(&m, t + 250_000_000, anccl::HANG_NS);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&format!("#{} not completed on r0, r1", h.seq)),
        "{lines:?}"
    );
}

/// The symmetric hang (issue 36, item 4): every rank of a 3-rank ring is in AllReduce #5 and
/// reports, nothing completes. From the proxy-step states each rank sends (`Frame::NcclWaits`)
/// and the queue of the QP rank 1's channel-1 send went to (`Frame::Queues`: 3 WRs outstanding,
/// none completed for 4 s), the warning names that edge and that it waits on the network, not
/// the ranks that wait for its data or credit.
#[test]
fn a_hang_every_rank_is_in_is_located_on_the_edge_that_waits_on_the_network() {
    use sigmatop::event::{EndpointDef, EndpointKind, Layer};
    use sigmatop::nccl::format::state;
    use sigmatop::nccl::live::{CollAt, CommLive, CommWaits, NcclWaits, OpWait, OpenCall};
    use sigmatop::queue::{QueueState, Queues};
    const S: u64 = 1_000_000_000;
    let t0 = 1_800_000_000 * S;
    let t = t0 + 5 * S;
    let comm = 0x7f3a_1b2c_0000_0001u64;
    let op = |channel: u8, send: bool, peer: u32, st: u8, ep: u32| OpWait {
        channel,
        peer,
        send,
        state: st,
        since_ns: t0 + S,
        ep,
        steps_done: 3,
        steps: 8,
    };
    // Rank r sends to r+1 and receives from r-1 on channels 0 and 1.
    let waits = [
        vec![
            op(0, true, 1, state::SEND_PEER_WAIT, 0),
            op(0, false, 2, state::RECV_WAIT, 0),
            op(1, true, 1, state::SEND_PEER_WAIT, 0),
            op(1, false, 2, state::RECV_WAIT, 0),
        ],
        vec![
            op(0, true, 2, state::SEND_WAIT, 4),
            op(0, false, 0, state::RECV_WAIT, 0),
            op(1, true, 2, state::SEND_WAIT, 3),
            op(1, false, 0, state::RECV_WAIT, 0),
        ],
        vec![
            op(0, true, 0, state::SEND_PEER_WAIT, 0),
            op(0, false, 1, state::RECV_WAIT, 0),
            op(1, true, 0, state::SEND_PEER_WAIT, 0),
            op(1, false, 1, state::RECV_WAIT, 0),
        ],
    ];
    let mut m = Model::new();
    for (rank, w) in waits.into_iter().enumerate() {
        let rank = rank as u32;
        let pid = 100 + rank;
        let key = ProcKey {
            host: format!("node{rank}"),
            pid,
            start_ns: 0,
        };
        let open = CollAt {
            seq: 5,
            func: 1,
            start_ns: t0,
        };
        let mut frames = vec![
            Frame::hello(Identity {
                host: key.host.clone(),
                pid,
                rank: Some(rank),
                ..Default::default()
            }),
            Frame::Snapshot(Snapshot {
                at_ns: t - S / 10,
                ..Default::default()
            }),
            Frame::Nccl(NcclLive {
                at_ns: t - S / 10,
                comms: vec![CommLive {
                    comm_id: comm,
                    nranks: 3,
                    rank,
                    started: 5,
                    completed: 4,
                    last_started: Some(open),
                    last_completed: Some(4),
                    oldest_open: Some(open),
                    last_completed_ns: t0 - S / 1000,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            Frame::NcclWaits(NcclWaits {
                at_ns: t - S / 10,
                comms: vec![CommWaits {
                    comm_id: comm,
                    rank,
                    call: Some(OpenCall {
                        p2p: false,
                        func: 1,
                        seq: 5,
                        peer: 0,
                        start_ns: t0,
                    }),
                    waits: w,
                    ..Default::default()
                }],
            }),
        ];
        if rank == 1 {
            // Its two send QPs: channel 0's moved on (nothing outstanding), channel 1's did not.
            frames.push(Frame::Endpoints(
                [(3, 0x2a1), (4, 0x2a2)]
                    .iter()
                    .map(|&(id, qpn)| EndpointDef {
                        id,
                        layer: Layer::Ibverbs,
                        kind: EndpointKind::VerbsQp,
                        label: format!("qp 0x{qpn:x}"),
                        transport: "RC".into(),
                        peer: Default::default(),
                        qpn: Some(qpn),
                        gpu: None,
                        created_ns: t0 - S,
                    })
                    .collect(),
            ));
            frames.push(Frame::Queues(Queues {
                at_ns: t - S / 10,
                queues: vec![
                    QueueState {
                        ep: 3,
                        sq_posted: 10,
                        sq_completed: 7,
                        sq_signaled_outstanding: 1,
                        sq_oldest_ns: 4 * S,
                        sq_stalled_ns: 4 * S,
                        ..Default::default()
                    },
                    QueueState {
                        ep: 4,
                        sq_posted: 12,
                        sq_completed: 12,
                        ..Default::default()
                    },
                ],
            }));
        }
        for f in frames {
            m.apply(&key, f);
        }
    }
    let v = anccl::collectives(&m, t, anccl::HANG_NS);
    assert_eq!(v.hung.len(), 1, "{:?}", v.hung);
    let h = &v.hung[0];
    assert!(h.waiting_for.is_empty(), "{h:?}");
    let text = anccl::hung_text(h);
    assert!(
        text.starts_with(
            "AllReduce #5: all 3 ranks in it 5.0s; r1→r2 ch1 waits on the network (QP 0x2a1: 3 WRs, none completed 4.1s)"
        ),
        "{text}"
    );
    // The other waits follow, closest to the cause first: channel 0's send is posted with
    // nothing outstanding on its QP, then the GPU-less waits for credit and data.
    let kinds: Vec<anccl::WaitKind> = h.wheres.iter().map(|w| w.what).collect();
    assert_eq!(
        kinds[..2],
        [anccl::WaitKind::Network, anccl::WaitKind::SendCompletion]
    );
    assert!(
        kinds[2..]
            .iter()
            .all(|k| matches!(k, anccl::WaitKind::PeerCredit | anccl::WaitKind::Data))
    );
    // The Collectives view's per-rank waits.
    let r1 = &v.comms[0].ranks[1];
    assert_eq!(r1.waits.len(), 4);
    assert_eq!(r1.waits[2].qp, Some((0x2a1, 3, 4_100_000_000)));
    // run --headless: said once it held over two checks, with where it waits.
    let mut watch = HungWatch::default();
    assert!(watch.check(&m, t, anccl::HANG_NS).is_empty());
    let lines = watch.check(&m, t + S / 4, anccl::HANG_NS);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("r1→r2 ch1 waits on the network (QP 0x2a1"),
        "{lines:?}"
    );
    // serve: rank 1's stalled QP and its outstanding work, per process and (with --qp-metrics)
    // per QP.
    let text = sigmatop::export::openmetrics::encode_model(
        &m,
        sigmatop::export::openmetrics::MetricsOptions {
            qp_metrics: true,
            per_process: true,
        },
    )
    .expect("text");
    let series = |name: &str, with: &[&str]| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(name) && with.iter().all(|w| l.contains(w)))
            .map(str::to_string)
            .collect()
    };
    let stalled = series("sigmatop_stalled_qps{", &["pid=\"101\""]);
    assert!(stalled.len() == 1 && stalled[0].ends_with(" 1"), "{text}");
    let out = series(
        "sigmatop_qp_outstanding_wrs{",
        &["qpn=\"0x2a1\"", "queue=\"send\""],
    );
    assert!(out.len() == 1 && out[0].ends_with(" 3"), "{out:?}\n{text}");
    let out = series(
        "sigmatop_outstanding_wrs{",
        &["pid=\"101\"", "queue=\"send\""],
    );
    assert!(out.len() == 1 && out[0].ends_with(" 3"), "{out:?}");
}

/// `serve`'s series by message size (protocol 6's `NcclCalls`, through the wire): per rank of the
/// fixture the AllReduce calls per power-of-two bucket that nccl-tests' arguments give (`-b 4K
/// -e 32K -f 8 -n 2 -w 1 -c 1`: warm-up 4K, 8K, 16K, 32K once each, then 4K and 32K 8 times).
#[test]
fn serve_counts_calls_per_message_size() {
    let mut m = Model::new();
    for (host, pid, recs) in files() {
        let mut t = sigmatop::nccl::live::Tracker::new();
        for r in &recs {
            t.push(r);
        }
        let key = ProcKey {
            host: host.clone(),
            pid,
            start_ns: 0,
        };
        let frames = vec![
            Frame::hello(Identity {
                host: host.clone(),
                pid,
                ..Default::default()
            }),
            Frame::Nccl(t.live()),
            Frame::NcclCalls(t.calls()),
        ];
        let mut bytes = Vec::new();
        for f in &frames {
            wire::encode(f, &mut bytes).expect("encodes");
        }
        let mut d = wire::Decoder::new();
        d.push(&bytes);
        while let Some(f) = d.next_frame().expect("decodes") {
            m.apply(&key, f);
        }
    }
    let text = sigmatop::export::openmetrics::encode_model(&m, Default::default()).expect("text");
    for host in ["softhost0", "softhost1"] {
        for (size, want) in [(4096, 9.0), (8192, 1.0), (16384, 1.0), (32768, 9.0)] {
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| {
                    l.starts_with("sigmatop_nccl_calls_by_size_total{")
                        && l.contains(&format!("host=\"{host}\""))
                        && l.contains(&format!("size=\"{size}\""))
                        && l.contains("collective=\"AllReduce\"")
                })
                .collect();
            assert_eq!(lines.len(), 1, "{host} {size}:\n{text}");
            let v: f64 = lines[0]
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .expect("a number");
            assert_eq!(v, want, "{host}: AllReduce calls of at most {size} bytes");
        }
    }
    assert!(
        text.contains("sigmatop_nccl_call_seconds_by_size_total{"),
        "{text}"
    );
}
