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
        // Past the next flush (every 100 ms) and snapshot (every 250 ms) after the last message.
        std::thread::sleep(Duration::from_millis(700));
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.0.id() as i32, sig) };
        let st = child.0.wait().expect("wait");
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
