//! Tests of `relay`.

use super::*;
use crate::event::Identity;

fn ident(host: &str, pid: u32) -> Identity {
    Identity {
        host: host.into(),
        pid,
        ..Default::default()
    }
}

fn stream(host: &str, frames: &[RelayFrame]) -> Vec<u8> {
    let mut out = RelayHello::ours(host).line().into_bytes();
    for f in frames {
        encode(f, &mut out).unwrap();
    }
    out
}

fn key(host: &str, pid: u32) -> ProcKey {
    ProcKey {
        host: host.into(),
        pid,
        start_ns: 0,
    }
}

#[test]
fn hello_lines_round_trip_and_name_both_versions() {
    let h = RelayHello::ours("node7");
    let line = h.line();
    let want = format!(
        "SIGMATOP-RELAY relay=2 wire={} sigmatop=",
        wire::PROTOCOL_VERSION
    );
    assert!(line.starts_with(&want), "{line}");
    assert_eq!(RelayHello::parse(line.trim_end()), Some(h));
    let other = RelayHello::parse("SIGMATOP-RELAY relay=9 wire=4 sigmatop=7.0.0 host=n future=1")
        .expect("parses with an unknown word");
    let e = other.check().unwrap_err();
    assert!(
        e.contains("sigmatop 7.0.0 there speaks relay protocol 9"),
        "{e}"
    );
    assert!(
        e.contains(&format!("this sigmatop {}", env!("CARGO_PKG_VERSION"))),
        "{e}"
    );
    assert_eq!(RelayHello::parse("SIGMATOP-RELAY host=x"), None);
    assert_eq!(RelayHello::parse("hello"), None);
}

#[test]
fn two_hosts_merge_and_garbage_loses_only_its_host() {
    let mut m = Model::new();
    let mut merge = Merge::new(&["a".into(), "b".into()], &mut m);
    merge.connecting(0, &mut m);
    merge.connecting(1, &mut m);
    let a = stream(
        "na",
        &[RelayFrame::Proc {
            key: key("na", 1),
            frame: Frame::hello(ident("na", 1)),
        }],
    );
    // A banner line before the hello is skipped.
    let mut b = b"Welcome to nb\n".to_vec();
    b.extend(stream(
        "nb",
        &[
            RelayFrame::Proc {
                key: key("nb", 1),
                frame: Frame::hello(ident("nb", 1)),
            },
            RelayFrame::Heartbeat {
                at_ns: 1,
                processes: 1,
            },
        ],
    ));
    assert_eq!(merge.push(0, &a, &mut m), Ok(1));
    for piece in b.chunks(3) {
        merge.push(1, piece, &mut m).unwrap();
    }
    assert_eq!(m.processes.len(), 2);
    assert_eq!(m.links[1].host.as_deref(), Some("nb"));
    assert_eq!(m.links[1].state, LinkState::Up);
    // Host a claims b's process: refused, b's process untouched.
    let mut bad = Vec::new();
    encode(
        &RelayFrame::Proc {
            key: key("nb", 1),
            frame: Frame::Bye { at_ns: 3 },
        },
        &mut bad,
    )
    .unwrap();
    let e = merge.push(0, &bad, &mut m).unwrap_err().reason;
    assert!(e.contains("which b already serves"), "{e}");
    merge.lost(0, &e, &mut m);
    assert!(!m.processes[&key("nb", 1)].exited);
    assert!(m.processes[&key("na", 1)].exited);
    assert!(matches!(m.links[0].state, LinkState::Lost(_)));
    // Garbage framing.
    let e = merge
        .push(1, &[0xff, 0xff, 0xff, 0xff], &mut m)
        .unwrap_err();
    assert!(e.reason.contains("exceeds") && !e.permanent, "{e:?}");
    // Not a relay at all.
    let mut m2 = Model::new();
    let mut merge2 = Merge::new(&["x".into()], &mut m2);
    let e = merge2.push(0, b"\x00\x01binary\n", &mut m2).unwrap_err();
    assert!(e.reason.starts_with("not a sigmatop relay"), "{e:?}");
    // Another version: refused for good.
    let mut m3 = Model::new();
    let mut merge3 = Merge::new(&["y".into()], &mut m3);
    let e = merge3
        .push(
            0,
            b"SIGMATOP-RELAY relay=2 wire=1 sigmatop=0.2.0 host=y\n",
            &mut m3,
        )
        .unwrap_err();
    assert!(
        e.permanent && e.reason.contains("sigmatop 0.2.0 there"),
        "{e:?}"
    );
    // A relay of the protocol before (1: no totals frames, no requests on stdin): the one
    // line names both sigmatop versions and both relay protocols.
    let mut m4 = Model::new();
    let mut merge4 = Merge::new(&["z".into()], &mut m4);
    let old = format!(
        "SIGMATOP-RELAY relay=1 wire={} sigmatop=0.1.0-old host=z\n",
        wire::PROTOCOL_VERSION
    );
    let e = merge4.push(0, old.as_bytes(), &mut m4).unwrap_err();
    assert!(e.permanent, "{e:?}");
    assert!(
        e.reason.starts_with(&format!(
            "sigmatop 0.1.0-old there speaks relay protocol 1 (live protocol {w}), this sigmatop {} speaks relay protocol 2 (live protocol {w})",
            env!("CARGO_PKG_VERSION"),
            w = wire::PROTOCOL_VERSION
        )),
        "{e:?}"
    );
}

