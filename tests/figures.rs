//! Issue 39: every figure reads as what it is. The committed recordings (fixtures/) replayed as a
//! new user would: `sigmatop demo` and `replay` in tmux at 80×24 (the ssh case) and 200×60,
//! `replay --headless`, `export --json` and `report`, with exact figures from the programs that
//! made them (fixtures/src/moe_demo.c's `tokens()`, the NCCL run's NIC log).
mod common;

use std::time::Duration;

use common::tmux::Tmux;
use common::words;

const SIZES: [(u16, u16); 2] = [(80, 24), (200, 60)];
const LIMIT: Duration = Duration::from_secs(40);

/// `sigmatop demo ARGS --speed 0` in a `w`×`h` tmux, once its dashboard is up.
fn demo_at(name: &str, args: &str, w: u16, h: u16) -> Option<Tmux> {
    let cmd = format!("{} demo {args} --speed 0", common::sigmatop_bin().display());
    let t = Tmux::start_sized(&format!("{name}-{w}"), &cmd, None, w, h)?;
    t.wait_for("the replay to finish", LIMIT, |s| {
        s.contains("replay finished")
    });
    Some(t)
}

/// Item 5: the screen names layers as `--layers` does (ibverbs, libfabric), never verbs / ofi;
/// the filter takes both spellings.
#[test]
fn layers_are_named_as_layers_takes_them() {
    for (w, h) in SIZES {
        let Some(t) = demo_at("layers", "", w, h) else {
            return;
        };
        t.keys(&["2"]);
        let s = t.wait_for("the QPs view", LIMIT, |s| s.contains("QPs & endpoints"));
        let rows: Vec<Vec<String>> = s
            .lines()
            .map(words)
            .filter(|w| {
                w.iter()
                    .find(|x| *x != "▸")
                    .is_some_and(|x| x.starts_with("softhost"))
                    && !w.iter().any(|x| x == "→")
            })
            .collect();
        assert!(rows.len() > 10, "{w}x{h}: QP rows:\n{s}");
        for r in &rows {
            assert!(
                r.iter().any(|x| x == "ibverbs") && !r.iter().any(|x| x == "verbs"),
                "{w}x{h}: the layer column says ibverbs: {r:?}\n{s}"
            );
        }
        for q in ["layer=verbs", "layer=ibverbs"] {
            t.keys(&["/"]);
            t.type_text(q);
            t.keys(&["Enter"]);
            let f = t.wait_for(&format!("the filter {q}"), LIMIT, |s| {
                s.contains(&format!("filter: {q}"))
            });
            assert!(
                f.lines().filter(|l| l.contains("ibverbs")).count() > 10,
                "{w}x{h}: {q} keeps the verbs QPs:\n{f}"
            );
            t.keys(&["Escape"]);
            t.wait_for("the filter cleared", LIMIT, |s| !s.contains("filter:"));
        }
        t.keys(&["1"]);
        let o = t.wait_for("the overview", LIMIT, |s| s.contains("Processes"));
        if w >= 200 {
            assert!(
                o.contains("ibverbs"),
                "{w}x{h}: the layers column names ibverbs:\n{o}"
            );
        }
        t.keys(&["q"]);
        t.wait_for("exit status 0", LIMIT, |s| s.contains("SIGMATOP-EXIT=0"));
    }
}
