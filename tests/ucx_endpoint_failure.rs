//! A UCX endpoint whose peer dies: tests/programs/ucx_peer_fail.c connects a client to a forked
//! server over UCX's client-server API (tcp, peer error handling), sends one 64-byte message, and
//! the server ends without closing anything, as a crashed rank does. UCX calls the client's
//! endpoint error handler; under `sigmatop run` the program's handler still runs (it prints
//! UCX's words), and the summary marks that endpoint `failed: <the same words>` with exactly one
//! error (`ep_error`), while its one send stays counted and the server has no error.

mod common;

use common::{build_program, port, scratch, sigmatop_bin, stderr_of, stdout_of};

#[test]
fn a_dead_peer_marks_the_endpoint_failed_with_one_error() {
    let prog = build_program(
        "gcc",
        "ucx_peer_fail.c",
        "ucx_peer_fail",
        &["-lucp", "-lucs"],
    );
    let dir = scratch("ucx-endpoint-failure");
    let json = dir.join("summary.json");
    let out = std::process::Command::new(sigmatop_bin())
        .arg("run")
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(&prog)
        .arg(port().to_string())
        .env("UCX_TLS", "tcp")
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sigmatop run");
    let said = stdout_of(&out);
    assert!(out.status.success(), "{said}\n{}", stderr_of(&out));
    let words = said
        .lines()
        .find_map(|l| l.strip_prefix("ucx_peer_fail handler "))
        .unwrap_or_else(|| panic!("the program's handler did not run: {said}"))
        .to_string();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("summary written")).expect("JSON");
    let procs = v["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 2, "{v}");
    let client = procs
        .iter()
        .find(|p| p["tx_ops"] == 1)
        .unwrap_or_else(|| panic!("no client: {v}"));
    let server = procs
        .iter()
        .find(|p| p["rx_ops"] == 1)
        .unwrap_or_else(|| panic!("no server: {v}"));
    assert_eq!(client["errors"], 1, "{v}");
    assert_eq!(server.get("errors"), None, "{v}");
    let failed: Vec<&serde_json::Value> = client["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .filter(|e| e["errors"] == 1)
        .collect();
    assert_eq!(failed.len(), 1, "{v}");
    let ep = failed[0];
    assert_eq!(ep["state"], format!("failed: {words}"), "{v}");
    assert_eq!(ep["ops"]["ep_error"]["errors"], 1, "{v}");
    assert_eq!(ep["ops"]["ep_error"]["ops"], 0, "{v}");
    assert_eq!(ep["ops"]["tag_send"]["ops"], 1, "{v}");
    assert_eq!(ep["ops"]["tag_send"]["bytes"], 64, "{v}");
}
