//! What each workload's record must hold: events on disk, matched peers, counts computed from
//! the parameters, the one-sided and blocking workloads.

use super::*;

/// In simple and full mode, every operation posted is one event on disk: per endpoint and data
/// op, the events the on-disk reader finds and their bytes equal the operations the counters
/// hold (accepted operations and their bytes, or for a receive the buffers posted and their
/// size), with no ring overflow, no failed post and no refusal. The counters themselves are checked against the parameters by
/// [`check_counts`].
pub(crate) fn check_events(ctx: &str, p: &ProcessRecording) {
    let s = p.last_snapshot().expect("a snapshot");
    assert_eq!(s.drops.ring_full, 0, "{ctx}: ring overflow");
    let mut on_disk: BTreeMap<(u64, u8), (u64, u64)> = BTreeMap::new();
    for e in ondisk::process(&p.dir) {
        if Op::from_u8(e.op).is_some_and(data_op) {
            let n = on_disk.entry((e.ep, e.op)).or_default();
            n.0 += 1;
            n.1 += e.bytes;
            assert!(
                e.flags & flags::ERROR == 0,
                "{ctx}: pid {}: a failed post of {:?} on ep {}",
                p.identity.pid,
                Op::from_u8(e.op),
                e.ep
            );
        }
    }
    let mut counted: BTreeMap<(u64, u8), (u64, u64)> = BTreeMap::new();
    for c in &s.counts {
        let Some(op) = Op::from_u8(c.op) else {
            continue;
        };
        if !data_op(op) {
            continue;
        }
        assert_eq!(c.refused, 0, "{ctx}: pid {}: refused {c:?}", p.identity.pid);
        let (n, bytes) = if op.is_receive() {
            (c.posted, c.posted_bytes)
        } else {
            (c.ops, c.bytes)
        };
        if n > 0 {
            let e = counted.entry((c.ep as u64, c.op)).or_default();
            e.0 += n;
            e.1 += bytes;
        }
    }
    assert_eq!(
        on_disk, counted,
        "{ctx}: pid {}: events on disk per (endpoint, op) against the operations counted",
        p.identity.pid
    );
}

/// Every QP of `a` that carried traffic has an RTR peer (QPN, GID) that is a QP of `b` whose own
/// peer is that QP, and the peer hash is one of `b`'s own addresses.
pub(crate) fn check_matched(ctx: &str, a: &ProcessRecording, b: &ProcessRecording) {
    let busy: Vec<u32> = a
        .last_snapshot()
        .map(|s| s.counts.iter().map(|c| c.ep).collect())
        .unwrap_or_default();
    for qp in a
        .endpoints
        .iter()
        .filter(|e| e.kind == EndpointKind::VerbsQp && busy.contains(&e.id))
    {
        let rtr = a
            .updates
            .iter()
            .rfind(|u| u.id == qp.id && u.state == "RTR")
            .and_then(|u| u.peer.clone())
            .unwrap_or_else(|| {
                panic!(
                    "{ctx}: {} of pid {} carried traffic but has no RTR peer",
                    qp.label, a.identity.pid
                )
            });
        let pq = rtr.qpn.expect("peer qpn");
        assert!(rtr.gid.is_some(), "{ctx}: {} has no peer GID", qp.label);
        let other = b
            .endpoints
            .iter()
            .find(|e| e.kind == EndpointKind::VerbsQp && e.qpn == Some(pq))
            .unwrap_or_else(|| {
                panic!(
                    "{ctx}: peer QPN 0x{pq:x} of {} is no QP of pid {}",
                    qp.label, b.identity.pid
                )
            });
        let back = b
            .updates
            .iter()
            .rfind(|u| u.id == other.id && u.state == "RTR")
            .and_then(|u| u.peer.clone())
            .unwrap_or_else(|| panic!("{ctx}: peer {} has no RTR", other.label));
        assert_eq!(
            back.qpn, qp.qpn,
            "{ctx}: {} ↔ {} not mutual",
            qp.label, other.label
        );
        assert!(
            b.identity.own_addr_hashes.contains(&rtr.addr_hash),
            "{ctx}: {}'s peer hash is not an own address of pid {} ({})",
            qp.label,
            b.identity.pid,
            rtr.text
        );
    }
}

