//! A UCX endpoint whose peer dies: tests/programs/ucx_peer_fail.c connects a client to a forked
//! server over UCX's client-server API (tcp, peer error handling, on a port the kernel picks), sends one 64-byte message, and
//! the server ends without closing anything, as a crashed rank does. UCX calls the client's
//! endpoint error handler; under `sigmatop run` the program's handler still runs (it prints
//! UCX's words), and the summary marks that endpoint `failed: <the same words>` with exactly one
//! error (`ep_error`), while its one send stays counted and the server has no error; a send the
//! program posts on the failed endpoint, which UCX refuses with an error status, is one refused
//! post (`refused`), not an operation. In tmux, as
//! a person sees it: the warning names the endpoint, the QPs tab shows its state and the failed
//! operation, and the summary after `q` says `failed: 1`.

mod common;

use std::time::Duration;

use common::tmux::Tmux;
use common::{build_program, run_json, scratch, sigmatop_bin, stdout_of};

fn program() -> std::path::PathBuf {
    build_program(
        "gcc",
        "ucx_peer_fail.c",
        "ucx_peer_fail",
        &["-lucp", "-lucs"],
    )
}

#[test]
fn a_dead_peer_marks_the_endpoint_failed_with_one_error() {
    let prog = build_program(
        "gcc",
        "ucx_peer_fail.c",
        "ucx_peer_fail",
        &["-lucp", "-lucs"],
    );
    let (out, v) = run_json(&scratch("ucx-endpoint-failure"), &prog, &[]);
    let said = stdout_of(&out);
    let words = said
        .lines()
        .find_map(|l| l.strip_prefix("ucx_peer_fail handler "))
        .unwrap_or_else(|| panic!("the program's handler did not run: {said}"))
        .to_string();
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
    // The send posted after the failure, which UCX refused with an error status: a refused
    // post, not an operation (exactly one, as the program says).
    assert!(
        said.lines()
            .any(|l| l.starts_with("ucx_peer_fail refused ")),
        "the program's second send was refused: {said}"
    );
    assert_eq!(ep["ops"]["tag_send"]["refused"], 1, "{v}");
    assert_eq!(client["refused"], 1, "{v}");
    assert_eq!(server.get("refused"), None, "{v}");
}

#[test]
fn the_dashboard_names_the_failed_endpoint() {
    let prog = program();
    let dir = scratch("ucx-endpoint-failure-tmux");
    let line = format!(
        "SIGMATOP_SOCKET_DIR={} UCX_TLS=tcp {} run -- {}",
        dir.join("sock").display(),
        sigmatop_bin().display(),
        prog.display()
    );
    let Some(t) = Tmux::start_in("endpoint-failure", &line, Some(&dir)) else {
        return;
    };
    let limit = Duration::from_secs(40);
    let screen = t.wait_for("the failed endpoint's warning", limit, |s| {
        s.contains("ucx_peer_fail exited") && s.contains(": 1 failed operation")
    });
    assert!(screen.contains("1 failed"), "the status counter:\n{screen}");
    t.keys(&["2"]);
    let qps = t.wait_for("the QPs tab's detail", limit, |s| {
        s.contains("failed: 1 operation reported an error")
    });
    assert!(
        qps.contains("tcp failed: Connection reset by remote peer")
            || qps.contains("tcp failed: Endpoint timeout"),
        "the endpoint's state:\n{qps}"
    );
    t.keys(&["q"]);
    let done = t.wait_for("sigmatop to exit", limit, |s| s.contains("SIGMATOP-EXIT="));
    assert!(done.contains("SIGMATOP-EXIT=0"), "{done}");
    assert!(
        done.contains("    failed: 1 (error completions"),
        "the summary:\n{done}"
    );
}