#[test]
fn frames_before_a_process_hello_are_refused() {
    let mut m = Model::new();
    let mut merge = Merge::new(&["a".into()], &mut m);
    let s = stream(
        "na",
        &[RelayFrame::Proc {
            key: key("na", 5),
            frame: Frame::Bye { at_ns: 1 },
        }],
    );
    let e = merge.push(0, &s, &mut m).unwrap_err().reason;
    assert!(e.contains("before its hello"), "{e}");
    assert!(m.processes.is_empty());
}

/// Snapshot `tick` of process `p` (of 4) of host "na": 8 QPs, each a write and a receive
/// counter moving a different amount every tick; process 1's QP 3 write counter goes back
/// at tick 9 (a counter reset: a step that is not monotone), process 2 gains a QP at tick
/// 6 (another list of counters), and process 3 sends no receive at tick 0 (its first list).
fn snap(p: u32, tick: u64) -> crate::event::Snapshot {
    use crate::event::{Op, OpCount};
    let qps = if p == 2 && tick >= 6 { 9 } else { 8 };
    let mut counts = Vec::new();
    for q in 1..=qps {
        let k = u64::from(p * 16 + q);
        let mut w = (tick + 1) * k * 1000 + tick * tick * 7 * k;
        if p == 1 && q == 3 && tick >= 9 {
            w /= 3;
        }
        counts.push(OpCount {
            ep: q,
            op: Op::VerbsWrite as u8,
            ops: (tick + 1) * k,
            bytes: w,
            ..Default::default()
        });
        if !(p == 3 && tick == 0) {
            counts.push(OpCount {
                ep: q,
                op: Op::VerbsRecv as u8,
                ops: tick * k,
                bytes: tick * k * 512 + tick % 3,
                ..Default::default()
            });
        }
    }
    crate::event::Snapshot {
        at_ns: 1_000_000_000 + tick * 250_000_000,
        seq: tick,
        counts,
        events: tick * 3,
        threads: 2,
        ..Default::default()
    }
}

/// Sampled events of process `p` at `tick`: 150 of them (so that 16 ticks pass the 2,000
/// the dashboard keeps), a verbs write, except every 7th (process 0: every event from
/// tick 3 on), a doorbell; process 3 sends none at tick 5, and no doorbell from tick 10 on.
fn events(p: u32, tick: u64) -> Vec<crate::event::Event> {
    use crate::event::{Event, Op};
    let n = if p == 3 && tick == 5 { 0 } else { 150 };
    (0..n)
        .map(|i| Event {
            tsc: tick * 1000 + i,
            ep: 1 + (i % 8) as u32,
            op: if (i % 7 == 3 && !(p == 3 && tick >= 10)) || (p == 0 && tick >= 3) {
                Op::GpuDoorbell as u8
            } else {
                Op::VerbsWrite as u8
            },
            bytes: i,
            ..Default::default()
        })
        .collect()
}