/// Checks the counters of one traced run of workload `w` against what [`P`] asked of it, QP by
/// QP. `srv` and `cli` are the processes of its record.
pub(crate) fn check_counts(w: &str, mode: &str, srv: &ProcessRecording, cli: &ProcessRecording) {
    let ctx = format!("{w}/{mode}");
    let full = mode == "full";
    match w {
        "rc_pingpong" => {
            // rdma-core libibverbs/examples/rc_pingpong.c: each side sends n messages of `size`
            // and receives the peer's n; it posts rx_depth (500) receives of `size` up front and
            // reposts only once fewer than 2 remain (never, for n < 499).
            let (n, sz) = (P.rc_n, P.rc_s);
            let want = [om(&[
                (Op::VerbsSend, done(n, n * sz)),
                (Op::VerbsRecv, recv(n, n * sz, 500, sz)),
            ])];
            assert_eq!(qps(srv), want, "{ctx} server QP");
            assert_eq!(qps(cli), want, "{ctx} client QP");
            if full {
                assert_eq!(
                    completions(srv),
                    2 * n,
                    "{ctx} server: n sends + n receives"
                );
                assert_eq!(
                    completions(cli),
                    2 * n,
                    "{ctx} client: n sends + n receives"
                );
            }
        }
        "read_bw" => {
            // perftest read_bw: the client posts n RDMA reads of `size` on its one QP; the server
            // posts nothing there (keys go over TCP).
            let (n, sz) = (P.rb_n, P.rb_s);
            assert_eq!(
                qps(cli),
                [om(&[(Op::VerbsRead, done(n, n * sz))])],
                "{ctx} client QP"
            );
            assert_eq!(
                qps(srv),
                Vec::<OpMap>::new(),
                "{ctx}: the server posts nothing"
            );
            if full {
                // Signaled once per CQ-moderation (100) reads.
                assert_eq!(completions(cli), n / 100, "{ctx} client completions");
                assert_eq!(completions(srv), 0, "{ctx} server completions");
            }
        }
        "send_lat" => {
            // perftest send_lat: n ping-pong sends of `size` each way, n arriving at each side;
            // each side posts rx_depth = min(512, n) (rounded up to even) receives of `size` up
            // front and reposts only while more than rx_depth are still to come (never, n ≤ 512).
            let (n, sz) = (P.sl_n, P.sl_s);
            let rx = n.min(512).div_ceil(2) * 2;
            let want = [om(&[
                (Op::VerbsSend, done(n, n * sz)),
                (Op::VerbsRecv, recv(n, n * sz, rx, sz)),
            ])];
            assert_eq!(qps(srv), want, "{ctx} server QP");
            assert_eq!(qps(cli), want, "{ctx} client QP");
            if full {
                assert_eq!(completions(srv), 2 * n, "{ctx} server: every WR completes");
                assert_eq!(completions(cli), 2 * n, "{ctx} client: every WR completes");
            }
        }
        "put_bw" => {
            // ucx_perftest UCT put_bw (-w 0: no warm-up; uct_tests.cc send_stream_req_uni):
            // n RDMA writes of `size` (put_short, inline), then one "sentinel" put of the same
            // length. Nothing is sent: no receive completes on either side.
            let (n, sz) = (P.pb_n, P.pb_s);
            assert_eq!(
                qps(cli),
                [om(&[(Op::VerbsWrite, done(n + 1, (n + 1) * sz))])],
                "{ctx} client QP"
            );
            assert_eq!(
                qps(srv),
                Vec::<OpMap>::new(),
                "{ctx}: the server posts nothing"
            );
            assert_eq!(ucx_srq(&ctx, srv), C::default(), "{ctx} server SRQ");
            assert_eq!(ucx_srq(&ctx, cli), C::default(), "{ctx} client SRQ");
        }
        "am_lat" => {
            // ucx_perftest UCT am_lat: n active messages each way of `size` bytes plus the
            // 1-byte rc_verbs AM header (uct_rc_hdr_t), each received through the SRQ; at the end
            // one uct_ep_flush posts a 0-byte RDMA write to collect the unsignaled sends.
            let (n, sz) = (P.al_n, P.al_s);
            for p in [srv, cli] {
                let side = format!("{ctx} pid {}", p.identity.pid);
                assert_eq!(
                    qps(p),
                    [om(&[
                        (Op::VerbsSend, done(n, n * (sz + 1))),
                        (Op::VerbsWrite, done(1, 0))
                    ])],
                    "{side} QP"
                );
                assert_eq!(
                    ucx_srq(&side, p),
                    done(n, n * (sz + 1)),
                    "{side} SRQ: n AMs arrived"
                );
            }
        }
        "write_bw" => {
            // perftest write_bw -R: n RDMA writes of `size` on the client's data QP (rdma_cm
            // connected); the server posts nothing on its data QP. The other QP pair is perftest's
            // rdma_cm exchange channel: SEND / RECV of its own messages, whose number and sizes are
            // perftest's, not the workload's: what one side sent arrived at the other, each side
            // keeping one receive posted ahead.
            let (n, sz) = (P.wb_n, P.wb_s);
            let data = om(&[(Op::VerbsWrite, done(n, n * sz))]);
            let c = qps(cli);
            assert_eq!(
                c.len(),
                2,
                "{ctx}: the client's data and exchange QPs: {c:?}"
            );
            assert!(c.contains(&data), "{ctx}: the client's data QP: {c:?}");
            let s = qps(srv);
            assert_eq!(s.len(), 1, "{ctx}: the server's exchange QP only: {s:?}");
            let (cx, sx) = (c.iter().find(|q| **q != data).expect("exchange QP"), &s[0]);
            for (a, b, dir) in [(cx, sx, "client→server"), (sx, cx, "server→client")] {
                assert_eq!(
                    a.keys()
                        .chain(b.keys())
                        .filter(|k| !["SEND", "RECV"].contains(k))
                        .count(),
                    0,
                    "{ctx}: exchange QPs carry SEND / RECV only: {a:?} {b:?}"
                );
                let (tx, rx) = (a["SEND"], b["RECV"]);
                assert!(tx.ops > 0, "{ctx}: {dir}: exchange messages");
                assert_eq!(
                    (rx.ops, rx.bytes, rx.errors),
                    (tx.ops, tx.bytes, 0),
                    "{ctx}: {dir}: every exchange message sent arrived"
                );
                assert_eq!(
                    rx.posted,
                    rx.ops + 1,
                    "{ctx}: {dir}: one receive posted ahead"
                );
            }
        }
        "rping" => {
            // librdmacm examples/rping.c, -C c, -S size: per ping the client sends two 16-byte
            // rping_rdma_info advertisements (its source, then its sink buffer) and the server
            // answers each with one; both post one 16-byte receive up front and repost one per
            // completion (2c + 1 posted, the last flushed at disconnect: 2c arrive). The server
            // RDMA-reads the client's `size`-byte buffer and RDMA-writes it back, c times each.
            let (c, sz) = (P.rp_c, P.rp_s);
            let both = [
                (Op::VerbsSend, done(2 * c, 2 * c * 16)),
                (Op::VerbsRecv, recv(2 * c, 2 * c * 16, 2 * c + 1, 16)),
            ];
            let mut server = both.to_vec();
            server.extend([
                (Op::VerbsRead, done(c, c * sz)),
                (Op::VerbsWrite, done(c, c * sz)),
            ]);
            assert_eq!(qps(srv), [om(&server)], "{ctx} server QP");
            assert_eq!(qps(cli), [om(&both)], "{ctx} client QP");
            if full {
                // Every WR completes; the last posted receive is flushed at disconnect.
                assert_eq!(completions(srv), 6 * c + 1, "{ctx} server completions");
                assert_eq!(completions(cli), 4 * c + 1, "{ctx} client completions");
            }
        }
        "fi_pingpong" => check_fi_pingpong(&ctx, mode, P.fp_i, P.fp_s, [srv, cli]),
        "fi_close" => check_fi_pingpong(&ctx, mode, P.fc_i, FC_S, [srv, cli]),
        "io_demo" => check_io_demo(&ctx, srv, cli),
        _ => unreachable!(),
    }
}

