//! One egress (issue 16, item 4): a ucx_perftest tag_bw client traced, its server not. The
//! client's bytes are egress in every view — the JSON export's process, node matrices and node
//! summary, the text report, and the dashboard's Nodes view and node matrix — and the server
//! appears as the "untraced" column, with exactly (n + 1) × size bytes (n iterations and one
//! warm-up round of one iteration: see tests/ucx_perftest.rs).
mod common;

use std::process::Command;
use std::time::Duration;

use common::Bounded;
use common::Trace;
use sigmatop::agg::Model;
use sigmatop::cli::view_model::{ClockStyle, ViewOptions, build_view};
use sigmatop::trace::reader::Recording;
use sigmatop_tui::Window;

const N: u64 = 200;
const SIZE: u64 = 8192;

#[test]
fn egress_to_an_untraced_server_is_egress_everywhere() {
    let bin = common::require("ucx_perftest");
    let dir = common::scratch("untraced-peer");
    let trace = Trace::new("simple", &dir);
    let (s, port) = common::ucx_perftest_server("tcp", |_| {});
    let mut client = Command::new(&bin);
    client
        .args(["127.0.0.1", "-p", &port.to_string(), "-t", "tag_bw"])
        .args(["-n", &N.to_string(), "-s", &SIZE.to_string(), "-w", "1"])
        .env("UCX_TLS", "tcp");
    trace.apply(&mut client);
    let c = common::spawn(&mut client);
    for o in [
        common::wait_timeout(c, Duration::from_secs(60)),
        common::wait_timeout(s, Duration::from_secs(60)),
    ] {
        assert!(o.status.success(), "{}", common::stderr_of(&o));
    }
    let sent = (N + 1) * SIZE;
    let rec_dir = trace.record.to_str().expect("utf-8").to_string();

    // The JSON export.
    let json = dir.join("x.json");
    let o = Command::new(common::sigmatop_bin())
        .args(["export", &rec_dir, "--json", json.to_str().expect("utf-8")])
        .output_bounded()
        .expect("export");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("written")).expect("json");
    let host = v["nodes"][0]["host"].as_str().expect("a node").to_string();
    assert_eq!(
        v["node_matrix"]["labels"],
        serde_json::json!([host, "untraced"])
    );
    assert_eq!(
        v["node_matrix"]["bytes"],
        serde_json::json!([[0, sent], [0, 0]])
    );
    assert_eq!(v["nodes"][0]["egress_bytes"], sent);
    let pm = &v["process_matrix"];
    assert_eq!(pm["labels"][1], "untraced");
    assert_eq!(pm["bytes"][0][1], sent);
    assert_eq!(v["top_talkers"][0]["to"], "untraced");
    assert_eq!(v["top_talkers"][0]["bytes"], sent);

    // The text report: the node's egress is what it sent.
    let o = Command::new(common::sigmatop_bin())
        .args(["report", &rec_dir])
        .output_bounded()
        .expect("report");
    let text = common::stdout_of(&o);
    // The node × node matrix: the host's row ends with its egress (a row's sum), what it sent
    // to the untraced server. (With one node the skew line judges nothing and names no max.)
    let mb = format!("{:.2} MB", sent as f64 / 1e6);
    let matrix = text
        .split("node × node")
        .nth(1)
        .unwrap_or_else(|| panic!("no node × node matrix:\n{text}"));
    assert!(
        matrix.lines().any(|l| {
            l.split_whitespace().next() == Some(host.as_str())
                && l.trim_end().ends_with(&format!("{mb}    {mb}"))
        }),
        "{text}"
    );

    // The dashboard over the whole run: the Nodes view and the node matrix agree.
    let rec = Recording::open(std::slice::from_ref(&trace.record)).expect("record");
    let vm = build_view(
        &Model::from_recording(&rec),
        &ViewOptions {
            window: Window::All,
            clock: ClockStyle::SinceStart,
            ..Default::default()
        },
    );
    assert_eq!(vm.nodes[0].egress_bytes, sent);
    assert_eq!(
        vm.matrices.node.labels,
        vec![host.clone(), "untraced".into()]
    );
    assert_eq!(vm.matrices.node.bytes[0][1], sent as f64);
}