/// What one relay sends for 4 processes × `ticks` snapshots at `qp_every`, per tick.
fn relay_ticks(qp_every: u32, ticks: u64) -> Vec<Vec<u8>> {
    let mut enc = RelayEncoder::default();
    enc.set_qp_every(qp_every);
    enc.out
        .extend_from_slice(RelayHello::ours("na").line().as_bytes());
    for p in 0..4 {
        let mut id = ident("na", p);
        id.start_ns = 900_000_000;
        enc.frame(&key("na", p), Frame::hello(id));
        let eps = (1..=9)
            .map(|q| crate::event::EndpointDef {
                id: q,
                layer: crate::event::Layer::Ibverbs,
                kind: crate::event::EndpointKind::VerbsQp,
                label: format!("qp {q}"),
                transport: "RC".into(),
                peer: Default::default(),
                qpn: Some(0x100 + q),
                gpu: None,
                created_ns: 900_000_000,
            })
            .collect();
        enc.frame(&key("na", p), Frame::Endpoints(eps));
    }
    let mut out = vec![std::mem::take(&mut enc.out)];
    for tick in 0..ticks {
        for p in 0..4 {
            let at = snap(p, tick).at_ns;
            enc.frame(
                &key("na", p),
                Frame::Clock(crate::event::ClockSample {
                    tsc: tick * 1000,
                    mono_ns: at - 5,
                    real_ns: at - 5 + u64::from(p),
                }),
            );
            enc.frame(&key("na", p), Frame::Snapshot(snap(p, tick)));
            enc.frame(&key("na", p), Frame::Events(events(p, tick)));
        }
        out.push(std::mem::take(&mut enc.out));
    }
    out
}

fn frames_of(bytes: &[u8]) -> Vec<RelayFrame> {
    let mut d = RelayDecoder::new();
    d.push(bytes);
    let mut out = Vec::new();
    while let Some(item) = d.next_item().unwrap() {
        if let RelayItem::Frame(f) = item {
            out.push(f);
        }
    }
    out
}

