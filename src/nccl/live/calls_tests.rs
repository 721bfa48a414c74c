use super::*;
use crate::nccl::{format, synth};

/// The synthetic rank's records through the tracker: the AlltoAll and the user's Group are
/// calls of their own (the AlltoAll finished after the grace: its own parts came with no
/// event), sizes per call as made, the AllReduce's GPU start converted.
#[test]
fn the_tracker_names_calls_made_of_parts_and_keeps_sizes_and_gpu_starts() {
    let mut t = Tracker::new();
    for r in synth::rank(&synth::Rank {
        rank: 0,
        nranks: 2,
        t0: 0,
        kernel_seen: 1200,
        gpu0: 5_000_000,
    }) {
        t.push(&r);
    }
    let k = t.calls();
    assert_eq!(k.comms.len(), 1);
    let c = &k.comms[0];
    let a2a = format::index_of(format::FUNCS, b"AlltoAll");
    assert_eq!(
        c.api_rows
            .iter()
            .map(|r| (r.func, r.count, r.bytes, r.parts, r.open))
            .collect::<Vec<_>>(),
        vec![(a2a, 1, 1024, 2, 0), (format::GROUP_FUNC, 1, 256, 2, 0)]
    );
    let ar = format::index_of(format::FUNCS, b"AllReduce");
    assert_eq!(
        c.sizes
            .iter()
            .map(|z| (z.func, z.bucket, z.count, z.gpu_time_ns))
            .collect::<Vec<_>>(),
        vec![
            (ar, 4096, 1, 800),
            (a2a, 1024, 1, 0),
            (format::GROUP_FUNC, 256, 1, 0)
        ]
    );
    assert_eq!(c.gpu_recent, vec![(0, 1_000_001_200)]);
    // In the order they finished: the Group before the AlltoAll (its grace).
    assert_eq!(
        c.api_recent,
        vec![
            (format::GROUP_FUNC, 1, 1_000_200_000),
            (a2a, 1, 1_000_100_000)
        ]
    );
    // Nothing left open.
    assert!(t.groups.is_empty() && t.p2p_api.is_empty() && t.kernels.is_empty());
}
