use super::*;
use crate::agg::at::AtOptions;
use crate::agg::warnings::{WarningConfig, WarningKind, warnings};
use crate::agg::{Model, ProcKey};
use crate::event::{EndpointDef, EndpointKind, Identity, Layer, Op, OpCount, Peer, Snapshot};
use crate::wire::Frame;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000 * S;

/// One process of a synthetic model.
struct P {
    key: ProcKey,
    rank: Option<u32>,
}

fn key(i: u32) -> ProcKey {
    ProcKey {
        host: format!("node{i}"),
        pid: 100 + i,
        start_ns: T0,
    }
}

fn add(m: &mut Model, i: u32, rank: Option<u32>, eps: Vec<EndpointDef>) -> P {
    let k = key(i);
    m.apply(
        &k,
        Frame::hello(Identity {
            host: k.host.clone(),
            pid: k.pid,
            rank,
            own_addr_hashes: vec![0x100 + u64::from(i)],
            start_ns: T0,
            ..Default::default()
        }),
    );
    m.apply(&k, Frame::Endpoints(eps));
    P { key: k, rank }
}

fn ep(
    id: u32,
    kind: EndpointKind,
    peer: Option<u32>,
    qpn: Option<u32>,
    label: &str,
) -> EndpointDef {
    EndpointDef {
        id,
        layer: match kind {
            EndpointKind::VerbsQp => Layer::Ibverbs,
            _ => Layer::Ucx,
        },
        kind,
        label: label.into(),
        transport: String::new(),
        peer: Peer {
            addr_hash: peer.map_or(0, |p| 0x100 + u64::from(p)),
            ..Default::default()
        },
        qpn,
        gpu: None,
        created_ns: T0,
    }
}

fn count(ep: u32, op: Op, ops: u64, posted: u64) -> OpCount {
    OpCount {
        ep,
        op: op as u8,
        ops,
        bytes: ops * 4096,
        posted,
        posted_bytes: posted * 4096,
        ..Default::default()
    }
}

fn snap(m: &mut Model, p: &P, seq: u64, at_ns: u64, counts: Vec<OpCount>) {
    m.apply(
        &p.key,
        Frame::Snapshot(Snapshot {
            at_ns,
            seq,
            counts,
            ..Default::default()
        }),
    );
}

fn at_of(m: &Model, t: u64) -> ModelAt<'_> {
    ModelAt::new(
        m,
        &AtOptions {
            at: Some(t),
            ..Default::default()
        },
    )
}

/// A verbs ping-pong across two hosts: pid 100's QP 0x107 (382 receives posted) and pid 101's
/// QP 0x107, both moving for 2 s; then pid 101 stops reporting (SIGSTOP) while pid 100 goes on
/// reporting, its receives posted and nothing completing, until `until_s`.
fn pingpong(until_s: u64) -> Model {
    let mut m = Model::new();
    let a = add(
        &mut m,
        0,
        None,
        vec![ep(
            1,
            EndpointKind::VerbsQp,
            Some(1),
            Some(0x107),
            "qp 0x107",
        )],
    );
    let b = add(
        &mut m,
        1,
        None,
        vec![ep(
            1,
            EndpointKind::VerbsQp,
            Some(0),
            Some(0x107),
            "qp 0x107",
        )],
    );
    let mut seq = 0;
    let mut t = T0;
    let mut n = 0;
    while t <= T0 + until_s * S {
        let moving = t <= T0 + 2 * S;
        if moving {
            n += 100;
        }
        snap(
            &mut m,
            &a,
            seq,
            t,
            vec![
                count(1, Op::VerbsRecv, n, n + 382),
                count(1, Op::VerbsSend, n, 0),
            ],
        );
        if moving {
            snap(
                &mut m,
                &b,
                seq,
                t,
                vec![
                    count(1, Op::VerbsRecv, n, n + 500),
                    count(1, Op::VerbsSend, n, 0),
                ],
            );
        }
        seq += 1;
        t += 250 * MS;
    }
    m
}