/// At qp-every 4 a relay sends every process's totals every tick and its counters every
/// fourth tick (one process of four a tick, phase-shifted), and at once when its list of
/// counters changes; the dashboard fed that stream shows the same per-process figures at
/// every tick as one fed every snapshot (bit for bit), and per QP the figures of the newest
/// whole snapshot, equal to the full stream's at that time.
#[test]
fn qp_every_sends_totals_and_keeps_process_figures_exact() {
    use crate::agg::window::{ProcAt, Window};
    const TICKS: u64 = 16;
    let full = relay_ticks(1, TICKS);
    let reduced = relay_ticks(4, TICKS);
    // What each tick carries: (whole snapshots, totals) by process.
    let mut wholes = Vec::new();
    for (tick, bytes) in reduced.iter().enumerate().skip(1) {
        // The hello line first (the first piece has no snapshot).
        let frames = frames_of(&[&reduced[0][..], bytes].concat());
        let whole: Vec<u32> = frames
            .iter()
            .filter_map(|f| match f {
                RelayFrame::Proc {
                    key,
                    frame: Frame::Snapshot(_),
                } => Some(key.pid),
                _ => None,
            })
            .collect();
        let totals = frames
            .iter()
            .filter(|f| matches!(f, RelayFrame::Totals { .. }))
            .count();
        assert_eq!(totals, 4, "tick {tick}");
        // Events: only the doorbells travel, with their indexes (every 7th from 3: 21 of
        // 150; process 0 from tick 3 on: all 150).
        for f in &frames {
            match f {
                RelayFrame::Events { key, kept, total } => {
                    let t = tick as u64 - 1;
                    let all = key.pid == 0 && t >= 3;
                    let want = match (key.pid, t) {
                        (3, 5) => 0,
                        (3, 10..) => panic!("no doorbell: its events travel as a count"),
                        _ if all => 150,
                        _ => 21,
                    };
                    assert_eq!(
                        (kept.len(), *total),
                        (want, if want == 0 { 0 } else { 150 })
                    );
                    if !all && want > 0 {
                        assert_eq!(kept[0].0, 3);
                        assert_eq!(kept[20].0, 143);
                    }
                }
                RelayFrame::Proc {
                    frame: Frame::Events(_),
                    ..
                } => panic!("whole events at qp-every 4"),
                _ => {}
            }
        }
        wholes.push(whole);
    }
    // Tick 0: every process's first snapshot. Then process p is whole when (seen + p) % 4
    // is 0: seen 1 → p 3, 2 → p 2, 3 → p 1, 4 → p 0, ...; process 2's new QP at tick 6
    // sends it whole at once; process 1's counter reset needs no whole snapshot.
    let want: Vec<Vec<u32>> = (0..TICKS)
        .map(|t| {
            if t == 0 {
                return vec![0, 1, 2, 3];
            }
            (0..4u32)
                .filter(|p| (t + u64::from(*p)) % 4 == 0 || (*p == 2 && t == 6))
                .collect()
        })
        .collect();
    assert_eq!(wholes, want);
    // Totals are smaller than the snapshots they replace (16 counters here; 128 a process
    // of 64 QPs): at most 96 bytes framed.
    let size = |v: &[Vec<u8>]| v[1..].iter().map(Vec::len).sum::<usize>();
    assert!(
        size(&reduced) < size(&full),
        "{} vs {}",
        size(&reduced),
        size(&full)
    );
    for f in frames_of(&[&reduced[0][..], &reduced[TICKS as usize]].concat()) {
        if let RelayFrame::Totals { .. } = f {
            let mut b = Vec::new();
            encode(&f, &mut b).unwrap();
            assert!(b.len() <= 96, "{} bytes: {f:?}", b.len());
        }
    }
    let (mut m1, mut m4) = (Model::new(), Model::new());
    let mut merge1 = Merge::new(&["a".into()], &mut m1);
    let mut merge4 = Merge::new(&["a".into()], &mut m4);
    for (tick, (b1, b4)) in full.iter().zip(&reduced).enumerate() {
        merge1.push(0, b1, &mut m1).unwrap();
        merge4.push(0, b4, &mut m4).unwrap();
        if tick == 0 {
            continue;
        }
        let t = m1.latest_ns();
        assert_eq!(m4.latest_ns(), t);
        for p in 0..4 {
            let k = key("na", p);
            let (p1, p4) = (&m1.processes[&k], &m4.processes[&k]);
            let (h1, h4) = (&p1.history, &p4.history);
            assert_eq!(h1.len(), h4.len());
            for i in 0..h1.len() {
                assert_eq!(
                    (h1.at_ns(i), h1.seq(i), h1.tx_rx(i)),
                    (h4.at_ns(i), h4.seq(i), h4.tx_rx(i))
                );
                assert_eq!(h1.monotone(0, i), h4.monotone(0, i), "p{p} {i}");
            }
            assert_eq!(
                format!("{:?}", h1.totals()),
                format!("{:?}", h4.totals()),
                "tick {tick} process {p}"
            );
            // What the Nodes view and the process rows read: the same, bit for bit.
            for w in [Window::Seconds(1), Window::All] {
                let a1 = ProcAt::new(&k, p1, t, w, false, 0);
                let a4 = ProcAt::new(&k, p4, t, w, false, 0);
                assert_eq!(a1.detailed, a4.detailed, "p{p} tick {tick}");
                let n = h4.len();
                if a1.detailed && n >= 2 && !(h4.is_full(n - 1) && h4.is_full(n - 2)) {
                    // Read from endpoints (a step that was not monotone: process 1 at tick
                    // 9 and in the window after it), the reduced stream's at its newest
                    // whole snapshot, "now" from the whole one before: compared below.
                    assert!(p == 1 && tick >= 9, "p{p} tick {tick}");
                    continue;
                }
                assert_eq!(
                    format!("{:?}", a1.sums),
                    format!("{:?}", a4.sums),
                    "tick {tick} process {p}"
                );
                assert_eq!(a1.drops, a4.drops);
            }
            // Per QP: the newest whole snapshot, as the full stream had it at that time,
            // and "now" over the step from the whole one before.
            let f = h4.full_at(h4.len() - 1).unwrap();
            let tf = h4.at_ns(f);
            let d4 = ProcAt::new(&k, p4, t, Window::All, true, 0);
            let d1 = ProcAt::new(&k, p1, tf, Window::All, true, 0);
            assert_eq!(
                format!("{:?}", (d1.sums.tot, d1.sums.win_tx, d1.window_ns)),
                format!("{:?}", (d4.sums.tot, d4.sums.win_tx, d4.window_ns)),
                "tick {tick} process {p}"
            );
            let tot = |a: &ProcAt| -> Vec<(u32, u64, u64, u64)> {
                a.eps
                    .iter()
                    .map(|(ep, e)| (ep, e.tot.tx, e.tot.rx, e.tot.ops))
                    .collect()
            };
            assert_eq!(tot(&d1), tot(&d4));
            if let Some(f0) = f.checked_sub(1).and_then(|i| h4.full_at(i)) {
                let tf0 = h4.at_ns(f0);
                let before = tot(&ProcAt::new(&k, p1, tf0, Window::All, true, 0));
                assert_eq!(d4.now_ns, tf - tf0);
                let now: Vec<(u32, u64, u64, u64)> = d4
                    .eps
                    .iter()
                    .map(|(ep, e)| (ep, e.now.tx, e.now.rx, e.now.ops))
                    .collect();
                let want: Vec<(u32, u64, u64, u64)> = tot(&d1)
                    .iter()
                    .map(|&(ep, tx, rx, ops)| {
                        let b = before
                            .iter()
                            .find(|b| b.0 == ep)
                            .map_or((0, 0, 0), |b| (b.1, b.2, b.3));
                        // A counter that went back counts from zero (process 1, QP 3).
                        (ep, tx.saturating_sub(b.0), rx - b.1, ops - b.2)
                    })
                    .collect();
                if !(p == 1 && tf0 < snap(1, 9).at_ns && tf >= snap(1, 9).at_ns) {
                    assert_eq!(now, want, "tick {tick} process {p}");
                }
            }
            assert_eq!(h4.get(h4.len() - 1).unwrap().at_ns, tf);
            // The sampled events the views read: the same, though only doorbells travel.
            let ev = |p: &crate::agg::ProcessState| -> Vec<(u64, u64)> {
                p.recent.iter().map(|e| (e.tsc, e.bytes)).collect()
            };
            let (e1, e4) = (ev(p1), ev(p4));
            if p == 3 && tick >= 11 {
                // Its events of the last tick, none a doorbell, are still a count at the
                // relay (it travels with the next totals): the window of the latest events
                // moves 250 ms later, by one batch (21 doorbells of an old one).
                assert!(
                    e4.ends_with(&e1) && e4.len() - e1.len() <= 21,
                    "tick {tick}"
                );
            } else {
                assert_eq!(e1, e4, "tick {tick} process {p}");
            }
            assert_eq!(
                p1.clock.samples(),
                p4.clock.samples(),
                "tick {tick} process {p}"
            );
            assert!(!p4.recent.is_empty());
            assert_eq!(h4.last().unwrap().into_owned(), snap(p, h4.seq(f)));
        }
    }
    // Every 4th snapshot of a process whole: process 0's were ticks 0, 4, 8, 12.
    let h = &m4.processes[&key("na", 0)].history;
    let whole: Vec<u64> = (0..h.len())
        .filter(|&i| h.is_full(i))
        .map(|i| h.seq(i))
        .collect();
    assert_eq!(whole, [0, 4, 8, 12]);
}

