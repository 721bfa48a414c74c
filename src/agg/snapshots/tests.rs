//! Tests of `snapshots`.

use super::*;

const ALL: Keep = Keep {
    max: usize::MAX,
    bytes: usize::MAX,
    floor_ns: 0,
};

fn snap(i: u64, counts: Vec<OpCount>) -> Snapshot {
    Snapshot {
        at_ns: 1000 + i * 250,
        seq: i,
        counts,
        drops: DropCounters {
            ring_full: i / 3,
            ..Default::default()
        },
        events: i * 7,
        threads: 2,
        layers_used: 5,
    }
}

fn count(ep: u32, op: u8, ops: u64, bytes: u64) -> OpCount {
    OpCount {
        ep,
        op,
        ops,
        bytes,
        ..Default::default()
    }
}

/// A pseudo-random sequence of snapshots: steady growth, jumps, decreases, wrap-around,
/// endpoints appearing and disappearing, duplicate pairs.
fn varied(n: u64) -> Vec<Snapshot> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut counts = vec![count(1, 34, 0, 0), count(1, 39, 0, 0), count(2, 34, 0, 0)];
    (0..n)
        .map(|i| {
            match rnd() % 40 {
                0 => counts.push(count(3 + (rnd() % 5) as u32, 2, 1, 10)),
                1 if counts.len() > 1 => {
                    counts.remove((rnd() as usize) % counts.len());
                }
                2 => {
                    let c = counts[0];
                    counts.push(c)
                }
                _ => {}
            }
            for (k, c) in counts.iter_mut().enumerate() {
                match rnd() % 10 {
                    0 => c.bytes = c.bytes.saturating_sub(rnd() % 1000),
                    1 => c.bytes = rnd() >> 12,
                    7 => {}
                    2..=6 => {
                        c.ops += 10 + k as u64;
                        c.bytes = c.bytes.wrapping_add(4096 * (10 + k as u64));
                    }
                    _ => {
                        c.ops += rnd() % 100;
                        c.bytes = c.bytes.wrapping_add(rnd() % 1_000_000);
                        c.refused += rnd() % 2;
                        c.posted += rnd() % 3;
                        c.posted_bytes += rnd() % 3000;
                        c.errors += rnd() % 2;
                    }
                }
            }
            snap(i, counts.clone())
        })
        .collect()
}

#[test]
fn every_snapshot_reads_back_exactly() {
    let all = varied(400);
    let mut h = SnapshotHistory::default();
    for s in &all {
        h.push(s.clone(), ALL);
    }
    assert_eq!(h.len(), all.len());
    for (i, s) in all.iter().enumerate() {
        assert_eq!(h.get(i).as_deref(), Some(s), "snapshot {i}");
        assert_eq!(h.at_ns(i), s.at_ns);
        let sums = Sums::of_snapshot(s);
        assert_eq!(h.tx_rx(i), (sums.tx, sums.rx));
    }
    let mut walked = 0;
    h.walk(37, 301, |i, counts| {
        assert_eq!(counts, &all[i].counts[..], "walk {i}");
        walked += 1;
    });
    assert_eq!(walked, 265);
}

#[test]
fn trimming_keeps_exact_snapshots_and_the_floor() {
    let all = varied(500);
    let mut h = SnapshotHistory::default();
    let keep = Keep {
        max: 300,
        bytes: 1000,
        floor_ns: 10 * 250,
    };
    for (n, s) in all.iter().enumerate() {
        h.push(s.clone(), keep);
        let first = n + 1 - h.len();
        for i in 0..h.len() {
            assert_eq!(h.get(i).as_deref(), Some(&all[first + i]), "{n}: {i}");
        }
        // The snapshot at or before the window's start is still there.
        let newest = all[n].at_ns;
        assert!(h.at_ns(0) <= newest.saturating_sub(10 * 250) || first == 0);
    }
    // The byte budget is spent: the floor is what is left, and at most a group more.
    assert!(
        (11..11 + KEYFRAME_EVERY as usize).contains(&h.len()),
        "{}",
        h.len()
    );
}

#[test]
fn the_snapshot_cap_makes_the_next_one_a_keyframe_exactly() {
    let all = varied(400);
    let mut h = SnapshotHistory::default();
    let keep = Keep {
        max: 50,
        bytes: usize::MAX,
        floor_ns: 0,
    };
    for (n, s) in all.iter().enumerate() {
        h.push(s.clone(), keep);
        assert_eq!(h.len(), (n + 1).min(50));
        let first = n + 1 - h.len();
        for i in 0..h.len() {
            assert_eq!(h.get(i).as_deref(), Some(&all[first + i]), "{n}: {i}");
        }
    }
    let records: usize = h.meta.iter().map(|m| m.rec.len()).sum();
    assert_eq!(h.bytes(), records + h.len() * PER_SNAPSHOT);
}

#[test]
fn steady_counters_cost_a_few_bytes_a_snapshot() {
    let mut h = SnapshotHistory::default();
    for i in 0..(KEYFRAME_EVERY as u64 * 4) {
        let counts = (1..=64)
            .flat_map(|q| {
                [
                    count(q, 34, i * 10, i * 250_000),
                    count(q, 39, i * 10, i * 125_000),
                ]
            })
            .collect();
        h.push(snap(i, counts), ALL);
    }
    // 128 counters growing as they did before: one run, a few bytes a snapshot besides the
    // index entry.
    let per_snapshot = h.bytes() as f64 / h.len() as f64;
    assert!(per_snapshot < 150.0, "{per_snapshot} bytes per snapshot");
}