#[test]
fn a_process_whose_snapshots_stop_is_silent_and_its_rates_fall() {
    let m = pingpong(10);
    let at = at_of(&m, T0 + 10 * S);
    // pid 101 sent its last snapshot at T0 + 2 s: 8 s ago.
    assert_eq!(at.silent, vec![None, Some(8 * S)]);
    assert_eq!(silent(&at), BTreeSet::from([1]));
    assert_eq!(
        at.rates[1].tx_bps, 0.0,
        "a silent process's rates are not its last ones"
    );
    // 1 s without a snapshot is not yet silent; past it, it is.
    assert_eq!(at_of(&m, T0 + 3 * S).silent[1], None);
    assert!(at_of(&m, T0 + 3 * S + 1).silent[1].is_some());
    // Before the stop, nobody is silent.
    assert_eq!(at_of(&m, T0 + 2 * S).silent, vec![None, None]);
}

#[test]
fn the_stopped_far_end_is_named_once_with_its_waiter_and_pid() {
    let m = pingpong(10);
    let at = at_of(&m, T0 + 10 * S);
    let w = waits(&at, WAIT_NS);
    assert_eq!(w.waited_on.len(), 1, "{w:?}");
    let x = &w.waited_on[0];
    assert_eq!((x.proc, x.silent_ns), (1, Some(8 * S)));
    assert_eq!(
        x.waiters,
        vec![Wait {
            proc: 0,
            ep: 1,
            outstanding: 382
        }]
    );
    assert_eq!(
        text(&at, x),
        "pid 101 (node1) silent 8.0s — waited on by pid 100 (QP 0x107: 382 receives posted)"
    );
    // One warning, about the stopped process: not the waiter's idle QP as well.
    let ws = warnings(&at, &WarningConfig::default());
    let ours: Vec<_> = ws
        .iter()
        .filter(|w| w.kind != WarningKind::NodeSkew && w.kind != WarningKind::NodeIngressSkew)
        .collect();
    assert_eq!(ours.len(), 1, "{ws:?}");
    assert_eq!(ours[0].kind, WarningKind::Silent);
    assert_eq!(ours[0].value, 8.0);
    assert!(ours[0].subject.starts_with("pid 101 (node1) silent"));
}

#[test]
fn live_silence_is_judged_on_the_readers_clock() {
    let mut m = pingpong(2);
    // The reader saw pid 100's latest frame just now and pid 101's 5 s ago; pid 101's clock
    // runs 1 h ahead (its snapshot times say nothing of it).
    m.processes.get_mut(&key(0)).unwrap().last_seen_ns = T0 + 20 * S;
    m.processes.get_mut(&key(1)).unwrap().last_seen_ns = T0 + 15 * S;
    fn live(m: &Model, now: u64) -> Vec<Option<u64>> {
        ModelAt::new(
            m,
            &AtOptions {
                now_ns: Some(now),
                ..Default::default()
            },
        )
        .silent
    }
    assert_eq!(live(&m, T0 + 20 * S), vec![None, Some(5 * S)]);
    assert_eq!(live(&m, T0 + 15 * S + 900 * MS), vec![None, None]);
    // An exited process is not silent.
    m.processes.get_mut(&key(1)).unwrap().exited = true;
    assert_eq!(live(&m, T0 + 20 * S), vec![None, None]);
}

#[test]
fn longer_snapshot_intervals_take_longer_to_be_silent() {
    let mut m = Model::new();
    let p = add(&mut m, 0, None, Vec::new());
    for s in 0..=4 {
        snap(&mut m, &p, s, T0 + s * 2 * S, Vec::new());
    }
    // Snapshots every 2 s: silent after 8 s without one, not after 7.
    assert_eq!(at_of(&m, T0 + 15 * S).silent, vec![None]);
    assert_eq!(at_of(&m, T0 + 17 * S).silent, vec![Some(9 * S)]);
}

