//! 64 threads of UCX and of libfabric, each with its own context and endpoints: exact counts.

use super::*;

#[test]
fn sixty_four_ucx_threads_exact_and_nothing_lost() {
    // 2,000 messages a thread: 4,000 events, under the 64 Ki-event ring, so nothing may be lost.
    let (threads, n) = (64u64, 2000u64);
    let dir = common::scratch("ucx-threads");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(
        &trace,
        "sm,self",
        &["threads", &threads.to_string(), &n.to_string()],
    );
    assert_eq!(
        common::stdout_of(&out).trim(),
        format!("threads {threads} messages {n} each")
    );
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    let p = &procs[0];
    // Thread i sent n messages of (i+1)·32 bytes on its own endpoint, received on its own worker.
    let want: Vec<(u64, u64)> = (1..=threads).map(|i| (n, n * i * 32)).collect();
    assert_eq!(per_endpoint(p, Op::UcxTagSend), want, "sends per endpoint");
    assert_eq!(per_endpoint(p, Op::UcxTagRecv), want, "receives per worker");
    let all = n * 32 * (1..=threads).sum::<u64>();
    assert_ucx_messages(p, threads * n, all / (threads * n), "64 threads");
    assert_eq!(common::op(&common::totals(p), "tag_send").1, all);
    let drops = p.end.expect("clean end").1;
    assert_eq!(drops.total_events_lost(), 0);
    assert_eq!(
        p.thread_ends.len() as u64,
        threads,
        "every sender closed its event file"
    );
    for (tid, events) in &p.thread_ends {
        assert_eq!(
            *events,
            2 * n,
            "thread {tid}: one event per send and per receive"
        );
    }
}

#[test]
fn sixty_four_libfabric_threads_exact_and_nothing_lost() {
    let (threads, n) = (64u64, 1000u64);
    let dir = common::scratch("ofi-threads");
    let trace = Trace::new("simple", &dir);
    let mut cmd = Command::new(ofi_threads());
    cmd.args(["shm", &threads.to_string(), &n.to_string()]);
    trace.apply(&mut cmd);
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    // "... eagain send X recv Y tsend Z trecv W": calls the provider refused with -FI_EAGAIN
    // (retried); sigmatop counts them as refused, apart from the operations.
    let line = common::stdout_of(&out);
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words[..6],
        [
            "threads",
            &threads.to_string(),
            "messages",
            &n.to_string(),
            "each",
            "eagain"
        ],
        "{line}"
    );
    let eagain = |name: &str| -> u64 {
        let at = words.iter().position(|w| *w == name).expect("count");
        words[at + 1].parse().expect("number")
    };
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    let p = &procs[0];
    // Thread i: n sends, n receives, n tagged sends, n tagged receives of (i+1)·16 bytes.
    let want: Vec<(u64, u64)> = (1..=threads).map(|i| (n, n * i * 16)).collect();
    let bytes = n * 16 * (1..=threads).sum::<u64>();
    let mut events = 0;
    for (op, name) in [
        (Op::OfiSend, "send"),
        (Op::OfiRecv, "recv"),
        (Op::OfiTSend, "tsend"),
        (Op::OfiTRecv, "trecv"),
    ] {
        assert_eq!(per_endpoint(p, op), want, "{name} per endpoint");
        let (ok, failed, refused) = ok_failed_refused(p, op);
        assert_eq!(ok, (threads * n, bytes), "{name}");
        assert_eq!(failed, 0, "{name}: failed operations");
        assert_eq!(refused, eagain(name), "{name}: -FI_EAGAIN returns");
        events += threads * n + refused;
    }
    let t = common::totals(p);
    assert_eq!(
        t.events_on_disk, events,
        "one event per call, refused ones too"
    );
    assert_eq!(p.end.expect("clean end").1.total_events_lost(), 0);
    assert_eq!(p.thread_ends.len() as u64, threads);
}
