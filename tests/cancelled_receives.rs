//! A cancelled receive is neither a receive nor an error. Real programs post N tagged receives of
//! 4096 bytes for tags nobody sends and cancel each: UCX (`ucp_request_cancel`, the callback
//! says UCS_ERR_CANCELED) and libfabric over tcp;ofi_rxm and shm (`fi_cancel`, the error entry
//! says FI_ECANCELED). `sigmatop run --json` counts N posted buffers (N × 4096 bytes) and 0
//! receives, 0 bytes, no error (before: N receives of 0 bytes, each an error).

mod common;

use std::path::Path;

use common::{build_program, run_json, scratch, stdout_of};

const N: u64 = 7;

/// Runs `prog args` under `sigmatop run --json` and checks its one process's summary.
fn check(name: &str, prog: &Path, args: &[&str]) {
    let (out, v) = run_json(&scratch(name), prog, args);
    assert!(
        stdout_of(&out).contains(&format!(" {N} cancelled")),
        "{name}: {}",
        stdout_of(&out)
    );
    let p = &v["processes"][0];
    assert_eq!(p["posted"].as_u64(), Some(N), "{name}: {v}");
    assert_eq!(p["posted_bytes"].as_u64(), Some(N * 4096), "{name}: {v}");
    assert_eq!(p["rx_ops"].as_u64(), Some(0), "{name}: {v}");
    assert_eq!(p["rx_bytes"].as_u64(), Some(0), "{name}: {v}");
    assert_eq!(p.get("errors"), None, "{name}: no error: {v}");
}

#[test]
fn cancelled_ucx_receives_are_posted_buffers_only() {
    let prog = build_program("gcc", "ucx_cancel.c", "ucx_cancel", &["-lucp", "-lucs"]);
    check("ucx-cancel", &prog, &[&N.to_string()]);
}

#[test]
fn cancelled_libfabric_receives_are_posted_buffers_only() {
    let prog = build_program("gcc", "ofi_cancel.c", "ofi_cancel", &["-lfabric"]);
    for provider in ["tcp;ofi_rxm", "shm"] {
        check(
            &format!("ofi-cancel-{}", provider.replace(';', "-")),
            &prog,
            &[&N.to_string(), provider],
        );
    }
}
