//! A libfabric completion queue that sigmatop reopened in another format, read from inside a
//! hook. The program (tests/programs/ofi_cq_nested.c, tcp;ofi_rxm) asks for a
//! FI_CQ_FORMAT_CONTEXT queue (8-byte entries), which sigmatop opens as FI_CQ_FORMAT_MSG to read
//! the lengths; it reads that queue from a SIGALRM handler that runs while the thread blocks in
//! fi_cq_sread on another queue, i.e. inside sigmatop's wrapper of that read. The handler's two
//! 8-byte entries must hold the two contexts posted and the canary after them must be intact,
//! untraced and in every mode (before: the read was passed through as if it were the provider's
//! own, and the provider's 24-byte entries overwrote the canary).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{build_program, preload, scratch, spawn, stdout_of, wait_timeout};

#[test]
fn a_reformatted_queue_read_inside_a_hook_gets_the_programs_format() {
    let prog = build_program("gcc", "ofi_cq_nested.c", "ofi_cq_nested", &["-lfabric"]);
    for mode in [None, Some("aggregate"), Some("simple"), Some("full")] {
        let dir = scratch("ofi-cq-nested");
        let mut c = Command::new(&prog);
        c.arg("tcp;ofi_rxm");
        if let Some(m) = mode {
            c.env("LD_PRELOAD", preload())
                .env("SIGMATOP_MODE", m)
                .env("SIGMATOP_SOCKET_DIR", dir.join("sock"));
        } else {
            c.env_remove("LD_PRELOAD");
        }
        let out = wait_timeout(spawn(&mut c), Duration::from_secs(60));
        let text = stdout_of(&out);
        assert!(
            out.status.success() && text.contains("ofi_cq_nested ok contexts=2 canary=intact"),
            "mode {mode:?}: {:?}\n{text}\n{}",
            out.status,
            common::stderr_of(&out)
        );
    }
}
