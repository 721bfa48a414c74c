use super::*;
use crate::nccl::format;

fn rec(tsc: u64, k: u8, t: u8, id: u64, parent: u64, p: &[u64]) -> Rec {
    let mut r = Rec::new(tsc, 1, k, t, 0);
    r.0[2] = id;
    r.0[3] = parent;
    r.0[4] = 1;
    for (i, v) in p.iter().enumerate() {
        r.0[5 + i] = *v;
    }
    r
}

/// Two AllReduce of 2048 floats: the first completes when its proxy operation stops (after
/// the call's own stop), the second stays open and is the oldest open one.
#[test]
fn a_call_completes_when_its_proxy_operations_stop() {
    let coll = format::pack_coll(1, 7, 1, 2, 2, 0);
    let mut t = Tracker::new();
    let mut clk = Rec::new(0, 1, kind::CLOCK, 0, 0);
    clk.0[5] = 0;
    clk.0[6] = 1_000_000_000;
    t.push(&clk);
    let mut clk2 = Rec::new(1_000_000, 1, kind::CLOCK, 0, 0);
    clk2.0[5] = 1_000_000;
    clk2.0[6] = 1_001_000_000;
    t.push(&clk2);
    t.push(&rec(10, kind::INIT, 0, 0, 0, &[0xabc, 2, 2, 1]));
    t.push(&rec(
        100,
        kind::START,
        etype::COLL,
        0x11,
        0,
        &[5, 2048, coll],
    ));
    t.push(&rec(150, kind::START, etype::PROXY_OP, 0x23, 0x11, &[]));
    t.push(&rec(160, kind::STOP, etype::COLL, 0x11, 0, &[]));
    assert_eq!(t.live().comms[0].completed, 0);
    t.push(&rec(400, kind::STOP, etype::PROXY_OP, 0x23, 0, &[]));
    t.push(&rec(
        500,
        kind::START,
        etype::COLL,
        0x31,
        0,
        &[6, 2048, coll],
    ));
    t.push(&rec(510, kind::START, etype::PROXY_OP, 0x43, 0x31, &[]));
    t.push(&rec(520, kind::STOP, etype::PROXY_OP, 0x99, 0, &[]));
    let l = t.live();
    let c = &l.comms[0];
    assert_eq!((c.comm_id, c.nranks, c.rank), (0xabc, 2, 1));
    assert_eq!((c.started, c.completed, c.last_completed), (2, 1, Some(5)));
    assert_eq!(c.rows.len(), 1);
    let r = &c.rows[0];
    assert_eq!((r.count, r.bytes, r.open, r.time_ns), (1, 8192, 1, 300));
    assert_eq!(
        c.oldest_open,
        Some(CollAt {
            seq: 6,
            func: 1,
            start_ns: 1_000_000_500
        })
    );
    assert_eq!(c.recent, vec![(5, 1_000_000_100), (6, 1_000_000_500)]);
    assert_eq!(l.untracked, 1);
}

/// A proxy operation's oldest step's state and the QP of its post, as `waits` says them;
/// point-to-point calls counted per lane, started and completed.
#[test]
fn waits_follow_the_steps_and_lanes_count_point_to_point_calls() {
    let coll = format::pack_coll(1, 7, 1, 2, 2, 0);
    let mut t = Tracker::new();
    let mut clk = Rec::new(0, 1, kind::CLOCK, 0, 0);
    clk.0[6] = 1_000_000_000;
    t.push(&clk);
    let mut clk2 = Rec::new(1_000_000, 1, kind::CLOCK, 0, 0);
    clk2.0[5] = 1_000_000;
    clk2.0[6] = 1_001_000_000;
    t.push(&clk2);
    t.push(&rec(10, kind::INIT, 0, 0, 0, &[0xabc, 3, 3, 1]));
    t.push(&rec(
        100,
        kind::START,
        etype::COLL,
        0x11,
        0,
        &[5, 2048, coll],
    ));
    // ProxyOp: pid, channel 1, peer 2, 8 steps, chunk, send.
    t.push(&rec(
        110,
        kind::START,
        etype::PROXY_OP,
        0x23,
        0x11,
        &[9, 1, 2, 8, 0, 1],
    ));
    t.push(&rec(120, kind::START, etype::PROXY_STEP, 0x34, 0x23, &[0]));
    let st = |tsc: u64, s: u8, ep: u64| {
        let mut r = Rec::new(tsc, 1, kind::STATE, etype::PROXY_STEP, s);
        r.0[2] = 0x34;
        r.0[6] = ep;
        r
    };
    t.push(&st(130, state::SEND_PEER_WAIT, 0));
    let w = t.waits();
    let c = &w.comms[0];
    assert_eq!(c.call.map(|k| (k.p2p, k.seq)), Some((false, 5)));
    assert_eq!(
        c.waits,
        vec![OpWait {
            channel: 1,
            peer: 2,
            send: true,
            state: state::SEND_PEER_WAIT,
            since_ns: 1_000_000_130,
            ep: 0,
            steps_done: 0,
            steps: 8,
        }]
    );
    t.push(&st(140, state::SEND_WAIT, 7));
    let w = t.waits();
    assert_eq!(
        (w.comms[0].waits[0].state, w.comms[0].waits[0].ep),
        (state::SEND_WAIT, 7)
    );
    t.push(&rec(150, kind::STOP, etype::PROXY_STEP, 0x34, 0, &[]));
    let o = t.waits().comms[0].waits[0];
    assert_eq!((o.state, o.steps_done, o.since_ns), (0, 1, 1_000_000_150));
    // A Send to rank 0 with its proxy operation: one started in its lane, open, then done.
    let p2p = format::pack_coll(10, 7, 255, 255, 1, 0);
    let mut send = rec(200, kind::START, etype::P2P, 0x51, 0, &[0, 64, p2p, 0]);
    send.0[4] = 1;
    t.push(&send);
    t.push(&rec(
        210,
        kind::START,
        etype::PROXY_OP,
        0x63,
        0x51,
        &[9, 0, 0, 1, 0, 1],
    ));
    let w = t.waits();
    let l = w.comms[0].lanes[0];
    assert_eq!((l.func, l.peer, l.started, l.completed), (10, 0, 1, 0));
    assert_eq!(l.oldest_open_ns, 1_000_000_200);
    assert_eq!((w.comms[0].p2p_started, w.comms[0].p2p_completed), (1, 0));
    t.push(&rec(220, kind::STOP, etype::P2P, 0x51, 0, &[]));
    t.push(&rec(230, kind::STOP, etype::PROXY_OP, 0x63, 0, &[]));
    let w = t.waits();
    let l = w.comms[0].lanes[0];
    assert_eq!((l.started, l.completed, l.oldest_open_ns), (1, 1, 0));
    assert_eq!(w.comms[0].p2p_completed, 1);
}