#[test]
fn searching_times_from_where_they_say_finds_what_a_binary_search_finds() {
    let mut h = SnapshotHistory::default();
    let mut times = Vec::new();
    let mut t = 1000u64;
    for i in 0..300u64 {
        // Mostly 250 apart, with gaps and bursts.
        t += match i % 37 {
            0 => 10_000,
            1..=3 => 1,
            5 => 0,
            _ => 250,
        };
        times.push(t);
        let mut sn = snap(i, vec![count(1, 34, i, i)]);
        sn.at_ns = t;
        h.push(sn, ALL);
    }
    for q in (0..t + 2000).step_by(7).chain(times.iter().copied()) {
        assert_eq!(
            h.partition_point(q),
            times.partition_point(|x| *x <= q),
            "{q}"
        );
    }
}

#[test]
fn monotone_runs_and_now_rates() {
    let mut h = SnapshotHistory::default();
    h.push(snap(0, vec![count(1, 34, 1, 100)]), ALL);
    assert_eq!(h.last_now(), None);
    h.push(snap(1, vec![count(1, 34, 2, 300)]), ALL);
    let now = h.last_now().expect("now");
    assert_eq!(now.dt_ns, 250);
    assert_eq!(now.tx_bps, 200.0 * 1e9 / 250.0);
    // A new endpoint keeps the run monotone; a smaller counter breaks it.
    h.push(
        snap(2, vec![count(1, 34, 3, 400), count(2, 39, 1, 50)]),
        ALL,
    );
    assert!(h.monotone(0, 2));
    h.push(snap(3, vec![count(1, 34, 3, 10), count(2, 39, 1, 50)]), ALL);
    assert!(!h.monotone(2, 3));
    assert!(h.monotone(3, 3));
}

/// Snapshots known by their totals alone between whole ones (as a relay at qp-every 3
/// sends them, whole ones also when the counter list changes): every entry reads back as
/// the whole snapshot at or before it, exactly, through `get` and `walk`, also after the cap
/// and the byte budget dropped the oldest; totals are refused without a whole snapshot
/// before them and after `MAX_TOTALS_RUN` in a row.
#[test]
fn totals_entries_read_as_the_whole_snapshot_before_them() {
    let snaps = varied(400);
    for (cap, budget) in [
        (usize::MAX, usize::MAX),
        (37, usize::MAX),
        (usize::MAX, 6000),
    ] {
        let keep = Keep {
            max: cap,
            bytes: budget,
            floor_ns: 2000,
        };
        let mut relay = SnapshotHistory::default();
        let mut h = SnapshotHistory::default();
        assert!(!h.push_totals(&Totals::default(), keep));
        // (seq of the entry, seq of the whole snapshot it reads as)
        let mut want: Vec<(u64, u64)> = Vec::new();
        let mut last_full = 0;
        for (i, s) in snaps.iter().enumerate() {
            let changed = relay.last_keys().ne(s.counts.iter().map(|c| (c.ep, c.op)));
            relay.push(s.clone(), ALL);
            let t = relay.totals().unwrap();
            if i % 3 == 0 || changed {
                h.push(s.clone(), keep);
                assert!(h.companion(&t));
                last_full = s.seq;
            } else {
                assert!(h.push_totals(&t, keep));
            }
            want.push((s.seq, last_full));
            // The process's own figures are the relay's, whole or not.
            assert_eq!(format!("{:?}", h.totals()), format!("{:?}", Some(t)));
        }
        let first = want.len() - h.len();
        let mut walked = Vec::new();
        h.walk(0, h.len() - 1, |i, counts| {
            walked.push((i, counts.to_vec()))
        });
        let mut got_walk = walked.into_iter();
        for i in 0..h.len() {
            let (seq, full) = want[first + i];
            assert_eq!(h.seq(i), seq);
            match h.get(i) {
                Some(g) => {
                    assert_eq!(*g, snaps[full as usize], "entry {i} (cap {cap})");
                    let (j, c) = got_walk.next().unwrap();
                    assert_eq!((j, c), (i, snaps[full as usize].counts.clone()));
                }
                // Entries before the oldest whole snapshot kept read as nothing.
                None => assert!((0..=i).all(|j| !h.is_full(j)), "entry {i}"),
            }
        }
        if cap == 37 {
            assert_eq!(h.len(), 37);
        }
        if budget == 6000 {
            assert!(h.len() < 200, "{}", h.len());
        }
    }
    // A run of totals is bounded.
    let mut h = SnapshotHistory::default();
    h.push(snaps[0].clone(), ALL);
    let mut t = Totals::default();
    for k in 0..MAX_TOTALS_RUN {
        t.at_ns = 2000 + u64::from(k);
        assert!(h.push_totals(&t, ALL));
    }
    assert!(!h.push_totals(&t, ALL));
    assert_eq!(h.len(), 1 + MAX_TOTALS_RUN as usize);
}

/// The relay's history (two snapshots) writes keyframes only: a delta there would be decoded and
/// written again as a keyframe on the next push. Both snapshots still read back exactly.
#[test]
fn a_history_of_two_keeps_keyframes_only() {
    let all = varied(100);
    let mut h = SnapshotHistory::default();
    let two = Keep {
        max: 2,
        bytes: usize::MAX,
        floor_ns: 0,
    };
    for (n, s) in all.iter().enumerate() {
        h.push(s.clone(), two);
        assert_eq!(h.len(), (n + 1).min(2));
        for i in 0..h.len() {
            assert_eq!(h.kind(i), KEY, "{n}: {i}");
            assert_eq!(
                h.get(i).as_deref(),
                Some(&all[n + 1 - h.len() + i]),
                "{n}: {i}"
            );
        }
    }
}