/// UCX io_demo over rc_verbs, `-o write -i i -d d -r r` (test/apps/iodemo, UCX 1.13, TAG API):
/// - connecting, each side stream-sends its 4-byte connection id and stream-receives the peer's;
/// - per iteration the client tag-sends an r-byte IO_WRITE message and the d bytes of data; the
///   server receives both (its r-byte IO-message receive is posted on the worker and reposted
///   after each one, a d-byte data receive posted per request) and answers with an r-byte
///   IO_WRITE_COMP message, which the client receives the same way;
/// - at exit the client cancels its outstanding IO-message receive (a posted buffer, neither a
///   receive nor an error);
///   the server is killed with its own still posted.
///
/// Below UCP, every message travels as an rc_verbs SEND into the peer's SRQ: what arrived in one
/// process's SRQ is exactly what the other's QP sent, and is exactly
/// - the tag messages above, each with its 8-byte tag and the 1-byte AM header;
/// - the 4-byte stream message (connection id), with its 8-byte endpoint id and AM header;
/// - UCP's wire-up over the new lanes: two messages each way. Their sizes are not a function
///   of the parameters (they carry packed worker addresses); they are pinned here for UCX 1.13
///   on the guest's rxe device, measured in 6 of 6 traced runs over two boots, all modes alike:
///   107 bytes into the server's SRQ, 182 into the client's. A new UCX or guest device
///   re-measures them (the failure prints what arrived).
pub(crate) fn check_io_demo(ctx: &str, srv: &ProcessRecording, cli: &ProcessRecording) {
    let (i, d, r) = (P.io_i, P.io_d, P.io_r);
    let conn = [
        (Op::UcxStreamSend, done(1, 4)),
        (Op::UcxStreamRecv, recv(1, 4, 1, 4)),
    ];
    let mut s_ep = conn.to_vec();
    s_ep.push((Op::UcxTagSend, done(i, i * r)));
    let mut c_ep = conn.to_vec();
    c_ep.push((Op::UcxTagSend, done(2 * i, i * (r + d))));
    assert_eq!(
        eps(srv, EndpointKind::UcpEp),
        [om(&s_ep)],
        "{ctx} server ucp_ep"
    );
    assert_eq!(
        eps(cli, EndpointKind::UcpEp),
        [om(&c_ep)],
        "{ctx} client ucp_ep"
    );
    let s_rx = C {
        ops: 2 * i,
        bytes: i * (r + d),
        posted: 2 * i + 1,
        posted_bytes: (i + 1) * r + i * d,
        ..C::default()
    };
    let c_rx = C {
        ops: i,
        bytes: i * r,
        posted: i + 1,
        posted_bytes: (i + 1) * r,
        ..C::default()
    };
    assert_eq!(
        eps(srv, EndpointKind::UcpWorker),
        [om(&[(Op::UcxTagRecv, s_rx)])],
        "{ctx} server ucp_worker"
    );
    assert_eq!(
        eps(cli, EndpointKind::UcpWorker),
        [om(&[(Op::UcxTagRecv, c_rx)])],
        "{ctx} client ucp_worker"
    );
    // (process, its peer, UCP tag messages it received, their payload, wire-up bytes)
    for (p, peer, msgs, payload, wireup) in [
        (srv, cli, 2 * i, i * (r + d), 107),
        (cli, srv, i, i * r, 182),
    ] {
        let side = format!("{ctx} pid {}", p.identity.pid);
        let arrived = ucx_srq(&side, p);
        let peer_qps = qps(peer);
        assert_eq!(peer_qps.len(), 1, "{side}: the peer's one QP: {peer_qps:?}");
        let sent = peer_qps[0].get("SEND").copied().unwrap_or_default();
        assert_eq!(
            (arrived.ops, arrived.bytes),
            (sent.ops, sent.bytes),
            "{side}: the SRQ received exactly what the peer's QP sent"
        );
        let stream = 4 + 9;
        assert_eq!(
            (arrived.ops, arrived.bytes),
            (msgs + 1 + 2, payload + msgs * 9 + stream + wireup),
            "{side}: the {msgs} tag messages ({payload} bytes + 9 each), the stream message \
             ({stream} bytes) and two wire-up messages ({wireup} bytes)"
        );
        assert!(
            peer_qps[0]
                .iter()
                .all(|(k, c)| *k == "SEND" || (*k == "RDMA_WRITE" && c.bytes == 0)),
            "{side}: the peer's QP sends, and posts only 0-byte flush writes: {peer_qps:?}"
        );
    }
}