#[test]
fn totals_without_a_snapshot_before_are_refused() {
    let mut m = Model::new();
    let mut merge = Merge::new(&["a".into()], &mut m);
    let t = ProcTotals::from(&crate::agg::snapshots::Totals::default());
    let s = stream(
        "na",
        &[RelayFrame::Totals {
            key: key("na", 5),
            totals: Box::new(t.clone()),
        }],
    );
    let e = merge.push(0, &s, &mut m).unwrap_err().reason;
    assert!(
        e.contains("sent totals of process 5 on na before its hello"),
        "{e}"
    );
    let mut m = Model::new();
    let mut merge = Merge::new(&["a".into()], &mut m);
    let s = stream(
        "na",
        &[
            RelayFrame::Proc {
                key: key("na", 5),
                frame: Frame::hello(ident("na", 5)),
            },
            RelayFrame::Totals {
                key: key("na", 5),
                totals: Box::new(t),
            },
        ],
    );
    let e = merge.push(0, &s, &mut m).unwrap_err().reason;
    assert!(
        e.contains("without a snapshot of its counters before them"),
        "{e}"
    );
}

#[test]
fn qp_every_follows_the_counters() {
    assert_eq!(qp_every_for(0), 1);
    // One host: 8 processes × 64 QPs × 2 counters.
    assert_eq!(qp_every_for(1024), 1);
    assert_eq!(qp_every_for(COUNTERS_PER_TICK), 1);
    assert_eq!(qp_every_for(COUNTERS_PER_TICK + 1), 2);
    // 256 hosts × 8 processes × 64 QPs × 2 counters.
    assert_eq!(qp_every_for(262_144), 8);
    assert_eq!(qp_every_for(usize::MAX), MAX_QP_EVERY);
}

