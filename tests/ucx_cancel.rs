//! A cancelled receive is neither a receive nor an error: a UCX program posts 7 tagged receives
//! of 4096 bytes and cancels each (`ucp_request_cancel`, the callback says UCS_ERR_CANCELED);
//! `sigmatop run --json` counts 7 posted buffers (28,672 bytes) and 0 receives, 0 bytes, 0 errors
//! (before: 7 receives of 0 bytes, each an error).

mod common;

use common::{build_program, scratch, sigmatop_bin, stderr_of, stdout_of};

const N: u64 = 7;

#[test]
fn cancelled_receives_are_posted_buffers_only() {
    let prog = build_program("gcc", "ucx_cancel.c", "ucx_cancel", &["-lucp", "-lucs"]);
    let dir = scratch("ucx-cancel");
    let json = dir.join("summary.json");
    let out = std::process::Command::new(sigmatop_bin())
        .arg("run")
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(&prog)
        .arg(N.to_string())
        .env("UCX_TLS", "tcp")
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sigmatop run");
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stdout_of(&out).contains(&format!("ucx_cancel {N} cancelled")),
        "{}",
        stdout_of(&out)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary written")).expect("JSON");
    let p = &v["processes"][0];
    assert_eq!(p["exe"], "ucx_cancel", "{v}");
    assert_eq!(p["posted"].as_u64(), Some(N), "{v}");
    assert_eq!(p["posted_bytes"].as_u64(), Some(N * 4096), "{v}");
    assert_eq!(p["rx_ops"].as_u64(), Some(0), "{v}");
    assert_eq!(p["rx_bytes"].as_u64(), Some(0), "{v}");
    assert_eq!(p.get("errors"), None, "no error: {v}");
}