/// The one-sided operations of a traced run, attributed by the correlator to the process whose
/// memory region they hit (`ibv_reg_mr` records: address range and rkey), against what each
/// program was asked to do:
/// - ib_write_bw -R: the client's n RDMA writes of `size` land in the server's buffer;
/// - ib_read_bw: the client's n RDMA reads of `size` read the server's buffer;
/// - rping: the server RDMA-reads the client's `size`-byte buffer and RDMA-writes it back c times;
/// - ucx_perftest put_bw over rc_verbs: the client's n + 1 puts of `size` bytes hit the server's
///   registered receive buffer.
///
/// Every one-sided operation is attributed (none without a region, none ambiguous), through the
/// QP's peer, and the process matrix carries the bytes in the direction they moved: writes from
/// the issuer to the region's owner, reads from the owner to the issuer, on top of the SENDs.
pub(crate) fn check_one_sided(w: &str, mode: &str, run: &Run) {
    use sigmatop::correlate::{Correlation, NoSink, RunOptions};
    if !matches!(w, "write_bw" | "read_bw" | "rping" | "put_bw") {
        return;
    }
    let ctx = format!("{w}/{mode} one-sided");
    let rec = Recording::open(&[run.dir.join("rec")]).expect("open record");
    let corr = Correlation::new(&rec);
    let an = corr.run(&RunOptions::default(), &mut NoSink);
    let o = &an.one_sided;
    if mode == "aggregate" {
        // No events on disk: nothing to attribute per operation.
        assert_eq!(o.ops, 0, "{ctx}: {o:?}");
        return;
    }
    let mut by_pid: Vec<(u32, u32)> = rec
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.identity.pid, i as u32))
        .collect();
    by_pid.sort();
    let (srv, cli) = (by_pid[0].1, by_pid[1].1);
    // The SEND bytes of perftest's write_bw exchange channel (its own messages, not the
    // workload's): taken as what arrived at the other side, which check_counts matched to what
    // was sent.
    let exchange_rx = |p: u32| -> u64 {
        qps(&rec.processes[p as usize])
            .iter()
            .filter_map(|q| q.get("RECV"))
            .map(|c| c.bytes)
            .sum()
    };
    // (issuer, target, one-sided ops, their bytes, bytes server→client, client→server)
    let (issuer, target, ops, bytes, sc, cs) = match w {
        "write_bw" => {
            let b = P.wb_n * P.wb_s;
            (cli, srv, P.wb_n, b, exchange_rx(cli), b + exchange_rx(srv))
        }
        "read_bw" => {
            let b = P.rb_n * P.rb_s;
            (cli, srv, P.rb_n, b, b, 0)
        }
        "rping" => {
            // Reads move the client's buffer to the server; writes and the server's 2c
            // advertisements go to the client, the client's 2c advertisements to the server.
            let (c, sz) = (P.rp_c, P.rp_s);
            let adv = 2 * c * 16;
            (srv, cli, 2 * c, 2 * c * sz, c * sz + adv, c * sz + adv)
        }
        _ => {
            let b = (P.pb_n + 1) * P.pb_s;
            (cli, srv, P.pb_n + 1, b, 0, b)
        }
    };
    assert_eq!((o.ops, o.bytes), (ops, bytes), "{ctx}: {o:?}");
    assert_eq!(
        (o.attributed_ops, o.attributed_bytes, o.via_qp_peer_ops),
        (ops, bytes, ops),
        "{ctx}: every one-sided operation attributed through its QP's peer: {o:?}"
    );
    assert_eq!((o.no_region_ops, o.ambiguous_ops), (0, 0), "{ctx}: {o:?}");
    for e in &o.endpoints {
        assert_eq!(
            e.process, issuer,
            "{ctx}: only the issuer does one-sided ops: {e:?}"
        );
        assert_eq!(e.by_proc.len(), 1, "{ctx}: one target: {e:?}");
        assert_eq!(e.by_proc.get(&target), Some(&e.bytes), "{ctx}: {e:?}");
        assert_eq!(e.unattributed_bytes, 0, "{ctx}: {e:?}");
    }
    // The regions hit are the target's, and they took every byte.
    let hit: u64 = an
        .mrs
        .entries
        .iter()
        .filter(|m| m.ops > 0)
        .inspect(|m| assert_eq!(m.process, target, "{ctx}: region of the issuer hit: {m:?}"))
        .map(|m| m.bytes)
        .sum();
    assert_eq!(hit, bytes, "{ctx}: bytes into regions");
    // Process matrix (JSON export): one-sided bytes in the direction they moved, plus SENDs.
    let ex = sigmatop::export::json::build(
        &corr,
        &an,
        sigmatop::agg::Model::from_recording(&rec).report(),
    );
    // The JSON names the target per endpoint.
    let target_label = corr.proc_label(target);
    for e in &ex.one_sided.endpoints {
        assert_eq!(
            e.target.as_deref(),
            Some(target_label.as_str()),
            "{ctx}: {e:?}"
        );
    }
    let pm = &ex.process_matrix.bytes;
    let (srv_u, cli_u) = (srv as usize, cli as usize);
    assert_eq!(
        (pm[srv_u][cli_u], pm[cli_u][srv_u]),
        (sc, cs),
        "{ctx}: process matrix (server→client, client→server) {:?}",
        ex.process_matrix
    );
}