/// A 4-rank token ring over UCX: each rank receives on its worker (endpoint 1) and sends to
/// its right through endpoint 2 + right. It runs for 2 s, one round per snapshot; then rank 3
/// takes the token and sends nothing until `resume_s` (the ring turns again from then on, up
/// to `until_s`): meanwhile r0 waits on it (a receive posted), r1 on r0, r2 on r1, and r3 has
/// nothing outstanding, unless `r3_waits` (it waits too: a cycle, as when the token is lost).
fn ring(until_s: u64, resume_s: u64, r3_waits: bool) -> Model {
    let mut m = Model::new();
    let ps: Vec<P> = (0..4u32)
        .map(|i| {
            let mut eps = vec![ep(1, EndpointKind::UcpWorker, None, None, "worker@0x7f00")];
            for j in 0..4u32 {
                eps.push(ep(2 + j, EndpointKind::UcpEp, Some(j), None, "ep@0x7f01"));
            }
            add(&mut m, i, Some(i), eps)
        })
        .collect();
    let mut seq = 0;
    let mut t = T0;
    let mut rounds = 0u64;
    while t <= T0 + until_s * S {
        let moving = t <= T0 + 2 * S || t >= T0 + resume_s * S;
        if moving {
            rounds += 1;
        }
        for (i, p) in ps.iter().enumerate() {
            let i = i as u64;
            // Turning, every rank has received and sent each round at a snapshot; stalled,
            // each posted its next receive, but r3, which holds the token.
            let (recvd, posted, sent) = if moving || (i == 3 && !r3_waits) {
                (rounds, rounds, rounds)
            } else {
                (rounds, rounds + 1, rounds)
            };
            let right = (i + 1) % 4;
            snap(
                &mut m,
                p,
                seq,
                t,
                vec![
                    count(1, Op::UcxTagRecv, recvd, posted),
                    count(2 + right as u32, Op::UcxTagSend, sent, 0),
                ],
            );
        }
        seq += 1;
        t += 250 * MS;
    }
    m
}

#[test]
fn a_ring_names_the_rank_that_holds_the_token_not_the_waiters() {
    let m = ring(10, 99, false);
    let at = at_of(&m, T0 + 10 * S);
    assert!(at.silent.iter().all(Option::is_none), "everyone reports");
    let w = waits(&at, WAIT_NS);
    assert_eq!(w.waited_on.len(), 1, "{w:?}");
    let x = &w.waited_on[0];
    assert_eq!(x.proc, 3, "r3 is waited on");
    assert_eq!(
        x.waiters,
        vec![Wait {
            proc: 0,
            ep: 1,
            outstanding: 1
        }]
    );
    assert_eq!(x.behind, vec![1, 2]);
    assert_eq!(
        text(&at, x),
        "r3 (node3 pid 103) sent nothing 8.0s — waited on by r0 (ucp_worker: 1 receive posted); behind it r1, r2"
    );
    let ws = warnings(&at, &WarningConfig::default());
    assert_eq!(ws[0].kind, WarningKind::WaitedOn, "{ws:?}");
    assert_eq!(ws[0].processes, 3);
    // Within the threshold of the stall nothing is said yet: receives outstanding for less
    // than 2 s are not a wait.
    assert!(waits(&at_of(&m, T0 + 3 * S), WAIT_NS).waited_on.is_empty());
    // While the ring turns, nobody waits.
    assert!(waits(&at_of(&m, T0 + 2 * S), WAIT_NS).waited_on.is_empty());
}

#[test]
fn processes_that_all_wait_on_each_other_name_nobody() {
    // Every rank holds a receive and nobody sends: a cycle with no root (a lost token, a
    // deadlock): no process is named as the one the others wait for.
    let m = ring(10, 99, true);
    let at = at_of(&m, T0 + 10 * S);
    assert_eq!(waits(&at, WAIT_NS), Waits::default());
}

#[test]
fn the_longest_quiet_period_is_the_stall() {
    let m = ring(12, 10, false);
    let q = longest_quiet(&m).expect("a quiet period");
    // Bytes last moved in the step to T0 + 2 s, and again in the step from T0 + 9.75 s.
    assert_eq!((q.from_ns, q.to_ns), (T0 + 2 * S, T0 + 9_750 * MS));
    let r = m.quiet_report().expect("a quiet report");
    assert_eq!(r.seconds, 7.75);
    let straggler = r.straggler.expect("a straggler");
    assert_eq!((straggler.pid, straggler.rank), (103, Some(3)));
    assert_eq!(r.waits.len(), 1, "{:?}", r.waits);
    assert_eq!(r.waits[0].behind.len(), 2);
}

#[test]
fn a_gap_in_a_stopped_process_record_is_quiet_not_busy() {
    // pid 101 stops reporting at 2 s and reports again at 10 s with more bytes: its step
    // across the gap is activity at its two ends, so the quiet period is the gap.
    let mut m = pingpong(12);
    let b = P {
        key: key(1),
        rank: None,
    };
    let _ = b.rank;
    for (i, s) in (40..44u64).enumerate() {
        let n = 900 + 100 * i as u64;
        snap(
            &mut m,
            &b,
            s,
            T0 + 10 * S + i as u64 * 250 * MS,
            vec![
                count(1, Op::VerbsRecv, n, n + 500),
                count(1, Op::VerbsSend, n, 0),
            ],
        );
    }
    let q = longest_quiet(&m).expect("a quiet period");
    assert_eq!(q.from_ns, T0 + 2 * S);
    assert!(
        q.to_ns >= T0 + 9_750 * MS && q.to_ns <= T0 + 10 * S,
        "{q:?}"
    );
    let r = m.quiet_report().expect("a report");
    let s = r
        .straggler
        .clone()
        .unwrap_or_else(|| panic!("the stopped one: {q:?} {:?}", r.waits));
    assert_eq!(s.pid, 101);
    assert!(r.waits[0].silent_s.is_some(), "{:?}", r.waits);
}

