//! What the programs printed (perftest rows, ucx_perftest iterations, rping pings, QPNs) against
//! the record.

use super::*;

/// ucx_perftest's iterations: the second column of its "Final:" row.
pub(crate) fn ucx_perftest_iterations(out: &str) -> u64 {
    out.lines()
        .find(|l| l.trim_start().starts_with("Final:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no Final row in:\n{out}"))
}

/// rping -v: one "ping data:" line per ping.
pub(crate) fn rping_pings(out: &str) -> u64 {
    out.lines().filter(|l| l.contains("ping data:")).count() as u64
}

/// What the programs print agrees with what they were asked to do (a run that did less would
/// otherwise pass the count checks only if sigmatop miscounted in exactly the same way).
pub(crate) fn check_printed(w: &str, run: &Run) {
    let ctx = format!("{w}: printed");
    let fi_sent = |out: &str| -> u64 {
        // util/pingpong.c show_perf: "bytes #sent #ack total time ..." then one row per size.
        out.lines()
            .find(|l| l.contains('='))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("{ctx}: no result row:\n{out}"))
    };
    match w {
        "rc_pingpong" => {
            assert_eq!(number_before(&run.client_out, "iters"), P.rc_n, "{ctx}");
            assert_eq!(
                number_before(&run.client_out, "bytes"),
                2 * P.rc_n * P.rc_s,
                "{ctx}"
            );
        }
        "read_bw" => assert_eq!(perftest_row(&run.client_out), (P.rb_s, P.rb_n), "{ctx}"),
        "send_lat" => assert_eq!(perftest_row(&run.client_out), (P.sl_s, P.sl_n), "{ctx}"),
        "write_bw" => assert_eq!(perftest_row(&run.client_out), (P.wb_s, P.wb_n), "{ctx}"),
        "put_bw" => assert_eq!(ucx_perftest_iterations(&run.client_out), P.pb_n, "{ctx}"),
        "am_lat" => assert_eq!(ucx_perftest_iterations(&run.client_out), P.al_n, "{ctx}"),
        "rping" => assert_eq!(rping_pings(&run.client_out), P.rp_c, "{ctx}"),
        "fi_pingpong" => {
            assert_eq!(fi_sent(&run.client_out), P.fp_i, "{ctx}");
            assert_eq!(fi_sent(&run.server_out), P.fp_i, "{ctx}");
        }
        "fi_close" => {
            assert_eq!(fi_sent(&run.client_out), P.fc_i, "{ctx}");
            assert_eq!(fi_sent(&run.server_out), P.fc_i, "{ctx}");
        }
        "io_demo" => assert!(
            run.client_out.contains("Client exit with status 'OK'"),
            "{ctx}: {}",
            run.client_out
        ),
        _ => unreachable!("{w}"),
    }
}

/// The QPNs the rdma-core and perftest programs print ("local address: ... QPN 0x..." and
/// "remote address: ..."), a source of the QP pairing independent of sigmatop: the client's QP
/// of that number is recorded with the peer the program names, which is a QP of the server.
pub(crate) fn check_printed_qpns(
    w: &str,
    run: &Run,
    srv: &ProcessRecording,
    cli: &ProcessRecording,
) {
    if !matches!(w, "rc_pingpong" | "read_bw" | "send_lat" | "write_bw") {
        return;
    }
    let ctx = format!("{w}: printed QPNs");
    let qpn = |which: &str| -> u32 {
        run.client_out
            .lines()
            .find(|l| l.trim_start().starts_with(which))
            .and_then(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                let i = t.iter().position(|w| *w == "QPN")?;
                u32::from_str_radix(
                    t.get(i + 1)?.trim_end_matches(',').trim_start_matches("0x"),
                    16,
                )
                .ok()
            })
            .unwrap_or_else(|| panic!("{ctx}: no '{which} ... QPN' line:\n{}", run.client_out))
    };
    let (local, remote) = (qpn("local address:"), qpn("remote address:"));
    let mine = cli
        .endpoints
        .iter()
        .find(|e| e.kind == EndpointKind::VerbsQp && e.qpn == Some(local))
        .unwrap_or_else(|| panic!("{ctx}: the client recorded no QP 0x{local:x}"));
    let peer = cli
        .updates
        .iter()
        .rfind(|u| u.id == mine.id && u.state == "RTR")
        .and_then(|u| u.peer.as_ref())
        .and_then(|p| p.qpn);
    assert_eq!(peer, Some(remote), "{ctx}: the peer of QP 0x{local:x}");
    assert!(
        srv.endpoints
            .iter()
            .any(|e| e.kind == EndpointKind::VerbsQp && e.qpn == Some(remote)),
        "{ctx}: the server recorded no QP 0x{remote:x}"
    );
}

/// fi_pingpong over libfabric's verbs provider (msg endpoints), `i` transfers of `s` bytes
/// (libfabric util/pingpong.c, 1.17): each side sends `i` messages of `s` bytes, then in
/// pp_finalize a "fin" message of 4 bytes ("fin" and its NUL) and waits for the peer's; it
/// posts one receive of max(s, 64) bytes up front and reposts after each of the `i` receives,
/// so the fin lands in the last one: i + 1 receives with i·s + 4 bytes arrived, i + 1 buffers
/// posted. The libfabric layer and the verbs layer below it count the same messages, each on its
/// one endpoint / QP.
pub(crate) fn check_fi_pingpong(
    ctx: &str,
    mode: &str,
    i: u64,
    s: u64,
    procs: [&ProcessRecording; 2],
) {
    let sent = done(i + 1, i * s + 4);
    let got = recv(i + 1, i * s + 4, i + 1, s.max(64));
    for p in procs {
        let side = format!("{ctx} pid {}", p.identity.pid);
        assert_eq!(
            qps(p),
            [om(&[(Op::VerbsSend, sent), (Op::VerbsRecv, got)])],
            "{side}: the QP"
        );
        assert_eq!(
            eps(p, EndpointKind::FiEp),
            [om(&[(Op::OfiSend, sent), (Op::OfiRecv, got)])],
            "{side}: the libfabric endpoint"
        );
        if mode == "full" {
            // Every send and every receive completes and is polled (i + 1 each).
            assert_eq!(completions(p), 2 * (i + 1), "{side}: completions");
        }
    }
}