/// A GPU QP that rings 100 doorbells every 250 ms: at qp-every 4 the doorbell view's rate
/// is 400/s at every sample once two whole snapshots are in (held between them), as at
/// qp-every 1, not 0, 0, 0, 1,600.
#[test]
fn doorbell_rates_hold_between_whole_snapshots() {
    use crate::agg::history::{doorbell_series, sample_times};
    use crate::agg::window::{ProcAt, Window};
    use crate::event::{Op, OpCount};
    let rates = |n: u32| -> Vec<f64> {
        let mut enc = RelayEncoder::default();
        enc.set_qp_every(n);
        enc.out
            .extend_from_slice(RelayHello::ours("na").line().as_bytes());
        let k = key("na", 1);
        enc.frame(&k, Frame::hello(ident("na", 1)));
        for tick in 0..24u64 {
            enc.frame(
                &k,
                Frame::Snapshot(crate::event::Snapshot {
                    at_ns: 1_000_000_000 + tick * 250_000_000,
                    seq: tick,
                    counts: vec![OpCount {
                        ep: 1,
                        op: Op::GpuDoorbell as u8,
                        ops: 100 * (tick + 1),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            );
        }
        let mut m = Model::new();
        let mut merge = Merge::new(&["a".into()], &mut m);
        merge.push(0, &enc.out, &mut m).unwrap();
        let t = m.latest_ns();
        let p = &m.processes[&k];
        let procs = vec![ProcAt::new(&k, p, t, Window::All, true, 0)];
        let times = sample_times(&m, t);
        let s = doorbell_series(&m, &procs, t, &times, Window::All);
        assert_eq!(s.len(), 1);
        s[0].rate_history.clone()
    };
    let full = rates(1);
    assert_eq!(full.len(), 23);
    assert!(full.iter().all(|r| *r == 400.0), "{full:?}");
    let reduced = rates(4);
    assert_eq!(reduced.len(), 23);
    // Whole snapshots at ticks 0, 4, 8, ...: nothing known before the second one.
    assert!(reduced[..3].iter().all(|r| *r == 0.0), "{reduced:?}");
    assert!(reduced[3..].iter().all(|r| *r == 400.0), "{reduced:?}");
}

/// Back to qp-every 1 (the job shrank): the clock sample and the count of events that
/// waited for the next snapshot are sent at once, and the stream is protocol 1's again.
#[test]
fn back_to_every_snapshot_sends_what_waited() {
    let mut enc = RelayEncoder::default();
    enc.set_qp_every(4);
    enc.out
        .extend_from_slice(RelayHello::ours("na").line().as_bytes());
    let k = key("na", 1);
    enc.frame(&k, Frame::hello(ident("na", 1)));
    enc.frame(&k, Frame::Snapshot(snap(0, 0)));
    enc.frame(&k, Frame::Events(events(3, 12)));
    let c = crate::event::ClockSample {
        tsc: 7,
        mono_ns: 8,
        real_ns: 9,
    };
    enc.frame(&k, Frame::Clock(c));
    let before = frames_of(&enc.out).len();
    enc.set_qp_every(1);
    enc.frame(&k, Frame::Snapshot(snap(0, 1)));
    let frames = frames_of(&enc.out);
    let tail: Vec<&RelayFrame> = frames[before..].iter().collect();
    assert_eq!(
        tail,
        [
            &RelayFrame::Events {
                key: k.clone(),
                kept: Vec::new(),
                total: 150
            },
            &RelayFrame::Proc {
                key: k.clone(),
                frame: Frame::Clock(c)
            },
            &RelayFrame::Proc {
                key: k.clone(),
                frame: Frame::Snapshot(snap(0, 1))
            },
        ]
    );
}
