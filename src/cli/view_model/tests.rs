//! Tests of `view_model`.

use super::*;
use crate::agg::ProcKey;
use crate::agg::window::step;
use crate::event::{
    EndpointDef, EndpointKind, Event, Identity, Layer, OpCount, Peer as EvPeer, Snapshot,
};
use crate::wire::Frame;

const S: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * S;

/// The key of process `pid` on `host` (its trace start unknown).
fn key(host: &str, pid: u32) -> ProcKey {
    ProcKey {
        host: host.into(),
        pid,
        start_ns: 0,
    }
}

fn ident(pid: u32, rank: u32, host: &str, own: u64) -> Identity {
    Identity {
        host: host.into(),
        pid,
        rank: Some(rank),
        mode: 1,
        layers: Layer::Ucx.bit(),
        own_addr_hashes: vec![own],
        start_ns: T0,
        ..Default::default()
    }
}

fn ep(id: u32, peer_hash: u64) -> EndpointDef {
    EndpointDef {
        id,
        layer: Layer::Ucx,
        kind: EndpointKind::UcpEp,
        label: format!("ep#{id}"),
        transport: "tcp".into(),
        peer: EvPeer {
            addr_hash: peer_hash,
            ..Default::default()
        },
        qpn: None,
        gpu: None,
        created_ns: T0,
    }
}

