//! The Collectives view end to end as a person over ssh would see it: `sigmatop replay` of the
//! committed NCCL fixture (a real 2-rank `all_reduce_perf` on the H200, tests/nccl_join.rs) in a
//! detached tmux session with TERM=screen; `c` opens the view. Its NCCL files play through the
//! same tracker the preload runs live, so the rows are what the live run showed: one
//! communicator of 2 ranks, 20 AllReduce per rank, both ranks done, 20 arrivals compared.

mod common;

use std::path::Path;
use std::time::Duration;

use common::tmux::Tmux;
use common::*;

#[test]
fn replay_of_the_nccl_fixture_shows_its_collectives() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl/all_reduce_np2/rec");
    let cmd = format!(
        "{} replay --speed 0 {}",
        sigmatop_bin().display(),
        rec.display()
    );
    let Some(t) = Tmux::start("nccl-replay", &cmd) else {
        return;
    };
    t.wait_for("the dashboard", Duration::from_secs(30), |s| {
        s.contains("Overview") && s.contains("softhost")
    });
    t.keys(&["c"]);
    // The whole view: its AllReduce row, the arrivals of all 20 and both ranks' rows (the
    // first frame after `c` may show the row before the ranks' state is drawn).
    let s = t.wait_for("the Collectives view", Duration::from_secs(20), |s| {
        s.contains("[c Collectives]")
            && s.contains("AllReduce")
            && s.contains("20 compared")
            && s.lines()
                .filter(|l| {
                    l.contains("softhost") && l.contains("reporting") || l.contains("exited")
                })
                .count()
                == 2
    });
    let row = s
        .lines()
        .find(|l| l.contains("AllReduce") && l.contains("2/2"))
        .unwrap_or_else(|| panic!("an AllReduce row of 2 ranks:\n{s}"));
    let words: Vec<&str> = row.split_whitespace().collect();
    // comm, ranks, collective, algo, proto, ch, count, bytes/rank, time, busbw, open.
    assert!(words.contains(&"20"), "20 AllReduce: {row}");
    assert!(
        words.contains(&"356k"),
        "356,352 bytes per rank: {row}\n{s}"
    );
    assert_eq!(words.last(), Some(&"0"), "none open: {row}");
    assert!(s.contains("20 compared"), "arrivals of all 20:\n{s}");
    let ranks: Vec<&str> = s
        .lines()
        .filter(|l| l.contains("softhost") && l.contains("reporting") || l.contains("exited"))
        .collect();
    assert_eq!(ranks.len(), 2, "a row per rank:\n{s}");
    for r in &ranks {
        let w: Vec<&str> = r.split_whitespace().collect();
        assert!(
            w.windows(2).any(|p| p == ["20", "20"]),
            "started 20, done 20: {r}"
        );
    }
    // Issue 39, item 7: the record's 80 events of types the plugin does not read lose no figure
    // and raise no warning sign in the title (it said "NCCL records dropped 0 · unread events
    // 80 · unmatched 0"); the Ranks title says the hang threshold, not a count of hung ranks.
    let title = s
        .lines()
        .find(|l| l.contains(" Collectives "))
        .unwrap_or_else(|| panic!("the Collectives title:\n{s}"));
    assert!(
        !title.contains('⚠') && !title.contains(" 0 ") && !title.contains("80"),
        "{title}"
    );
    assert!(
        s.lines()
            .any(|l| l.contains("Ranks 2 · a collective open over 2.0s counts as hung")),
        "{s}"
    );
    t.keys(&["q"]);
    t.wait_for("the exit", Duration::from_secs(10), |s| {
        s.contains("SIGMATOP-EXIT=0")
    });
}

/// Issue 39, item 7, at 80×24 (the ssh case) and 200×60: the same view's titles read as what
/// they are.
#[test]
fn the_collectives_titles_read_right_at_80_and_200_columns() {
    let rec = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl/all_reduce_np2/rec");
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let cmd = format!(
            "{} replay --speed 0 {}",
            sigmatop_bin().display(),
            rec.display()
        );
        let Some(t) = Tmux::start_sized(&format!("nccl-titles-{w}"), &cmd, None, w, h) else {
            return;
        };
        t.wait_for("the dashboard", Duration::from_secs(30), |s| {
            s.contains("Overview") && s.contains("softhost")
        });
        t.keys(&["c"]);
        let s = t.wait_settled("the Collectives view", Duration::from_secs(20), |s| {
            s.contains("AllReduce") && s.contains(" Ranks ")
        });
        let title = s
            .lines()
            .find(|l| l.contains(" Collectives "))
            .unwrap_or_else(|| panic!("{w}x{h}: the Collectives title:\n{s}"));
        assert!(
            !title.contains('⚠') && !title.contains(" 0 ") && !title.contains("unread"),
            "{w}x{h}: {title}"
        );
        assert!(
            s.lines()
                .any(|l| l.contains("Ranks 2 · a collective open over 2.0s counts as hung")),
            "{w}x{h}:\n{s}"
        );
        t.keys(&["q"]);
        t.wait_for("the exit", Duration::from_secs(10), |s| {
            s.contains("SIGMATOP-EXIT=0")
        });
    }
}