/// Blocking calls. rping waits on a completion channel in its CQ thread (librdmacm
/// examples/rping.c cq_thread: `ibv_get_cq_event`, `ibv_req_notify_cq`, poll until empty, ack);
/// sigmatop counts each call in every mode, and in simple and full mode records one event per
/// call with the time it blocked (`Op::blocks`), drawn as one slice on the thread's "blocking
/// calls" track of the Perfetto export.
///
/// Expected, independently of sigmatop's reader and exporter:
/// - from rping's -C c and its code: its CQ thread waits at least once, and each call that
///   returns consumed one completion event, which the CQ raises only for a completion added
///   after the previous call re-armed it: at most one call per completion, 6c + 1 on the server
///   and 4c + 1 on the client (the flushed receive included; check_counts). Which completions
///   share a wake is timing (the thread's poll loop can find a whole ping's completions while it
///   reposts), so the count varies from run to run within those bounds. In full mode
///   notification was requested once at set-up and once per call that returned:
///   req_notify_cq (OTHER) = calls + 1.
/// - from the on-disk reader here ([`ondisk`]): one event per call; the calls that blocked are
///   the export's blocking slices, and the Perfetto trace, parsed with the official schema,
///   holds one instant per event on disk, one get_cq_event instant per call, and as many
///   slices as blocked calls (plus the phase slices), balanced.
pub(crate) fn check_blocking(w: &str, mode: &str, run: &Run) {
    let ctx = format!("{w}/{mode} blocking");
    let rec = Recording::open(&[run.dir.join("rec")]).expect("open record");
    let mut procs: Vec<&ProcessRecording> = rec.processes.iter().collect();
    procs.sort_by_key(|p| p.identity.pid);
    let (mut events_total, mut blocked_total, mut cq_events) = (0u64, 0u64, 0u64);
    for (i, p) in procs.iter().enumerate() {
        let side = format!("{ctx} pid {}", p.identity.pid);
        let calls = ops_of(p, Op::VerbsCqEvent);
        if w == "rping" {
            let c = P.rp_c;
            let (lo, hi) = if i == 0 {
                (1, 6 * c + 1)
            } else {
                (1, 4 * c + 1)
            };
            assert!(
                (lo..=hi).contains(&calls),
                "{side}: {calls} get_cq_event calls returned, rping -C {c} implies {lo}..={hi}"
            );
            if mode == "full" {
                assert_eq!(
                    ops_of(p, Op::VerbsOther),
                    calls + 1,
                    "{side}: one req_notify_cq at set-up and one per wake"
                );
            }
        }
        if mode == "aggregate" {
            continue;
        }
        let evs = ondisk::process(&p.dir);
        events_total += evs.len() as u64;
        let cq: Vec<&ondisk::Ev> = evs
            .iter()
            .filter(|e| e.op == Op::VerbsCqEvent as u8)
            .collect();
        assert_eq!(cq.len() as u64, calls, "{side}: one event per call");
        cq_events += calls;
        // A call that returned an event carries the time it blocked; a failed one (EAGAIN on a
        // non-blocking channel, as UCX uses it) none, and is drawn as no slice.
        assert!(
            cq.iter()
                .all(|e| (e.addr > 0) == (e.flags & flags::ERROR == 0)),
            "{side}: the time blocked, on the calls that returned an event"
        );
        let blocked = evs
            .iter()
            .filter(|e| e.addr > 0 && Op::from_u8(e.op).is_some_and(Op::blocks))
            .count() as u64;
        if w == "rping" {
            // rping's channel blocks: every call that returned had waited.
            assert_eq!(blocked, calls, "{side}: every call blocked");
        }
        blocked_total += blocked;
    }
    if mode == "aggregate" || blocked_total == 0 {
        return;
    }
    let out = run.dir.join("export");
    let _ = std::fs::create_dir_all(&out);
    let (j, _) = util::export(&[run.dir.join("rec")], &out);
    assert_eq!(
        j["perfetto"]["blocking_slices"], blocked_total,
        "{ctx}: a slice per blocking call: {}",
        j["perfetto"]
    );
    // check_perfetto.py fails unless the trace holds exactly `events_total` operation instants.
    let sum = util::check_perfetto(&out.join("trace.pftrace"), events_total);
    assert_eq!(sum["errors"], 0, "{ctx}: {sum}");
    assert_eq!(
        sum["ops_by_name"]["ibverbs.get_cq_event"]
            .as_u64()
            .unwrap_or(0),
        cq_events,
        "{ctx}: {sum}"
    );
    assert_eq!(
        sum["slices"].as_u64(),
        Some(blocked_total + j["perfetto"]["phase_slices"].as_u64().unwrap_or(0)),
        "{ctx}: {sum}"
    );
}