fn snap(at: u64, seq: u64, counts: &[(u32, Op, u64, u64)]) -> Snapshot {
    Snapshot {
        at_ns: at,
        seq,
        counts: counts
            .iter()
            .map(|(ep, op, ops, bytes)| OpCount {
                ep: *ep,
                op: *op as u8,
                ops: *ops,
                bytes: *bytes,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Two ranks on two hosts; rank 0 sends 1 MB/s to rank 1 for 20 s, then 3 MB/s; rank 1 has
/// some unattributed receives.
fn model() -> Model {
    let mut m = Model::new();
    let a = key("n0", 10);
    let b = key("n1", 20);
    m.apply(&a, Frame::hello(ident(10, 0, "n0", 0xa)));
    m.apply(&b, Frame::hello(ident(20, 1, "n1", 0xb)));
    m.apply(&a, Frame::Endpoints(vec![ep(1, 0xb)]));
    m.apply(&b, Frame::Endpoints(vec![ep(1, 0xa)]));
    let mut tx = 0u64;
    for i in 1..=30u64 {
        tx += if i <= 20 { 1_000_000 } else { 3_000_000 };
        m.apply(
            &a,
            Frame::Snapshot(snap(T0 + i * S, i, &[(1, Op::UcxTagSend, i, tx)])),
        );
        m.apply(
            &b,
            Frame::Snapshot(snap(
                T0 + i * S,
                i,
                &[(1, Op::UcxTagRecv, i, tx), (0, Op::UcxTagRecv, i, 100 * i)],
            )),
        );
    }
    m
}

fn opts(window: Window, at: Option<u64>) -> ViewOptions {
    ViewOptions {
        window,
        at,
        source: "test".into(),
        clock: ClockStyle::SinceStart,
        now_ns: None,
    }
}

#[test]
fn rates_now_window_total() {
    let m = model();
    let vm = build_view(&m, &opts(Window::S10, None));
    let e = vm
        .endpoints
        .iter()
        .find(|e| e.pid == 10 && e.local_id == "ep#1")
        .expect("rank 0 endpoint");
    assert_eq!(e.tx_bps, 3e6);
    assert_eq!(e.tx_bps_window, 3e6);
    assert_eq!(e.tx_bytes, 20_000_000 + 30_000_000);
    assert_eq!(e.peer.host, "n1");
    assert_eq!(e.peer.rank, Some(1));
    assert_eq!(e.ops_by_opcode, vec![("tag_send".to_string(), 30)]);
    let all = build_view(&m, &opts(Window::All, None));
    let e = all
        .endpoints
        .iter()
        .find(|e| e.pid == 10 && !e.unattributed)
        .expect("row");
    assert!((e.tx_bps_window - 50e6 / 30.0).abs() < 1.0);
    assert_eq!(vm.header.tx_bps, 3e6);
    assert_eq!(vm.header.clock, "t+30.000s");
    assert_eq!(vm.header.ranks, 2);
    assert_eq!(vm.header.qps, 2);
    assert_eq!(vm.history_len, 30);
    assert_eq!(vm.history_pos, 29);
}

#[test]
fn building_into_a_previous_view_equals_a_fresh_build() {
    let m = model();
    let mut cache = ViewCache::default();
    let mut vm = ViewModel::default();
    // A bigger view first (doorbells, GPU rows, more endpoints), then smaller ones into it.
    let mut big = model();
    let k = key("n2", 30);
    big.apply(&k, Frame::hello(ident(30, 2, "n2", 0xc)));
    big.apply(&k, Frame::Endpoints((1..=5).map(|i| ep(i, 0xa)).collect()));
    build_view_into(&big, &opts(Window::All, None), &mut cache, &mut vm);
    assert!(vm.endpoints.len() > 4);
    for (w, at) in [
        (Window::S10, None),
        (Window::S1, Some(T0 + 15 * S)),
        (Window::All, None),
    ] {
        build_view_into(&m, &opts(w, at), &mut cache, &mut vm);
        assert_eq!(vm, build_view(&m, &opts(w, at)), "{w:?} {at:?}");
    }
}

#[test]
fn unattributed_row_and_matrices() {
    let m = model();
    let vm = build_view(&m, &opts(Window::S10, None));
    let u = vm
        .endpoints
        .iter()
        .find(|e| e.unattributed && e.pid == 20)
        .expect("unattributed row");
    assert_eq!(u.pid, 20);
    assert_eq!(u.local_id, "(unattributed)");
    assert_eq!(u.rx_bps, 100.0);
    assert_eq!(vm.matrices.rank.labels, vec!["r0", "r1"]);
    assert_eq!(vm.matrices.rank.bytes[0][1], 30e6);
    assert_eq!(vm.matrices.rank.rates[0][1], 3e6);
    assert_eq!(vm.matrices.node.labels, vec!["n0", "n1"]);
    assert_eq!(vm.matrices.node.bytes[0][1], 30e6);
    assert!(vm.matrices.gpu.labels.is_empty());
    assert_eq!(vm.nodes.len(), 2);
    assert_eq!(vm.ranks[0].egress_bps, 3e6);
    assert_eq!(vm.ranks[1].ingress_bps, 3e6 + 100.0);
    assert!(vm.doorbells.series.is_empty());
}

/// Issue 39, item 7: a process with nothing unattributed has no "(unattributed)" row of zeros
/// (pid 10 here; every process of every QPs view had one); one that has (pid 20) keeps its row.
#[test]
fn no_row_of_zeros_for_nothing_unattributed() {
    let m = model();
    let vm = build_view(&m, &opts(Window::S10, None));
    let pids: Vec<u32> = vm
        .endpoints
        .iter()
        .filter(|e| e.unattributed)
        .map(|e| e.pid)
        .collect();
    assert_eq!(pids, [20]);
}

/// Errors in a process's snapshots reach its endpoint's row and the status line, as of the view
/// time: 2 at t+31 s, 5 at t+32 s (the end); none at t+30 s, before the first.
#[test]
fn failed_operations_per_endpoint_and_in_the_status_line() {
    let mut m = model();
    let b = key("n1", 20);
    for (i, errors) in [(31u64, 2u64), (32, 5)] {
        let mut s = snap(T0 + i * S, i, &[(1, Op::UcxTagRecv, i, 100_000_000)]);
        s.counts[0].errors = errors;
        m.apply(&b, Frame::Snapshot(s));
    }
    let vm = build_view(&m, &opts(Window::S10, None));
    let row = |vm: &ViewModel| {
        vm.endpoints
            .iter()
            .find(|e| e.pid == 20 && e.local_id == "ep#1")
            .map(|e| e.errors)
    };
    assert_eq!(row(&vm), Some(5));
    assert_eq!(vm.status.errors, 5);
    let then = build_view(&m, &opts(Window::S10, Some(T0 + 31 * S)));
    assert_eq!((row(&then), then.status.errors), (Some(2), 2));
    let before = build_view(&m, &opts(Window::S10, Some(T0 + 30 * S)));
    assert_eq!((row(&before), before.status.errors), (Some(0), 0));
}

#[test]
fn history_positions_and_sparkline() {
    let m = model();
    let at = step(&m, None, -15);
    assert_eq!(at, Some(T0 + 15 * S));
    let vm = build_view(&m, &opts(Window::S1, at));
    assert_eq!(vm.history_pos, 14);
    let e = vm
        .endpoints
        .iter()
        .find(|e| e.pid == 10 && !e.unattributed)
        .expect("row");
    assert_eq!(e.tx_bps, 1e6);
    assert_eq!(e.tx_bytes, 15_000_000);
    assert_eq!(
        step(&m, at, 100),
        None,
        "stepping past the end returns to live"
    );
    assert_eq!(step(&m, at, -100), Some(T0 + S));
    let live = build_view(&m, &opts(Window::S10, None));
    assert_eq!(live.bandwidth_history.len(), 29);
    assert_eq!(live.bandwidth_history[0].0, 1e6);
    assert_eq!(live.bandwidth_history[28].0, 3e6);
    // One snapshot a second: the chart's time axis (issue 39, item 7).
    assert_eq!(live.bandwidth_interval_s, 1.0);
}

#[test]
fn exited_process_keeps_totals_and_goes_quiet() {
    let mut m = model();
    let a = key("n0", 10);
    m.apply(&a, Frame::Bye { at_ns: T0 + 30 * S });
    // The other process reports for 5 more seconds.
    let b = key("n1", 20);
    for i in 31..=35u64 {
        m.apply(&b, Frame::Snapshot(snap(T0 + i * S, i, &[])));
    }
    let vm = build_view(&m, &opts(Window::S10, None));
    let p = vm.processes.iter().find(|p| p.pid == 10).expect("row");
    assert!(p.exited);
    assert_eq!(p.tx_bps, 0.0);
    let e = vm
        .endpoints
        .iter()
        .find(|e| e.pid == 10 && !e.unattributed)
        .expect("row");
    assert_eq!(e.tx_bytes, 50_000_000);
    assert_eq!(e.state, "exited");
}

#[test]
fn live_now_rates_fall_to_zero_when_everyone_is_quiet() {
    let m = model();
    let mut o = opts(Window::S10, None);
    o.now_ns = Some(T0 + 40 * S);
    let vm = build_view(&m, &o);
    assert_eq!(vm.header.tx_bps, 0.0);
    let e = vm
        .endpoints
        .iter()
        .find(|e| e.pid == 10 && !e.unattributed)
        .expect("row");
    assert_eq!(e.tx_bytes, 50_000_000, "totals kept");
    assert_eq!(e.tx_bps_window, 0.0, "nothing in the last 10 s");
}

#[test]
fn doorbells_from_sampled_events() {
    let mut m = Model::new();
    let k = key("g", 1);
    m.apply(&k, Frame::hello(ident(1, 0, "g", 0)));
    let mut d = ep(5, 0);
    d.layer = Layer::Mlx5;
    d.kind = EndpointKind::DevxQp;
    d.qpn = Some(0x2a40);
    d.gpu = Some(0);
    m.apply(&k, Frame::Endpoints(vec![d]));
    for i in 1..=4u64 {
        m.apply(
            &k,
            Frame::Snapshot(snap(
                T0 + i * S,
                i,
                &[
                    (5, Op::GpuDoorbell, 1000 * i, 0),
                    (5, Op::GpuWrite, 1000 * i, 65536 * 1000 * i),
                ],
            )),
        );
    }
    // No clock samples: tsc is read as ns.
    let evs: Vec<Event> = (0..10u64)
        .flat_map(|i| {
            let tsc = T0 + 3 * S + i * 1000;
            [
                Event {
                    tsc,
                    ep: 5,
                    op: Op::GpuDoorbell as u8,
                    aux: i as u32,
                    ..Default::default()
                },
                Event {
                    tsc,
                    ep: 5,
                    op: Op::GpuWrite as u8,
                    bytes: 65536,
                    addr: 0x7f00_0000,
                    aux: 0x1a2b,
                    ..Default::default()
                },
            ]
        })
        .collect();
    m.apply(&k, Frame::Events(evs));
    let vm = build_view(&m, &opts(Window::S10, None));
    assert_eq!(vm.doorbells.series.len(), 1);
    let s = &vm.doorbells.series[0];
    assert_eq!(s.gpu, Some(0));
    assert_eq!(s.rate_now, 1000.0);
    let iv = s.interval_ns.expect("intervals");
    assert!((iv.p50 - 1000.0).abs() < 10.0, "{iv:?}");
    assert_eq!(vm.doorbells.recent.len(), 10);
    let r = &vm.doorbells.recent[9];
    assert_eq!((r.qpn, r.pi, r.wqes, r.bytes), (0x2a40, 9, 1, 65536));
    assert_eq!(r.opcode, "RDMA_WRITE");
    assert_eq!(vm.gpus.len(), 1);
    assert_eq!(vm.gpus[0].doorbells_per_s, 1000.0);
    // Nothing unattributed: no row of zeros for it (issue 39, item 7).
    assert!(vm.endpoints.iter().all(|e| !e.unattributed));
    let e = &vm.endpoints[0];
    assert_eq!(e.local_id, "0x2a40");
    assert_eq!(e.doorbells_per_s, Some(1000.0));
}

/// One process, rank 0 on "n0", sending `rate` bytes/s from T0, snapshots at the given seconds
/// (cumulative), numbered from `first_seq`.
fn one_sender(secs: &[u64], first_seq: u64, rate: u64) -> (Model, ProcKey) {
    let mut m = Model::new();
    let a = key("n0", 10);
    m.apply(&a, Frame::hello(ident(10, 0, "n0", 0xa)));
    m.apply(&a, Frame::Endpoints(vec![ep(1, 0xb)]));
    for (k, s) in secs.iter().enumerate() {
        m.apply(
            &a,
            Frame::Snapshot(snap(
                T0 + s * S,
                first_seq + k as u64,
                &[(1, Op::UcxTagSend, *s, rate * s)],
            )),
        );
    }
    (m, a)
}

#[test]
fn a_run_with_one_snapshot_has_its_rate_since_the_start() {
    let (m, _) = one_sender(&[2], 0, 1_000_000);
    let vm = build_view(&m, &opts(Window::S10, None));
    assert_eq!(vm.header.tx_bps, 1e6);
    assert_eq!(vm.processes[0].tx_bps, 1e6);
}

#[test]
fn attaching_mid_run_shows_no_rate_over_an_unobserved_interval() {
    // Attached 30 s into the run: the first snapshot seen is number 30.
    let (m, _) = one_sender(&[30], 30, 1_000_000);
    let vm = build_view(&m, &opts(Window::S10, None));
    assert_eq!(
        vm.header.tx_bps, 0.0,
        "one snapshot of an old process: no rate yet"
    );
    // A second, idle process traced since T0 makes the history's timeline; the sender is
    // first seen at 31 s with 31 MB already sent.
    let (mut m, _) = one_sender(&[31, 32, 33], 31, 1_000_000);
    let b = key("n1", 20);
    m.apply(&b, Frame::hello(ident(20, 1, "n1", 0xb)));
    for i in 1..=33u64 {
        m.apply(&b, Frame::Snapshot(snap(T0 + i * S, i - 1, &[])));
    }
    let vm = build_view(&m, &opts(Window::S10, None));
    assert_eq!(vm.header.tx_bps, 1e6);
    let tx: Vec<f64> = vm.bandwidth_history.iter().map(|x| x.0).collect();
    assert_eq!(tx.len(), 32);
    // No spike from the 31 MB sent before the attach: nothing until the sender was seen,
    // then 1 MB/s.
    assert!(tx[..30].iter().all(|v| *v == 0.0), "{tx:?}");
    assert_eq!(&tx[30..], &[1e6, 1e6]);
}

#[test]
fn averages_stop_at_the_end_of_an_exited_process() {
    let (mut m, a) = one_sender(&[1, 2, 3, 4], 0, 1_000_000);
    m.apply(&a, Frame::Bye { at_ns: T0 + 4 * S });
    for later in [5u64, 60, 600] {
        let mut o = opts(Window::All, None);
        o.now_ns = Some(T0 + later * S);
        let vm = build_view(&m, &o);
        let e = vm.endpoints.iter().find(|e| !e.unattributed).expect("row");
        assert_eq!(
            e.tx_bps_window, 1e6,
            "the average over its life, {later} s on"
        );
        assert_eq!(e.tx_bytes, 4_000_000);
    }
}

/// A job of 7 processes on 3 hosts whose counters do what real ones do and some worse:
/// steady and bursty growth, endpoints and operations appearing mid-run, a counter that
/// shrinks (a reused endpoint slot, or a bad relay), a verbs QP holding posted receives, a
/// GPU QP ringing doorbells, a process attached late, one that goes quiet and one that
/// exits. Snapshots every 250 ms, `snaps` of them, applied through `Model::apply`;
/// `each(k, model)` after snapshot k.
fn varied_job(seed: u64, snaps: u64, mut each: impl FnMut(u64, &Model)) -> Model {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let q = S / 4;
    let mut m = Model::new();
    let n = 7u32;
    let proc_key = |i: u32| key(&format!("n{}", i % 3), 10 + i);
    let mut counts: Vec<Vec<OpCount>> = Vec::new();
    for i in 0..n {
        let k = proc_key(i);
        m.apply(
            &k,
            Frame::hello(ident(10 + i, i, &k.host, 0x100 + u64::from(i))),
        );
        let mut eps: Vec<EndpointDef> = (1..=3)
            .map(|e| ep(e, 0x100 + u64::from((i + e) % n)))
            .collect();
        let mut qp = ep(9, 0x100 + u64::from((i + 1) % n));
        qp.layer = Layer::Ibverbs;
        qp.kind = EndpointKind::VerbsQp;
        qp.qpn = Some(0x40 + i);
        eps.push(qp);
        if i == 5 {
            let mut g = ep(12, 0);
            g.layer = Layer::Mlx5;
            g.kind = EndpointKind::DevxQp;
            g.qpn = Some(0x2a40);
            g.gpu = Some(0);
            eps.push(g);
        }
        m.apply(&k, Frame::Endpoints(eps));
        counts.push(vec![
            OpCount {
                ep: 1,
                op: Op::UcxTagSend as u8,
                ..Default::default()
            },
            OpCount {
                ep: 2,
                op: Op::UcxTagRecv as u8,
                ..Default::default()
            },
        ]);
    }
    for k in 0..snaps {
        for i in 0..n {
            // Process 3 is attached 5 s in; process 4 stops reporting 4 s before the end;
            // process 6 exits 8 s before the end.
            if (i == 3 && k < 20) || (i == 4 && k + 16 > snaps) || (i == 6 && k + 32 > snaps) {
                continue;
            }
            let c = &mut counts[i as usize];
            match rnd() % 97 {
                0 => c.push(OpCount {
                    ep: 3,
                    op: Op::UcxPut as u8,
                    ..Default::default()
                }),
                1 => c.push(OpCount {
                    ep: 0,
                    op: Op::UcxTagSend as u8,
                    ..Default::default()
                }),
                2 if c.len() > 1 => {
                    c.pop();
                }
                3 => c[0].bytes /= 2,
                _ => {}
            }
            if k == 30 && i == 1 {
                c.push(OpCount {
                    ep: 9,
                    op: Op::VerbsRecv as u8,
                    ..Default::default()
                });
            }
            if i == 5 && k == 10 {
                c.push(OpCount {
                    ep: 12,
                    op: Op::GpuDoorbell as u8,
                    ..Default::default()
                });
            }
            let quiet = i == 2 && (40..60).contains(&k);
            for (j, oc) in c.iter_mut().enumerate() {
                if quiet {
                    continue;
                }
                let burst = if rnd() % 5 == 0 { 7 } else { 1 };
                let n_ops = (rnd() % 20 + j as u64) * burst;
                oc.ops += n_ops;
                oc.bytes += n_ops * 4096;
                if oc.op == Op::VerbsRecv as u8 {
                    oc.posted += n_ops + 2;
                }
            }
            let at = T0 + k * q + u64::from(i) * 1000;
            m.apply(
                &proc_key(i),
                Frame::Snapshot(Snapshot {
                    at_ns: at,
                    seq: k,
                    counts: c.clone(),
                    ..Default::default()
                }),
            );
            if i == 6 && k + 33 == snaps {
                m.apply(&proc_key(i), Frame::Bye { at_ns: at });
            }
        }
        each(k, &m);
    }
    m
}

/// What the dashboard shows at many view times and windows, read from per-process totals,
/// equals what it shows read from every endpoint; and a frame of one tab equals those
/// sections of a whole build.
#[test]
fn figures_from_process_totals_equal_figures_from_endpoints() {
    let windows = [Window::S1, Window::S10, Window::S60, Window::All];
    let mut fast = 0;
    for seed in 1..=5 {
        let m = varied_job(seed, 320, |_, _| {});
        let latest = m.latest_ns();
        let times = [
            (None, None),
            (None, Some(latest + S / 10)),
            (None, Some(latest + 3 * S)),
            (Some(latest - S / 4), None),
            (Some(latest - 7 * S), None),
            (Some(T0 + 2 * S), None),
        ];
        for w in windows {
            for (at, now_ns) in times {
                let o = AtOptions {
                    window: core_window(w),
                    at,
                    now_ns,
                    detail: Detail::Endpoints,
                };
                let all = ModelAt::new(&m, &o);
                let lite = ModelAt::new(
                    &m,
                    &AtOptions {
                        detail: Detail::Processes,
                        ..o
                    },
                );
                let ctx = format!("seed {seed} {w:?} at {at:?} now {now_ns:?}");
                assert_eq!(
                    format!("{:?}", all.rates),
                    format!("{:?}", lite.rates),
                    "{ctx}"
                );
                assert_eq!(all.qps, lite.qps, "{ctx}");
                assert_eq!(all.nodes(), lite.nodes(), "{ctx}");
                assert_eq!(all.ranks(), lite.ranks(), "{ctx}");
                assert_eq!(all.gpus(), lite.gpus(), "{ctx}");
                let cfg = WarningConfig::default();
                assert_eq!(
                    warnings::warnings(&all, &cfg),
                    warnings::warnings(&lite, &cfg),
                    "{ctx}"
                );
                fast += lite.procs.iter().filter(|a| !a.detailed).count();
            }
        }
        for tab in Tab::ALL {
            for w in windows {
                let o = opts(w, None);
                let mut want = build_view(&m, &o);
                let sec = Sections::of_tab(tab);
                if !sec.processes {
                    want.processes.clear();
                }
                if !sec.endpoints {
                    want.endpoints.clear();
                }
                if !sec.gpus {
                    want.gpus.clear();
                }
                if !sec.nodes {
                    want.nodes.clear();
                    want.ranks.clear();
                }
                if !sec.matrices {
                    want.matrices = Matrices::default();
                }
                if !sec.doorbells {
                    want.doorbells = DoorbellModel::default();
                }
                if !sec.bandwidth {
                    want.bandwidth_history.clear();
                    want.bandwidth_interval_s = 0.0;
                }
                let mut vm = ViewModel::default();
                build_sections_into(&m, &o, sec, &mut ViewCache::default(), &mut vm);
                assert_eq!(vm, want, "seed {seed} {tab:?} {w:?}");
            }
        }
    }
    // Process 4 stops reporting 4 s before the end: while it is silent, the processes with an
    // endpoint whose peer it is are read from their endpoints (who waits on it: `agg::waits`).
    assert!(fast > 60, "the totals path was taken {fast} times");
}

/// Frames built with the dashboard's cache while the job grows (endpoints, operations and
/// processes appear) equal fresh builds.
#[test]
fn frames_built_with_the_cache_equal_fresh_builds() {
    let mut cache = ViewCache::default();
    let mut vm = ViewModel::default();
    let mut checked = 0;
    varied_job(9, 200, |k, m| {
        if k % 7 == 0 {
            for (tab, w) in [(Tab::Nodes, Window::S10), (Tab::Qps, Window::S60)] {
                let o = opts(w, None);
                let sec = Sections::of_tab(tab);
                build_sections_into(m, &o, sec, &mut cache, &mut vm);
                let mut fresh = ViewModel::default();
                build_sections_into(m, &o, sec, &mut ViewCache::default(), &mut fresh);
                assert_eq!(vm, fresh, "snapshot {k} {tab:?}");
                checked += 1;
            }
        }
    });
    assert_eq!(checked, 58);
}

/// A history trimmed to the byte budget shows, at its newest snapshot, what the whole history
/// shows, for every window the views offer.
#[test]
fn a_trimmed_history_shows_the_same_live_figures() {
    use crate::agg::snapshots::Keep;
    use crate::agg::window::ProcAt;
    let m = varied_job(3, 400, |_, _| {});
    for (k, p) in &m.processes {
        let mut small = p.clone();
        small.history = Default::default();
        let n = p.history.len();
        for i in 0..n {
            let s = p.history.get(i).expect("decodes").into_owned();
            small.history.push(
                s,
                Keep {
                    max: crate::agg::HISTORY,
                    bytes: 0,
                    floor_ns: crate::agg::WINDOW_FLOOR_NS,
                },
            );
        }
        assert!(
            small.history.len() < n || n < 241,
            "{} of {n} kept",
            small.history.len()
        );
        let t = p.history.at_ns(n - 1);
        for w in [Window::S1, Window::S10, Window::S60] {
            for detail in [false, true] {
                let a = ProcAt::new(k, p, t, core_window(w), detail, 0);
                let b = ProcAt::new(k, &small, t, core_window(w), detail, 0);
                assert_eq!(
                    format!("{:?} {} {}", a.sums, a.window_ns, a.now_ns),
                    format!("{:?} {} {}", b.sums, b.window_ns, b.now_ns),
                    "{k:?} {w:?} {detail}"
                );
                assert_eq!(format!("{:?}", a.eps), format!("{:?}", b.eps));
            }
        }
    }
}

/// The frames a real client sent (tests/programs/ucx_peer_fail.c, seen live): one send, then,
/// 26 ms later, its final snapshot with the endpoint's failure (an error on an op of its own, no
/// operation) and its goodbye. The Overview's status line counts the failure, with the wall
/// clock moving on past the end.
#[test]
fn a_failure_in_the_final_snapshot_reaches_the_overview() {
    let mut m = Model::new();
    let a = key("n0", 10);
    m.apply(&a, Frame::hello(ident(10, 0, "n0", 0xa)));
    m.apply(&a, Frame::Endpoints(vec![ep(1, 0xb)]));
    m.apply(
        &a,
        Frame::Snapshot(snap(T0 + 269_000_000, 1, &[(1, Op::UcxTagSend, 1, 64)])),
    );
    let mut last = snap(
        T0 + 295_000_000,
        2,
        &[(1, Op::UcxTagSend, 1, 64), (1, Op::UcxEpError, 0, 0)],
    );
    last.counts[1].errors = 1;
    m.apply(&a, Frame::Snapshot(last));
    m.apply(
        &a,
        Frame::Bye {
            at_ns: T0 + 296_000_000,
        },
    );
    m.source_closed(&a, None);
    for now in [None, Some(T0 + 2 * S), Some(T0 + 20 * S)] {
        let mut o = opts(Window::S10, None);
        o.now_ns = now;
        let mut vm = ViewModel::default();
        build_sections_into(
            &m,
            &o,
            Sections::of_tab(Tab::Overview),
            &mut ViewCache::default(),
            &mut vm,
        );
        assert_eq!(vm.status.errors, 1, "now {now:?}");
    }
}

/// Issue 36, item 3: a rank that stopped reporting, seen 10 s later. Its row says so and its
/// rates are 0; its endpoints are marked `silent`, the endpoint waiting on it `waits`; the Nodes
/// rows say which node and rank; one warning names it with its waiter. A traced process that
/// never answered has a row of its own and a warning.
#[test]
fn a_silent_rank_is_silent_in_every_view_and_one_warning_names_its_waiter() {
    let mut m = Model::new();
    let a = key("n0", 10);
    let b = key("n1", 20);
    m.apply(&a, Frame::hello(ident(10, 0, "n0", 0xa)));
    m.apply(&b, Frame::hello(ident(20, 1, "n1", 0xb)));
    m.apply(&a, Frame::Endpoints(vec![ep(1, 0xb)]));
    m.apply(&b, Frame::Endpoints(vec![ep(1, 0xa)]));
    for i in 1..=30u64 {
        let n = i.min(20);
        m.apply(
            &a,
            Frame::Snapshot(snap(T0 + i * S, i, &[(1, Op::UcxTagSend, n, n * 1000)])),
        );
        if i <= 20 {
            m.apply(
                &b,
                Frame::Snapshot(snap(T0 + i * S, i, &[(1, Op::UcxTagRecv, n, n * 1000)])),
            );
        }
    }
    m.note_not_answering(
        "n2",
        99,
        Some(crate::agg::NotAnswering {
            since_ns: T0 + 27 * S,
            exe: "app".into(),
            stopped: true,
        }),
    );
    let vm = build_view(&m, &opts(Window::S10, None));
    let row = |pid| vm.processes.iter().find(|p| p.pid == pid).expect("row");
    // Snapshots every second: silent after 4 s without one; 10 s at the view time.
    assert_eq!(row(20).silent_s, Some(10.0));
    assert_eq!((row(20).tx_bps, row(20).rx_bps), (0.0, 0.0));
    assert_eq!(row(10).silent_s, None);
    assert_eq!(row(99).silent_s, Some(3.0), "the one that never answered");
    let eps: Vec<(u32, &str, &str)> = vm
        .endpoints
        .iter()
        .filter(|e| !e.unattributed)
        .map(|e| (e.pid, e.mark.as_str(), e.waits_on.as_str()))
        .collect();
    assert_eq!(
        eps,
        vec![
            (10, "waits", "r1 (n1 pid 20), silent 10.0s"),
            (
                20,
                "silent",
                "r1 silent 10.0s: no frame since (stopped or hung); rates not known"
            ),
        ]
    );
    let nodes: Vec<(&str, u32)> = vm
        .nodes
        .iter()
        .map(|n| (n.host.as_str(), n.silent))
        .collect();
    assert_eq!(nodes, vec![("n0", 0), ("n1", 1)]);
    let ranks: Vec<Option<f64>> = vm.ranks.iter().map(|r| r.silent_s).collect();
    assert_eq!(ranks, vec![None, Some(10.0)]);
    let w: Vec<(WarningKind, &str)> = vm
        .warnings
        .iter()
        .map(|w| (w.kind, w.message.as_str()))
        .collect();
    assert_eq!(
        w,
        vec![
            (
                WarningKind::Silent,
                "r1 (n1 pid 20) silent 10.0s — waited on by r0 (ep#1: nothing moves)"
            ),
            (
                WarningKind::Silent,
                "pid 99 (n2 app) silent 3.0s: traced (its socket is there) but not answering; stopped (SIGSTOP, Ctrl-Z or a debugger)"
            ),
        ]
    );
}

/// A verbs QP whose peer is not traced (issue 36): the QPs view names the peer by its address,
/// or by the host of a traced process on that address, never as a process (the client's QP and
/// its untraced server's have the same number: the number alone named the client itself).
#[test]
fn an_untraced_qp_peer_is_named_by_its_address() {
    use crate::event::{EndpointUpdate, LOCAL_ADDR_STATE, qp_addr_hash};
    let gid = |h: u8| {
        let mut g = [0u8; 16];
        g[10..12].copy_from_slice(&[0xff, 0xff]);
        g[12..].copy_from_slice(&[10, 0, h, 1]);
        g
    };
    let qp = |id: u32, qpn: u32, peer: [u8; 16], peer_qpn: u32| EndpointDef {
        id,
        layer: Layer::Ibverbs,
        kind: EndpointKind::VerbsQp,
        label: format!("qp 0x{qpn:x}"),
        transport: "RC".into(),
        peer: EvPeer {
            addr_hash: qp_addr_hash(&peer, peer_qpn),
            text: String::new(),
            qpn: Some(peer_qpn),
            gid: Some(peer),
        },
        qpn: Some(qpn),
        gpu: None,
        created_ns: T0,
    };
    let local = |id: u32, own: [u8; 16], qpn: u32| EndpointUpdate {
        id,
        state: LOCAL_ADDR_STATE.into(),
        peer: Some(EvPeer {
            addr_hash: qp_addr_hash(&own, qpn),
            text: String::new(),
            qpn: Some(qpn),
            gid: Some(own),
        }),
        at_ns: T0,
    };
    let mut m = Model::new();
    let c = key("h2", 30);
    m.apply(
        &c,
        Frame::hello(ident(30, 0, "h2", qp_addr_hash(&gid(2), 0x10c))),
    );
    m.apply(&c, Frame::Endpoints(vec![qp(1, 0x10c, gid(1), 0x10c)]));
    m.apply(&c, Frame::Updates(vec![local(1, gid(2), 0x10c)]));
    m.apply(
        &c,
        Frame::Snapshot(snap(T0 + S, 1, &[(1, Op::VerbsWrite, 1000, 4_096_000)])),
    );
    let row = |m: &Model| {
        let vm = build_view(m, &opts(Window::All, None));
        let e = vm
            .endpoints
            .into_iter()
            .find(|e| e.pid == 30 && e.local_id == "0x10c")
            .expect("the client's QP");
        (e.peer.label(), vm.matrices.node)
    };
    let (label, node) = row(&m);
    assert_eq!(label, "10.0.1.1 qp 0x10c");
    assert_eq!(node.labels, vec!["h2".to_string(), "untraced".into()]);
    assert_eq!(node.bytes[0], vec![0.0, 4_096_000.0]);

    // A traced process on host h1 (another QP, another peer): the peer is on h1.
    let o = key("h1", 40);
    m.apply(
        &o,
        Frame::hello(ident(40, 1, "h1", qp_addr_hash(&gid(1), 0x200))),
    );
    m.apply(&o, Frame::Endpoints(vec![qp(1, 0x200, gid(9), 0x300)]));
    m.apply(&o, Frame::Updates(vec![local(1, gid(1), 0x200)]));
    let (label, _) = row(&m);
    assert_eq!(label, "h1 qp 0x10c");
}

/// Issue 39, item 7: one skew, three numbers. The dashboard's skew is of the window's rates
/// (playing the demo-moe record, rank 2's ingress over the last 10 s), `replay --headless`'s and
/// `report`'s of the whole record's bytes: they differ, and each warning says which it is
/// (`over 10s`, `over the whole run` with the window `all`; tests/demo.rs: `over the whole
/// record`).
#[test]
fn a_skew_says_what_it_is_judged_over() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-moe");
    let rec = crate::trace::reader::Recording::open(&[dir]).expect("fixture");
    let m = Model::from_recording(&rec);
    let at = step(&m, None, -2);
    for (w, over) in [
        (Window::S10, " over 10s"),
        (Window::All, " over the whole run"),
    ] {
        let vm = build_view(&m, &opts(w, at));
        let skew: Vec<&str> = vm
            .warnings
            .iter()
            .map(|w| w.message.as_str())
            .filter(|m| m.contains("× mean"))
            .collect();
        assert!(
            !skew.is_empty() && skew.iter().all(|m| m.ends_with(&format!("× mean{over}"))),
            "{w:?}: {skew:?}"
        );
        assert!(
            skew.iter().any(|m| m.starts_with("rank 2 ingress ")),
            "{skew:?}"
        );
    }
}
