//! Signals and exits: the record reads back, cut or complete; the program's handlers run.

use super::*;

#[test]
fn signals_and_exits_leave_readable_records() {
    let n = 5000u64;
    for (sig, name) in [
        (libc::SIGTERM, "sigterm"),
        (libc::SIGKILL, "sigkill"),
        (libc::SIGABRT, "abort"),
    ] {
        let dir = common::scratch(name);
        let trace = Trace::new("simple", &dir);
        let mut child = staying(&trace, n);
        // Until the record on disk holds every message: a snapshot (every 250 ms) counting all
        // n sends and receives, and all 2n events flushed (every 100 ms).
        common::wait_until(
            &format!(
                "{name}: {n} sends and receives and {} events on disk",
                2 * n
            ),
            LIMIT,
            || {
                let rec = Recording::open(std::slice::from_ref(&trace.record))
                    .map_err(|e| format!("the record does not open yet: {e}"))?;
                let [p] = &rec.processes[..] else {
                    return Err(format!("{} processes recorded", rec.processes.len()));
                };
                let ops = |op: Op| -> u64 {
                    p.last_snapshot()
                        .map(|s| {
                            s.counts
                                .iter()
                                .filter(|c| c.op == op as u8)
                                .map(|c| c.ops)
                                .sum()
                        })
                        .unwrap_or(0)
                };
                let mut probs = Vec::new();
                let seen = (
                    ops(Op::UcxTagSend),
                    ops(Op::UcxTagRecv),
                    p.read_all_events(&mut probs).len() as u64,
                );
                if seen == (n, n, 2 * n) {
                    Ok(())
                } else {
                    Err(format!("(sends, receives, events on disk) = {seen:?}"))
                }
            },
        );
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.0.id() as i32, sig) };
        let st = common::wait_until(&format!("the program to die of {name}"), LIMIT, || {
            child
                .0
                .try_wait()
                .expect("wait")
                .ok_or("still running".to_string())
        });
        assert!(!st.success(), "{name}");
        let procs = common::processes(&trace);
        assert_eq!(procs.len(), 1, "{name}");
        assert!(procs[0].is_cut(), "{name}: marked as cut");
        assert_ucx_messages(&procs[0], n, 64, name);
    }
    // exit() from inside a signal handler runs the normal exit path: a complete record.
    let dir = common::scratch("handler-exit");
    let trace = Trace::new("simple", &dir);
    let out = run_ucx(&trace, "tcp", &["handler-exit", "3000"]);
    assert_eq!(out.status.code(), Some(7));
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    assert!(!procs[0].is_cut());
    assert_ucx_messages(&procs[0], 3000, 64, "exit from a handler");
    // The program's own handlers are untouched.
    let dir = common::scratch("own-handler");
    let out = run_ucx(&Trace::new("simple", &dir), "tcp", &["own-handler", "10"]);
    assert_eq!(common::stdout_of(&out).trim(), "handler ran 1");
}