#[test]
fn a_wait_younger_than_the_threshold_ends_the_chain_without_naming_it() {
    // The ring, but r0 posts its next receive only at 3 s (its snapshots caught it between
    // its send and its receive): at 4.5 s r1 has waited on r0 for 2.25 s, r0 on r3 for 1.5 s.
    let mut m = Model::new();
    let ps: Vec<P> = (0..4u32)
        .map(|i| {
            let mut eps = vec![ep(1, EndpointKind::UcpWorker, None, None, "worker@0x7f00")];
            for j in 0..4u32 {
                eps.push(ep(2 + j, EndpointKind::UcpEp, Some(j), None, "ep@0x7f01"));
            }
            add(&mut m, i, Some(i), eps)
        })
        .collect();
    for k in 0..=28u64 {
        let t = T0 + k * 250 * MS;
        let rounds = k.min(8) + 1;
        for (i, p) in ps.iter().enumerate() {
            let i = i as u64;
            let posted = match i {
                _ if t <= T0 + 2 * S => rounds,
                0 if t < T0 + 3 * S => rounds,
                3 => rounds,
                _ => rounds + 1,
            };
            snap(
                &mut m,
                p,
                k,
                t,
                vec![
                    count(1, Op::UcxTagRecv, rounds, posted),
                    count(2 + ((i + 1) % 4) as u32, Op::UcxTagSend, rounds, 0),
                ],
            );
        }
    }
    let young = waits(&at_of(&m, T0 + 4_500 * MS), WAIT_NS);
    assert_eq!(young, Waits::default(), "r0 is not named: it waits too");
    let old = waits(&at_of(&m, T0 + 5_500 * MS), WAIT_NS);
    assert_eq!(old.waited_on.len(), 1, "{old:?}");
    assert_eq!(
        (old.waited_on[0].proc, old.waited_on[0].behind.clone()),
        (3, vec![1, 2])
    );
}

#[test]
fn a_peer_that_does_not_take_what_was_sent_to_it_is_named() {
    // A verbs ping-pong whose pid 101 stops polling at 2 s (it reports, its receives stay
    // posted): pid 100 sent it one more message than it took. Both have receives outstanding
    // and nothing completes; pid 101 is the one waited for.
    let mut m = Model::new();
    let a = add(
        &mut m,
        0,
        None,
        vec![ep(
            1,
            EndpointKind::VerbsQp,
            Some(1),
            Some(0x107),
            "qp 0x107",
        )],
    );
    let b = add(
        &mut m,
        1,
        None,
        vec![ep(
            1,
            EndpointKind::VerbsQp,
            Some(0),
            Some(0x108),
            "qp 0x108",
        )],
    );
    for k in 0..=40u64 {
        let t = T0 + k * 250 * MS;
        let n = k.min(8) * 100;
        let sent_a = if k > 8 { n + 1 } else { n };
        snap(
            &mut m,
            &a,
            k,
            t,
            vec![
                count(1, Op::VerbsRecv, n, n + 16),
                count(1, Op::VerbsSend, sent_a, 0),
            ],
        );
        snap(
            &mut m,
            &b,
            k,
            t,
            vec![
                count(1, Op::VerbsRecv, n, n + 16),
                count(1, Op::VerbsSend, n, 0),
            ],
        );
    }
    let at = at_of(&m, T0 + 10 * S);
    let w = waits(&at, WAIT_NS);
    assert_eq!(w.waited_on.len(), 1, "{w:?}");
    let x = &w.waited_on[0];
    assert_eq!((x.proc, x.silent_ns), (1, None));
    assert_eq!(
        text(&at, x),
        "pid 101 (node1) sent nothing 8.0s — waited on by pid 100 (QP 0x107: 16 receives posted)"
    );
}
