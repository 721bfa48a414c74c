//! The dashboard's view model built from the REAL demo recording (fixtures/demo-moe: 4 MPI ranks
//! over UCX, rank 2 receives three times what the others do), at several history positions and
//! through the by-time replay, drawn with ratatui's TestBackend at 80×24 and 200×60.

use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use sigmatop::agg::Model;
use sigmatop::agg::window::step;
use sigmatop::cli::replay::ReplaySource;
use sigmatop::cli::view_model::{ClockStyle, ViewOptions, build_view};
use sigmatop::trace::reader::Recording;
use sigmatop_tui::{App, Theme, ViewModel, Window};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-moe")
}

fn model() -> Model {
    let rec = Recording::open(&[fixture()]).expect("the demo recording opens");
    assert!(rec.problems.is_empty(), "{:?}", rec.problems);
    Model::from_recording(&rec)
}

fn opts(window: Window, at: Option<u64>) -> ViewOptions {
    ViewOptions {
        window,
        at,
        source: "demo".into(),
        clock: ClockStyle::SinceStart,
        now_ns: None,
    }
}

fn render(app: &App, vm: &ViewModel, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    term.draw(|f| sigmatop_tui::draw(f, app, vm)).expect("draw");
    let buf = term.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..h {
        for x in 0..w {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

fn key(app: &mut App, c: char) {
    app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
}

/// Rank with the largest windowed ingress, and its ratio to the mean.
fn hottest_ingress(vm: &ViewModel) -> (u32, f64) {
    let mean = vm.ranks.iter().map(|r| r.ingress_bps).sum::<f64>() / vm.ranks.len() as f64;
    let hot = vm
        .ranks
        .iter()
        .max_by(|a, b| a.ingress_bps.total_cmp(&b.ingress_bps))
        .expect("ranks");
    (hot.rank, hot.ingress_bps / mean)
}

#[test]
fn rank_2_is_hot_at_every_history_position() {
    let m = model();
    let live = build_view(&m, &opts(Window::S10, None));
    assert_eq!(live.header.ranks, 4);
    assert_eq!(live.header.processes, 4);
    assert!(live.history_len >= 10, "history {}", live.history_len);
    assert_eq!(live.history_pos + 1, live.history_len);
    let mut positions = 0;
    for back in [1, 4, 8, 12] {
        if back >= live.history_len as i32 {
            continue;
        }
        let at = step(&m, None, -back);
        assert!(at.is_some(), "step back {back}");
        let vm = build_view(&m, &opts(Window::S1, at));
        assert_eq!(vm.history_pos + 1 + back as usize, vm.history_len);
        let (hot, ratio) = hottest_ingress(&vm);
        assert_eq!(hot, 2, "at {back} samples back: {:?}", vm.ranks);
        assert!(ratio > 1.5, "rank 2 ingress {ratio:.2}× mean");
        // Something moves at every position in the middle of the run.
        assert!(vm.header.tx_bps > 0.0 && vm.header.rx_bps > 0.0);
        positions += 1;
    }
    assert!(positions >= 3);
    // Totals over the whole run equal the report's.
    let all = build_view(&m, &opts(Window::All, None));
    let report = m.report();
    let tx: u64 = all.endpoints.iter().map(|e| e.tx_bytes).sum();
    assert_eq!(tx, report.totals.tx_bytes);
    let r2 = all.ranks.iter().find(|r| r.rank == 2).expect("rank 2");
    assert_eq!(r2.ingress_bytes, 23_224_320, "{r2:?}");
    assert_eq!(all.matrices.rank.labels, ["r0", "r1", "r2", "r3"]);
    let into_r2: f64 = (0..4).map(|s| all.matrices.rank.bytes[s][2]).sum();
    assert_eq!(into_r2, 3.0 * 7_741_440.0);
    // Unattributed: nothing here, so no rows of zeros (issue 39, item 7; the QPs title says
    // "none unattributed").
    assert_eq!(all.endpoints.iter().filter(|e| e.unattributed).count(), 0);
    assert_eq!(report.drops.unattributed_ops, 0);
    assert!(all.processes.iter().all(|p| p.exited));
    assert!(all.doorbells.series.is_empty(), "no GPU in this run");
}

#[test]
fn replay_by_time_matches_the_whole_recording() {
    let mut src =
        ReplaySource::open(&[fixture()], "demo", 1.0).expect("the demo recording replays");
    let mut m = Model::new();
    let mid = src.now_ns() + src.duration_ns() / 2;
    src.advance_to(&mut m, mid);
    let vm = build_view(&m, &opts(Window::S10, None));
    assert_eq!(vm.header.processes, 4);
    assert!(vm.processes.iter().all(|p| !p.exited), "nobody exited yet");
    assert_eq!(hottest_ingress(&vm).0, 2);
    src.advance_to(&mut m, u64::MAX);
    assert!(src.finished());
    let end = build_view(&m, &opts(Window::All, None));
    let whole = build_view(&model(), &opts(Window::All, None));
    assert_eq!(end.ranks, whole.ranks);
    assert_eq!(end.matrices, whole.matrices);
    assert!(end.processes.iter().all(|p| p.exited));
}

#[test]
fn renders_at_80x24_and_200x60() {
    let m = model();
    let at = step(&m, None, -8);
    let vm = build_view(&m, &opts(Window::S10, at));
    let theme = Theme::builtin("mono").expect("mono theme");
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let mut app = App::new(theme.clone());
        let overview = render(&app, &vm, w, h);
        // At 80 columns the header names the rows by kind before it spells out "ranks".
        assert!(
            overview.contains("4 ranks") || overview.contains("4r · 16 endpoints"),
            "{overview}"
        );
        assert!(overview.contains("▲ tx B/s"), "{overview}");
        assert!(overview.contains("▼ rx B/s"), "{overview}");
        assert!(overview.contains("demo"), "{overview}");

        key(&mut app, '2');
        let qps = render(&app, &vm, w, h);
        assert!(qps.contains("QPs"), "{qps}");
        assert!(qps.contains("B/s"), "{qps}");
        if w >= 200 {
            assert!(qps.contains("▲ 10s B/s"), "{qps}");
        }
        // Nothing unattributed in this run: said in the title, at any size, and no row.
        assert!(qps.contains("none unattributed"), "{qps}");
        assert!(!qps.contains("(unattr"), "{qps}");

        key(&mut app, '4');
        let nodes = render(&app, &vm, w, h);
        assert!(nodes.contains("ingress"), "{nodes}");
        // Rank 2's row shows its ingress, the largest of the four.
        let r2 = vm.ranks.iter().find(|r| r.rank == 2).expect("rank 2");
        let shown = sigmatop_tui::units::si(r2.ingress_bps);
        let line = nodes
            .lines()
            .find(|l| l.trim_start_matches(['▸', ' ']).starts_with("2 "))
            .unwrap_or_else(|| panic!("no rank 2 row:\n{nodes}"));
        assert!(line.contains(&shown), "{shown} not in {line:?}");

        key(&mut app, '5');
        key(&mut app, 'm'); // node → rank
        let matrix = render(&app, &vm, w, h);
        assert!(matrix.contains("r2"), "{matrix}");

        key(&mut app, 'd');
        let db = render(&app, &vm, w, h);
        assert!(db.to_lowercase().contains("doorbell"), "{db}");

        key(&mut app, '?');
        let help = render(&app, &vm, w, h);
        assert!(help.to_lowercase().contains("help"), "{help}");
    }
}

/// The Matrix view's GPU × GPU on the real H200 recording (fixtures/demo-gpu): the `test` run's
/// GPU-resident devx QPs loop back to themselves, so over the whole run gpu0 of pid 456 sent
/// itself its writes, atomics and reads (28,133 + 1,675 bytes, the record's counters); the
/// host-resident `bench-host` run (pid 467) names no GPU and has no row.
#[test]
fn gpu_matrix_of_the_h200_recording() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-gpu");
    let rec = Recording::open(&[dir]).expect("fixtures/demo-gpu opens");
    let m = Model::from_recording(&rec);
    let vm = build_view(&m, &opts(Window::All, None));
    let g = &vm.matrices.gpu;
    assert_eq!(g.labels, vec!["456@vm:gpu0".to_string()]);
    assert_eq!(g.bytes, vec![vec![(28_133 + 1_675) as f64]]);
    // Drawn: on one node without ranks, the Matrix view shows GPU × GPU by itself.
    let mut app = App::new(Theme::mono());
    key(&mut app, '5');
    let screen = render(&app, &vm, 120, 30);
    assert!(screen.contains("GPU × GPU"), "{screen}");
    assert!(screen.contains("456@vm:gpu0"), "{screen}");
    assert!(screen.contains("29.8k"), "{screen}");
}

/// Issue 12 item 7(b): when a run ends, the views keep the last window's rates and the totals.
/// Issue 25 item 3: a live dashboard still open after the end says "ended", its clock moves on
/// and its "now" rates are 0 (they froze at their last value); the windowed figures (nodes, ranks,
/// matrices) cover each process's last window and stay, as at the end of a replay.
#[test]
fn rates_and_totals_stay_when_the_run_has_ended() {
    let m = model();
    assert!(m.processes.values().all(|p| p.exited));
    let end = build_view(&m, &opts(Window::S10, None));
    assert!(
        end.header.tx_bps > 0.0 && end.header.rx_bps > 0.0,
        "{:?}",
        end.header
    );
    assert!(
        end.processes.iter().all(|p| p.tx_bps > 0.0),
        "{:?}",
        end.processes
    );
    assert!(
        end.nodes
            .iter()
            .all(|n| n.egress_bps > 0.0 && n.egress_bytes > 0)
    );
    let live = |later_s: u64| {
        let mut o = opts(Window::S10, None);
        o.source = "live".into();
        o.clock = ClockStyle::Wall;
        o.now_ns = Some(m.latest_ns() + later_s * 1_000_000_000);
        build_view(&m, &o)
    };
    // 1 s after the end (within the 2-s staleness of a snapshot) the last rates still stand.
    let soon = live(1);
    assert_eq!(soon.header.source, "ended");
    assert_eq!(
        (soon.header.tx_bps, soon.header.rx_bps),
        (end.header.tx_bps, end.header.rx_bps)
    );
    let mut clocks = vec![soon.header.clock.clone()];
    for later_s in [60u64, 600] {
        let later = live(later_s);
        assert_eq!(later.header.source, "ended", "{later_s} s after the end");
        assert_eq!(
            (later.header.tx_bps, later.header.rx_bps),
            (0.0, 0.0),
            "{later_s} s after the end"
        );
        for p in &later.processes {
            assert_eq!((p.tx_bps, p.rx_bps), (0.0, 0.0), "pid {}", p.pid);
        }
        for (a, b) in later.processes.iter().zip(&end.processes) {
            assert_eq!(
                (a.tx_bytes, a.rx_bytes),
                (b.tx_bytes, b.rx_bytes),
                "pid {}",
                a.pid
            );
        }
        assert_eq!(later.nodes, end.nodes, "{later_s} s after the end");
        assert_eq!(later.ranks, end.ranks, "{later_s} s after the end");
        // The matrices keep their bytes; their rates are "now" rates, 0 like the others.
        for (a, b) in [
            (&later.matrices.rank, &end.matrices.rank),
            (&later.matrices.node, &end.matrices.node),
        ] {
            assert_eq!((&a.labels, &a.bytes), (&b.labels, &b.bytes), "{later_s} s");
            assert!(a.rates.iter().flatten().all(|r| *r == 0.0), "{later_s} s");
        }
        clocks.push(later.header.clock.clone());
    }
    clocks.dedup();
    assert_eq!(clocks.len(), 3, "the clock moves on: {clocks:?}");
}

/// `attach HOST...`: the Nodes view has one row per host the user named, with the state of its
/// link and its processes, a host that was never reached included.
#[test]
fn node_rows_carry_link_states_and_unreached_hosts() {
    use sigmatop::agg::{HostLink, LinkState};
    let mut m = model();
    m.links = vec![
        HostLink {
            destination: "user@vm".into(),
            host: Some("vm".into()),
            state: LinkState::Up,
            version: Some("0.1.0".into()),
            attempts: 1,
        },
        HostLink {
            destination: "node9".into(),
            host: None,
            state: LinkState::Lost(
                "ssh: Could not resolve hostname node9: Name or service not known".into(),
            ),
            version: None,
            attempts: 3,
        },
    ];
    let vm = build_view(&m, &opts(Window::S10, None));
    let rows: Vec<(&str, &str, u32)> = vm
        .nodes
        .iter()
        .map(|n| (n.host.as_str(), n.state.as_str(), n.processes))
        .collect();
    assert_eq!(
        rows,
        [
            ("vm", "up", 4),
            (
                "node9",
                "lost: ssh: Could not resolve hostname node9: Name or service not known",
                0
            )
        ]
    );
    // A local view has no states.
    let local = build_view(&model(), &opts(Window::S10, None));
    assert!(
        local
            .nodes
            .iter()
            .all(|n| n.state.is_empty() && n.processes == 4)
    );
}

/// Issue 25 item 9: the empty process table of a run that traced nothing says why (the driver
/// sets `App::empty_hint`), at 80×24 (cut at the edge) and 200×60; "(none yet)" otherwise.
#[test]
fn an_empty_process_table_says_why_nothing_was_traced() {
    let vm = ViewModel::default();
    let mut app = App::new(Theme::mono());
    let hint = "true used no RDMA library sigmatop traces (UCX, libfabric, ibverbs, mlx5): nothing was traced";
    assert!(render(&app, &vm, 80, 24).contains("  (none yet)"));
    app.empty_hint = Some(hint.into());
    let wide = render(&app, &vm, 200, 60);
    assert!(wide.contains(&format!("  (none: {hint})")), "{wide}");
    assert!(!wide.contains("(none yet)"), "{wide}");
    let narrow = render(&app, &vm, 80, 24);
    let line = narrow
        .lines()
        .find(|l| l.contains("(none: "))
        .unwrap_or_else(|| panic!("{narrow}"));
    assert_eq!(
        line.trim_end(),
        "  (none: true used no RDMA library sigmatop traces (UCX, libfabric, ibverbs, mlx"
    );
}
