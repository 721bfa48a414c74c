use super::*;
use crate::nccl::synth;

/// Two ranks of the synthetic AllReduce, AlltoAll and user Group (`synth`): rank 1 calls
/// each 500 ns after rank 0 on the host, but its kernel starts 550 ns before rank 0's on the
/// GPU (rank 0's queued behind other work).
fn two_ranks() -> NcclReport {
    let inputs: Vec<ProcessInput> = [
        (0u32, 0u64, 1200u64, 5_000_000u64),
        (1, 500, 150, 77_000_000),
    ]
    .iter()
    .map(|&(rank, t0, kernel_seen, gpu0)| ProcessInput {
        host: format!("h{rank}"),
        pid: 10 + rank,
        recs: synth::rank(&synth::Rank {
            rank,
            nranks: 2,
            t0,
            kernel_seen,
            gpu0,
        }),
        ..Default::default()
    })
    .collect();
    build(&inputs)
}

#[test]
fn calls_are_named_as_the_user_made_them_with_their_parts_under_them() {
    let r = two_ranks();
    let of = |pid: u32| -> Vec<&CallRec> { r.calls.iter().filter(|c| c.pid == pid).collect() };
    let r0 = of(10);
    let names: Vec<(&str, &str, Option<usize>)> = r0
        .iter()
        .map(|c| (c.func.as_str(), c.kind, c.parent))
        .collect();
    // AlltoAll at index 1, Group at 4 (indices in the report's `calls`).
    assert_eq!(
        names,
        vec![
            ("AllReduce", "collective", None),
            ("AlltoAll", "api", None),
            ("Send", "p2p", Some(1)),
            ("Recv", "p2p", Some(1)),
            ("Group", "api", None),
            ("Send", "p2p", Some(4)),
            ("Recv", "p2p", Some(4)),
        ]
    );
    let a2a = r0[1];
    assert_eq!(
        (a2a.seq, a2a.bytes, a2a.count, a2a.size_bucket),
        (1, 1024, 256, 1024)
    );
    assert!(a2a.end_ns.is_some() && a2a.time_ns.is_some(), "{a2a:?}");
    // Its end is its last part's: the Recv's operation stopped at t + 1001.
    assert_eq!(a2a.end_ns, Some(1_000_000_000 + 100_000 + 1001));
    let g = r0[4];
    assert_eq!(
        (g.bytes, g.seq),
        (synth::GROUP_BYTES, 1),
        "a Group's bytes: its Sends'"
    );
    // Rows: each call's row, its parts' rows under it; by size, the calls as made.
    let rows: Vec<(String, String)> = r
        .collectives
        .iter()
        .filter(|c| c.pid == 10)
        .map(|c| (c.func.clone(), c.part_of.clone()))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("AllReduce".into(), "".into()),
            ("AlltoAll".into(), "".into()),
            ("Recv".into(), "AlltoAll".into()),
            ("Send".into(), "AlltoAll".into()),
            ("Group".into(), "".into()),
            ("Recv".into(), "Group".into()),
            ("Send".into(), "Group".into()),
        ]
    );
    let sizes: Vec<(String, u64, u64)> = r
        .by_size
        .iter()
        .filter(|z| z.pid == 10)
        .map(|z| (z.func.clone(), z.size_bucket, z.count))
        .collect();
    assert_eq!(
        sizes,
        vec![
            ("AllReduce".into(), 4096, 1),
            ("AlltoAll".into(), 1024, 1),
            ("Group".into(), 256, 1)
        ]
    );
    let text = render_calls(&r);
    assert!(text.contains("└ Send → r1"), "{text}");
}

/// Host calls say rank 1 is last; the kernels' GPU starts (KernelCh, converted to the
/// record's clock) say rank 0 is: both are reported, labelled.
#[test]
fn gpu_times_are_converted_and_arrivals_are_given_from_both_views() {
    let r = two_ranks();
    let ar0 = r
        .calls
        .iter()
        .find(|c| c.pid == 10 && c.func == "AllReduce")
        .expect("r0");
    let ar1 = r
        .calls
        .iter()
        .find(|c| c.pid == 11 && c.func == "AllReduce")
        .expect("r1");
    // GPU start: the host time the proxy saw it (the only kernel: its own offset), +800 ns.
    assert_eq!(
        (ar0.gpu_start_ns, ar0.gpu_end_ns),
        (Some(1_000_001_200), Some(1_000_002_000))
    );
    assert_eq!(ar1.gpu_start_ns, Some(1_000_000_650));
    assert!(!r.gpu_clock.is_empty());
    // The AllReduce rows: one call with kernel times each, 800 ns from first start to
    // last stop; bus bandwidth over it (2 ranks: factor 1).
    for pid in [10, 11] {
        let row = r
            .collectives
            .iter()
            .find(|c| c.pid == pid && c.func == "AllReduce")
            .expect("AllReduce row");
        assert_eq!((row.gpu_calls, row.gpu_time_ns), (1, 800), "{row:?}");
        let want = synth::ALLREDUCE_BYTES as f64 / 800.0;
        assert!((row.gpu_busbw_gbs - want).abs() < 1e-9, "{row:?}");
    }
    // Calls without kernel events have no GPU time.
    assert!(
        r.collectives
            .iter()
            .filter(|c| c.func != "AllReduce")
            .all(|c| c.gpu_calls == 0 && c.gpu_time_ns == 0)
    );
    assert_eq!(r.arrivals.len(), 1);
    let a = &r.arrivals[0];
    // AllReduce #0, AlltoAll #1, Group #1: three calls compared on the host.
    assert_eq!(
        (a.collectives, a.max_spread_ns, a.max_spread_last_rank),
        (3, 500, 1)
    );
    assert_eq!(a.last_rank.get(&1), Some(&3));
    assert_eq!(
        (
            a.gpu_collectives,
            a.gpu_max_spread_ns,
            a.gpu_max_spread_last_rank
        ),
        (1, 550, 0)
    );
    let text = render(&r);
    assert!(
        text.contains("arrival spread (GPU kernel starts)"),
        "{text}"
    );
    assert!(text.contains("GPU GB/s"), "{text}");
}
