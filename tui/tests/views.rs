//! Snapshot tests of every view, the help overlay and the filter prompt at 80×24 and 200×60, driven
//! by the fixed feed and real key events (no terminal), plus checks that only the 16 ANSI colours
//! are ever emitted.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use sigmatop_tui::{App, Theme, ViewModel, draw, sample_view_model};

const SIZES: [(u16, u16); 2] = [(80, 24), (200, 60)];

fn render(app: &App, vm: &ViewModel, w: u16, h: u16) -> TestBackend {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    term.draw(|f| draw(f, app, vm)).expect("draw");
    term.backend().clone()
}

fn keys(app: &mut App, keys: &str) {
    for c in keys.chars() {
        app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
}

fn snap(name: &str, setup: &str) {
    let vm = sample_view_model();
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        // Like the driver: draw, then a key, then draw again (cursor keys use the last frame).
        let mut backend = render(&app, &vm, w, h);
        for c in setup.chars() {
            app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
            backend = render(&app, &vm, w, h);
        }
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), backend);
    }
}

/// `attach node0 node1 node2 node3 node4`: two hosts up, one connecting, one lost with ssh's
/// line, and one never reached (no traffic row of its own).
fn multi_host_view_model() -> ViewModel {
    let mut vm = sample_view_model();
    let states = [
        "up",
        "up",
        "connecting",
        "lost: ssh: connect to host node3 port 22: Connection refused (retrying)",
    ];
    for (n, s) in vm.nodes.iter_mut().zip(states) {
        n.state = s.to_string();
    }
    vm.nodes.push(sigmatop_tui::NodeRow {
        host: "node4".into(),
        state: "lost: ssh: Could not resolve hostname node4: Name or service not known".into(),
        ..Default::default()
    });
    vm.header.nodes = 5;
    vm
}

#[test]
fn nodes_multi_host() {
    let vm = multi_host_view_model();
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        render(&app, &vm, w, h);
        keys(&mut app, "4");
        let backend = render(&app, &vm, w, h);
        insta::assert_snapshot!(format!("nodes_multi_host_{w}x{h}"), backend);
        let text = text(&backend);
        for host in ["node0", "node3", "node4"] {
            assert!(text.contains(host), "{host} has a row at {w}x{h}:\n{text}");
        }
        assert!(text.contains("2 lost"), "{text}");
        let lost = text
            .lines()
            .find(|l| l.trim_start().starts_with("node3"))
            .unwrap_or_default();
        assert!(lost.contains("lost: ssh: connect"), "{lost}");
        // The lost state is drawn in the error colour.
        let th = Theme::dark();
        let cell_fg = |needle: &str| {
            let row = text
                .lines()
                .position(|l| l.contains(needle) && !l.contains("skew"))
                .expect("row");
            let col = text.lines().nth(row).unwrap().find(needle).unwrap();
            let col = text.lines().nth(row).unwrap()[..col].chars().count() as u16;
            backend.buffer()[(col, row as u16)].fg
        };
        assert_eq!(Some(cell_fg("lost: ssh: connect")), th.error.fg);
    }
}

#[test]
fn overview() {
    snap("overview", "");
}

#[test]
fn qps() {
    snap("qps", "2");
}

#[test]
fn qps_scrolled_bits() {
    snap("qps_scrolled_bits", "2jjjju");
}

#[test]
fn gpus() {
    snap("gpus", "3");
}

#[test]
fn nodes() {
    snap("nodes", "4");
}

#[test]
fn matrix_node_bytes() {
    snap("matrix_node", "5");
}

#[test]
fn matrix_rank_rate() {
    snap("matrix_rank_rate", "5mr");
}

#[test]
fn matrix_gpu() {
    snap("matrix_gpu", "5mm");
}

#[test]
fn doorbells() {
    snap("doorbells", "d");
}

#[test]
fn help_overlay() {
    snap("help", "2?");
}

#[test]
fn filter_prompt() {
    snap("filter_prompt", "2/rank=5 layer=verbs");
}

#[test]
fn filter_applied_paused() {
    let vm = sample_view_model();
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        keys(&mut app, "2/host=node2");
        app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        keys(&mut app, " ");
        let backend = render(&app, &vm, w, h);
        insta::assert_snapshot!(format!("filter_applied_paused_{w}x{h}"), backend);
    }
}

#[test]
fn history_and_error_message() {
    let mut vm = sample_view_model();
    vm.history_pos = 40;
    vm.status.message =
        Some("socket /run/user/1000/sigmatop/41213.sock: bad frame (crc mismatch), skipped".into());
    vm.status.frames_lost = 1;
    // The core's drop rule reports the lost source after the dropped events.
    vm.warnings.insert(
        1,
        sigmatop_tui::Warning {
            kind: sigmatop_tui::WarningKind::Drops,
            message: "1 socket frames lost".into(),
            ..Default::default()
        },
    );
    for (w, h) in SIZES {
        let app = App::new(Theme::dark());
        let backend = render(&app, &vm, w, h);
        insta::assert_snapshot!(format!("history_error_{w}x{h}"), backend);
    }
}

#[test]
fn empty_model_draws_every_view() {
    let vm = ViewModel::default();
    let mut app = App::new(Theme::dark());
    for tab in ["1", "2", "3", "4", "5", "d", "c"] {
        keys(&mut app, tab);
        for (w, h) in SIZES {
            render(&app, &vm, w, h);
        }
    }
    keys(&mut app, "1");
    insta::assert_snapshot!("empty_overview_80x24", render(&app, &vm, 80, 24));
    keys(&mut app, "d");
    insta::assert_snapshot!("empty_doorbells_80x24", render(&app, &vm, 80, 24));
    keys(&mut app, "c");
    insta::assert_snapshot!("empty_collectives_80x24", render(&app, &vm, 80, 24));
}

#[test]
fn tiny_and_odd_sizes_do_not_panic() {
    let vm = sample_view_model();
    let mut app = App::new(Theme::dark());
    for tab in ["1", "2", "3", "4", "5", "d", "?"] {
        keys(&mut app, tab);
        for (w, h) in [
            (1, 1),
            (20, 5),
            (39, 9),
            (40, 10),
            (60, 15),
            (100, 30),
            (300, 100),
        ] {
            render(&app, &vm, w, h);
        }
    }
}

#[test]
fn only_16_colours_in_every_view_and_theme() {
    let vm = sample_view_model();
    for theme in ["dark", "light", "mono"] {
        let mut app = App::new(Theme::builtin(theme).expect("builtin"));
        for tab in ["1", "2", "3", "4", "5", "d", "?"] {
            keys(&mut app, tab);
            for (w, h) in SIZES {
                let b = render(&app, &vm, w, h);
                for cell in b.buffer().content() {
                    for c in [cell.fg, cell.bg] {
                        assert!(
                            !matches!(c, Color::Rgb(..) | Color::Indexed(_)),
                            "{theme} {tab} {w}x{h}: {c:?}"
                        );
                        if theme == "mono" {
                            assert_eq!(c, Color::Reset, "mono uses no colour");
                        }
                    }
                }
            }
            keys(&mut app, "?"); // close help if it was opened
        }
    }
}

#[test]
fn heat_map_uses_shade_characters() {
    let vm = sample_view_model();
    let mut app = App::new(Theme::mono());
    keys(&mut app, "5");
    let b = render(&app, &vm, 80, 24);
    let text: String = b.buffer().content().iter().map(|c| c.symbol()).collect();
    for shade in ["░", "▒", "▓", "█"] {
        assert!(text.contains(shade), "matrix lacks {shade}");
    }
}

#[test]
fn every_sort_column_and_a_large_feed() {
    // 64 processes × 64 QPs, the benchmark's shape: every tab and sort column draws without panic.
    let mut vm = sample_view_model();
    let base = vm.endpoints.clone();
    vm.endpoints = (0..4096)
        .map(|i| {
            let mut e = base[i % base.len()].clone();
            e.local_id = format!("0x{:x}", 0x1000 + i);
            e.tx_bps *= 1.0 + (i % 17) as f64 / 10.0;
            e
        })
        .collect();
    let mut app = App::new(Theme::dark());
    for tab in ["1", "2", "3", "4", "5", "d"] {
        keys(&mut app, tab);
        for _ in 0..20 {
            keys(&mut app, "s");
            render(&app, &vm, 200, 60);
            keys(&mut app, "S");
            render(&app, &vm, 80, 24);
        }
        keys(&mut app, "G");
        render(&app, &vm, 80, 24);
    }
    keys(&mut app, "2G");
    let b = render(&app, &vm, 80, 24);
    let text: String = b.buffer().content().iter().map(|c| c.symbol()).collect();
    assert!(
        text.contains("(unattributed)"),
        "the unattributed row is last"
    );
}

fn text(b: &TestBackend) -> String {
    let buf = b.buffer();
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

#[test]
fn notices_are_not_errors_and_leave_the_keys_visible() {
    let mut vm = sample_view_model();
    vm.status.notice = Some("replay finished (6.2s) · [ ] steps back · q quits".into());
    for (w, h) in [(80, 24), (120, 35), (200, 60)] {
        let mut app = App::new(Theme::dark());
        keys(&mut app, "/");
        keys(&mut app, "rank=2");
        app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        let s = text(&render(&app, &vm, w, h));
        assert!(s.contains("» replay finished"), "{w}×{h}:\n{s}");
        assert!(!s.contains('✗'), "a notice is not an error, {w}×{h}:\n{s}");
        let last = s.lines().last().unwrap_or_default();
        assert!(
            last.contains("filter: rank=2") && last.contains("q quit"),
            "{w}×{h}: footer {last:?}"
        );
    }
    // An error keeps its ✗, and takes the footer on a short terminal.
    vm.status.message = Some("socket x.sock: bad frame".into());
    let s = text(&render(&App::new(Theme::dark()), &vm, 80, 24));
    assert!(
        s.lines()
            .last()
            .unwrap_or_default()
            .contains("✗ socket x.sock"),
        "{s}"
    );
    assert!(s.contains("» replay finished"), "{s}");
}

#[test]
fn one_node_opens_the_rank_matrix_and_one_warning_line() {
    let mut vm = sample_view_model();
    // One node, several ranks: a node × node matrix would be one cell.
    vm.matrices.node.labels.truncate(1);
    vm.matrices.node.bytes = vec![vec![1e9]];
    vm.matrices.node.rates = vec![vec![1e8]];
    let mut app = App::new(Theme::dark());
    keys(&mut app, "5");
    let s = text(&render(&app, &vm, 120, 35));
    assert!(s.contains("rank × rank"), "{s}");
    keys(&mut app, "m");
    let s = text(&render(&app, &vm, 120, 35));
    assert!(
        s.contains("GPU × GPU"),
        "m moves on from the rank matrix:\n{s}"
    );
    keys(&mut app, "m");
    let s = text(&render(&app, &vm, 120, 35));
    assert!(s.contains("node × node"), "{s}");

    // No warnings: the overview says so once.
    let quiet = ViewModel {
        processes: vm.processes.clone(),
        ..ViewModel::default()
    };
    let app = App::new(Theme::dark());
    for (w, h) in [(80, 24), (120, 35)] {
        let s = text(&render(&app, &quiet, w, h));
        assert_eq!(s.matches("✓ no warnings").count(), 1, "{w}×{h}:\n{s}");
        assert!(!s.contains("✓ none"), "{w}×{h}:\n{s}");
    }
}

/// A 24-rank matrix does not fit 80 columns: the hidden columns are counted on both sides, and
/// `>` / `l` / `<` scroll them into view (clamped at the last ones).
#[test]
fn matrix_scrolls_columns() {
    let mut vm = sample_view_model();
    let n = 24;
    vm.matrices.rank = sigmatop_tui::Matrix {
        labels: (0..n).map(|i| format!("r{i}")).collect(),
        bytes: (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| ((i * 7 + j * 3) % 11) as f64 * 1e9)
                    .collect()
            })
            .collect(),
        rates: vec![vec![0.0; n]; n],
        ..Default::default()
    };
    let text = |b: &TestBackend| {
        let buf = b.buffer();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
    };
    // The matrix's header row.
    let head = |b: &TestBackend| {
        text(b)
            .into_iter()
            .find(|l| l.contains("src\\dst"))
            .expect("header")
    };
    let mut app = App::new(Theme::dark());
    keys(&mut app, "5m");
    let first = render(&app, &vm, 80, 24);
    let h = head(&first);
    assert!(h.split_whitespace().nth(1) == Some("r0"), "{h}");
    assert!(h.contains("›") && !h.contains("‹"), "{h}");
    keys(&mut app, ">>>>>l");
    let scrolled = render(&app, &vm, 80, 24);
    let h = head(&scrolled);
    assert!(h.contains("‹6"), "{h}");
    assert!(h.split_whitespace().nth(1) == Some("r6"), "{h}");
    insta::assert_snapshot!("matrix_scrolled_80x24", scrolled);
    // Past the end: the last columns, nothing hidden on the right.
    keys(&mut app, &">".repeat(40));
    let h = head(&render(&app, &vm, 80, 24));
    assert!(h.contains("+0›") && h.contains("r23"), "{h}");
    keys(&mut app, &"<".repeat(60));
    let back = render(&app, &vm, 80, 24);
    assert_eq!(text(&back), text(&first));
}

/// Egress to a peer that is not traced: the node matrix's "untraced" column holds it, the row's
/// egress counts it, and the untraced side takes no part in the skew (one traced node sending
/// everything to an untraced server is not "skewed").
#[test]
fn matrix_with_an_untraced_peer() {
    let mut vm = sample_view_model();
    vm.matrices.node = sigmatop_tui::Matrix {
        labels: vec!["node0".into(), "untraced".into()],
        bytes: vec![vec![0.0, 3.2e9], vec![0.0, 0.0]],
        rates: vec![vec![0.0, 52.7e6], vec![0.0, 0.0]],
        untraced: true,
    };
    vm.warnings.clear();
    let mut app = App::new(Theme::dark());
    keys(&mut app, "5");
    let s = text(&render(&app, &vm, 80, 24));
    assert!(s.contains("untraced"), "{s}");
    assert!(!s.contains("◀"), "no skew marks for one traced node:\n{s}");
    insta::assert_snapshot!("matrix_untraced_80x24", s);
}

/// Endpoints that talk to several peers (libfabric RDM in aggregate mode) count them together:
/// their bytes are in no cell, and the matrix says how many it leaves out, so that a matrix of
/// zeros is not read as "nothing moved" (at 80 and 200 columns; not in the rate view, whose
/// cells are rates).
#[test]
fn matrix_says_what_it_leaves_out() {
    let mut vm = sample_view_model();
    vm.matrices.rank = sigmatop_tui::Matrix {
        labels: vec!["r0".into(), "r1".into(), "r2".into()],
        bytes: vec![vec![0.0; 3]; 3],
        rates: vec![vec![0.0; 3]; 3],
        ..Default::default()
    };
    // The node matrix (the one shown first with several nodes) shows them too, beside the cells
    // of its other endpoints.
    vm.matrices.left_out_bytes = 34_000.0;
    vm.matrices.left_out_endpoints = 3;
    let mut app = App::new(Theme::dark());
    keys(&mut app, "5");
    for (w, h) in [(80, 24), (200, 60)] {
        let s = text(&render(&app, &vm, w, h));
        assert!(s.contains("node × node"), "{w}×{h}:\n{s}");
        assert!(
            s.contains("⚠ 34.0k on 3 endpoints with several peers not in the matrix"),
            "{w}×{h}:\n{s}"
        );
        insta::assert_snapshot!(format!("matrix_left_out_{w}x{h}"), s);
    }
    keys(&mut app, "r");
    let s = text(&render(&app, &vm, 200, 60));
    assert!(!s.contains("not in the matrix"), "rate view:\n{s}");
}

// ---- The rough edges of a first day (issue 16, item 9) ----

fn endpoint(pid: u32, local_id: &str, unattributed: bool) -> sigmatop_tui::EndpointRow {
    sigmatop_tui::EndpointRow {
        host: "vm".into(),
        pid,
        layer: if unattributed { "" } else { "ucx" }.into(),
        local_id: local_id.into(),
        transport: "tcp".into(),
        tx_bps: 1e6,
        unattributed,
        ..Default::default()
    }
}

/// Two processes without ranks (a ucx_perftest pair), each with one endpoint and its
/// unattributed row, the way the core builds them.
fn rankless_pair() -> ViewModel {
    let mut vm = ViewModel::default();
    for pid in [4100u32, 4200] {
        vm.processes.push(sigmatop_tui::ProcessRow {
            host: "vm".into(),
            pid,
            mode: "simple".into(),
            layers: vec!["ucx".into()],
            ..Default::default()
        });
        vm.endpoints.push(endpoint(pid, "(unattributed)", true));
        vm.endpoints.push(endpoint(
            pid,
            &format!("worker@0x55d1c2a0{pid}→ep@0x7f660e39f058{pid}"),
            false,
        ));
    }
    vm.header.source = "live".into();
    vm.header.nodes = 1;
    vm.header.processes = 2;
    vm.header.qps = 2;
    vm
}

fn lines_with<'a>(s: &'a str, what: &str) -> Vec<&'a str> {
    s.lines().filter(|l| l.contains(what)).collect()
}

#[test]
fn qp_counts_agree_and_unattributed_rows_say_whose() {
    let vm = rankless_pair();
    let mut app = App::new(Theme::dark());
    keys(&mut app, "2");
    let s = text(&render(&app, &vm, 120, 35));
    assert!(s.contains(" 2 QPs "), "header:\n{s}");
    assert!(
        s.contains("QPs & endpoints 2 · + 2 unattributed rows (last)"),
        "the panel counts what the header counts:\n{s}"
    );
    // Two unattributed rows, told apart by their pid, also where the pid column does not fit.
    for (w, h) in [(80, 24), (120, 35)] {
        let s = text(&render(&app, &vm, w, h));
        let unattr = lines_with(&s, "(unattributed)");
        assert_eq!(
            unattr.len(),
            2,
            "{w}×{h}:
{s}"
        );
        assert!(
            unattr[0].contains("4100") != unattr[1].contains("4100"),
            "{s}"
        );
        assert!(
            unattr
                .iter()
                .all(|l| l.contains("4100") || l.contains("4200"))
        );
    }
    // pid=4200 keeps exactly the rows whose pid column says 4200: its endpoint and its own
    // unattributed traffic, never another process's.
    keys(&mut app, "/pid=4200");
    app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    let s = text(&render(&app, &vm, 120, 35));
    assert!(
        s.contains("QPs & endpoints 1 of 2 · + 1 unattributed row (last)"),
        "{s}"
    );
    let rows: Vec<&str> = s
        .lines()
        .filter(|l| {
            l.trim_start_matches('▸').trim_start().starts_with("vm ") && l.contains("1.00M")
        })
        .collect();
    assert_eq!(rows.len(), 2, "{s}");
    assert!(
        rows.iter()
            .all(|l| l.contains("4200") && !l.contains("4100")),
        "{s}"
    );
}

#[test]
fn endpoint_names_are_whole_on_a_wide_terminal() {
    let vm = rankless_pair();
    let mut app = App::new(Theme::dark());
    keys(&mut app, "2");
    let wide = text(&render(&app, &vm, 200, 60));
    for pid in [4100, 4200] {
        let name = format!("worker@0x55d1c2a0{pid}→ep@0x7f660e39f058{pid}");
        assert!(wide.contains(&name), "{name} whole at 200 columns:\n{wide}");
    }
    insta::assert_snapshot!("first_day_qps_200x60", render(&app, &vm, 200, 60));
    // At 80 columns the name is cut in the middle (its ends tell endpoints apart), after its
    // kind's name, never within it (issue 39, item 3: "worke…07fdf010").
    let narrow = text(&render(&app, &vm, 80, 24));
    assert!(narrow.contains("worker@…584100"), "{narrow}");
    assert!(!narrow.contains("worke…"), "{narrow}");
    assert!(
        !narrow.contains("worker@0x55d1c2a04100→ep@0x7f660e39f0584100"),
        "{narrow}"
    );
}

#[test]
fn an_unknown_filter_key_is_named() {
    let vm = rankless_pair();
    let mut app = App::new(Theme::dark());
    keys(&mut app, "2/bogus=1");
    let prompt = text(&render(&app, &vm, 120, 35));
    assert!(
        prompt.contains("✗ bogus= is no filter key (keys: host rank pid"),
        "while typing:\n{prompt}"
    );
    app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    for (w, h) in [(80, 24), (120, 35)] {
        let s = text(&render(&app, &vm, w, h));
        assert!(s.contains("bogus= is no filter key"), "{w}×{h}:\n{s}");
    }
    insta::assert_snapshot!(
        "first_day_unknown_filter_key_120x35",
        render(&app, &vm, 120, 35)
    );
}

#[test]
fn the_theme_key_says_which_theme_is_on() {
    let vm = sample_view_model();
    let mut app = App::new(Theme::dark());
    keys(&mut app, "t");
    let s = text(&render(&app, &vm, 80, 24));
    let last = s.lines().last().unwrap_or_default();
    assert!(
        last.contains("theme light (t: next of dark, light, mono)"),
        "{last:?}"
    );
    keys(&mut app, "t");
    let s = text(&render(&app, &vm, 80, 24));
    assert!(
        s.lines().last().unwrap_or_default().contains("theme mono"),
        "{s}"
    );
    // The next key takes the answer away; the help names the theme on.
    keys(&mut app, "?");
    let s = text(&render(&app, &vm, 80, 24));
    assert!(s.contains("t theme (now mono)"), "{s}");
    assert!(
        !s.lines()
            .last()
            .unwrap_or_default()
            .contains("theme mono ("),
        "{s}"
    );
}

#[test]
fn no_rank_matrix_for_processes_without_ranks() {
    let vm = rankless_pair();
    let mut app = App::new(Theme::dark());
    // One node, no ranks: the node matrix first; `m` moves to the rank matrix.
    keys(&mut app, "5m");
    let s = text(&render(&app, &vm, 120, 35));
    assert!(s.contains("rank × rank"), "{s}");
    assert!(
        s.contains("no rank matrix: no traced process has an MPI/NCCL rank"),
        "{s}"
    );
    assert!(!s.contains("no rank matrix yet"), "{s}");
    // Ranks known but no traffic yet: "yet" is right.
    let mut ranked = rankless_pair();
    ranked.processes[0].rank = Some(0);
    let s = text(&render(&app, &ranked, 120, 35));
    assert!(s.contains("no rank matrix yet"), "{s}");
}

#[test]
fn sort_keys_are_the_columns_on_screen_and_marked_with_arrows() {
    let vm = sample_view_model();
    for (w, h) in [(80, 24), (200, 60)] {
        let mut app = App::new(Theme::dark());
        keys(&mut app, "2");
        render(&app, &vm, w, h);
        for _ in 0..25 {
            keys(&mut app, "s");
            let s = text(&render(&app, &vm, w, h));
            let head = s
                .lines()
                .find(|l| l.contains("QPN/ep"))
                .expect("the table header");
            assert_eq!(
                head.matches('↓').count() + head.matches('↑').count(),
                1,
                "{w}×{h}: the sorted column is on screen: {head:?}"
            );
            assert!(!head.contains('▾') && !head.contains('▴'), "{head:?}");
        }
    }
}

#[test]
fn the_program_log_path_is_whole_at_120_columns() {
    let mut vm = rankless_pair();
    vm.status.notice =
        Some("ucx_perftest running (pid 1234567) · output in ~/.local/state/sigmatop/sigmatop-run-1234560.log".into());
    for tab in ["1", "2"] {
        let mut app = App::new(Theme::dark());
        keys(&mut app, tab);
        let s = text(&render(&app, &vm, 120, 35));
        assert!(
            s.contains("output in ~/.local/state/sigmatop/sigmatop-run-1234560.log"),
            "tab {tab}:\n{s}"
        );
    }
    let app = App::new(Theme::dark());
    insta::assert_snapshot!("first_day_run_notice_120x35", render(&app, &vm, 120, 35));
}

/// Failed operations: the status line counts them, and the selected QP's detail pane says how
/// many of its operations reported an error (at both sizes).
#[test]
fn failed_operations_in_the_status_line_and_the_qp_detail() {
    let mut vm = sample_view_model();
    for e in &mut vm.endpoints {
        e.errors = 3;
    }
    vm.status.errors = 5;
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        render(&app, &vm, w, h);
        keys(&mut app, "2");
        let backend = render(&app, &vm, w, h);
        let screen: String = backend
            .buffer()
            .content()
            .chunks(w as usize)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        assert!(screen.contains("5 failed"), "{w}x{h}:\n{screen}");
        assert!(!screen.contains("no errors"), "{w}x{h}:\n{screen}");
        if h >= 60 {
            assert!(
                screen.contains("failed: 3 operations reported an error"),
                "{w}x{h}:\n{screen}"
            );
        }
    }
}

/// Issue 39, item 7: where nothing is unattributed there is no row of zeros for it, and the QPs
/// title says so ("none unattributed") at 80x24 and 200x60.
#[test]
fn qps_title_says_none_unattributed() {
    let mut vm = sample_view_model();
    vm.endpoints.retain(|e| !e.unattributed);
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        render(&app, &vm, w, h);
        keys(&mut app, "2");
        let s = text(&render(&app, &vm, w, h));
        let title = s
            .lines()
            .find(|l| l.contains(" QPs & endpoints "))
            .unwrap_or_else(|| panic!("no QPs title {w}x{h}:\n{s}"));
        assert!(title.contains("none unattributed"), "{w}x{h}: {title}");
        assert!(!s.contains("(unattributed)"), "{w}x{h}:\n{s}");
    }
}

/// Issue 39, item 7: the bandwidth chart has a time axis. Its title says the time it spans and a
/// column's worth (60 samples of 250 ms: "last 15s · 250ms a column"); where it is tall, an axis
/// line under it puts "0s" at the newest sample (the right edge) and "-10s" 40 columns left of it.
#[test]
fn the_bandwidth_chart_has_a_time_axis() {
    let vm = sample_view_model();
    for (w, h) in SIZES {
        let s = text(&render(&App::new(Theme::dark()), &vm, w, h));
        let title = s
            .lines()
            .find(|l| l.contains(" Bandwidth "))
            .unwrap_or_else(|| panic!("no Bandwidth title {w}x{h}:\n{s}"));
        assert!(
            title.contains("Bandwidth last 15s · 250ms a column · peak"),
            "{w}x{h}: {title}"
        );
        if h < 60 {
            continue;
        }
        let axis = s
            .lines()
            .find(|l| l.trim_end().ends_with("0s") && l.contains("-10s"))
            .unwrap_or_else(|| panic!("no time axis {w}x{h}:\n{s}"));
        let cols: Vec<char> = axis.chars().collect();
        let zero_end = axis.trim_end().chars().count() - 1;
        let ten_end = axis.find("-10s").map(|b| axis[..b].chars().count() + 3);
        assert_eq!(ten_end, Some(zero_end - 40), "{w}x{h}: {axis:?}");
        assert_eq!(cols.len(), w as usize, "{axis:?}");
    }
}

#[test]
fn collectives() {
    snap("collectives", "c");
}

/// Issue 39, item 7: events of NCCL types the plugin does not read lose no figure and raise no
/// warning sign in the Collectives view's title ("NCCL records dropped 0 · unread events 80 ·
/// unmatched 0"); records dropped are said, with their sign, and nothing that is 0.
#[test]
fn collectives_title_warns_only_of_what_is_lost() {
    for (dropped, unknown) in [(0, 80), (5, 80)] {
        let mut vm = sample_view_model();
        vm.collectives.dropped_records = dropped;
        vm.collectives.unknown_events = unknown;
        for (w, h) in SIZES {
            let mut app = App::new(Theme::dark());
            render(&app, &vm, w, h);
            keys(&mut app, "c");
            let s = text(&render(&app, &vm, w, h));
            let title = s
                .lines()
                .find(|l| l.contains(" Collectives "))
                .unwrap_or_else(|| panic!("no Collectives title {w}x{h}:\n{s}"));
            assert!(
                !title.contains(" 0 ") && !title.contains("unread") && !title.contains("80"),
                "{w}x{h}: {title}"
            );
            assert_eq!(
                title.contains("⚠ 5 NCCL records dropped"),
                dropped == 5,
                "{w}x{h}: {title}"
            );
        }
    }
}

/// Issue 39, item 7: the Ranks section's hang threshold does not read as a count of hung ranks
/// ("Ranks 6 · hung after 2.0s open" read as "6 ranks hung").
#[test]
fn the_ranks_title_says_the_hang_threshold_as_one() {
    let vm = sample_view_model();
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        render(&app, &vm, w, h);
        keys(&mut app, "c");
        let s = text(&render(&app, &vm, w, h));
        let ranks = s
            .lines()
            .find(|l| l.contains(" Ranks "))
            .unwrap_or_else(|| panic!("no Ranks title {w}x{h}:\n{s}"));
        assert!(
            ranks.contains("Ranks 6 · a collective open over 2.0s counts as hung"),
            "{w}x{h}: {ranks}"
        );
    }
}

/// The live hung-collective warning: in the warnings strip of every view and in the Overview's
/// box, naming the rank it waits for; the Collectives view marks the open collective and the
/// silent rank.
#[test]
fn hung_collective_warning() {
    let mut vm = sample_view_model();
    // The hung collective alone (the sample's stalled edge would come first).
    vm.warnings
        .retain(|w| w.kind != sigmatop_tui::WarningKind::StalledEdge);
    vm.warnings.insert(
        0,
        sigmatop_tui::Warning {
            kind: sigmatop_tui::WarningKind::HungCollective,
            message: "AllReduce #225 waits for r3 (silent) 3.4s · comm 7f3a1b2c".into(),
            ..Default::default()
        },
    );
    for (w, h) in SIZES {
        for (tab, name) in [("1", "overview"), ("c", "collectives")] {
            let mut app = App::new(Theme::dark());
            render(&app, &vm, w, h);
            keys(&mut app, tab);
            let backend = render(&app, &vm, w, h);
            let s = text(&backend);
            assert!(s.contains("waits for r3"), "{tab} {w}x{h}:\n{s}");
            insta::assert_snapshot!(format!("hung_{name}_{w}x{h}"), backend);
        }
    }
}

/// Issue 25, item 8: a rank that segfaulted is not `exited` like the others: its state column
/// says `SIGSEGV` (in the error style) and the status line says what killed it.
#[test]
fn a_killed_rank_says_its_signal() {
    let mut vm = sample_view_model();
    let r1 = vm
        .processes
        .iter_mut()
        .find(|p| p.rank == Some(1))
        .expect("rank 1");
    r1.exited = true;
    r1.end = "SIGSEGV".into();
    r1.tx_bps = 0.0;
    r1.rx_bps = 0.0;
    let pid = r1.pid;
    vm.status.message = Some("killed by SIGSEGV (signal 11)".into());
    for (w, h) in SIZES {
        let app = App::new(Theme::dark());
        let b = render(&app, &vm, w, h);
        let s = text(&b);
        let row = s
            .lines()
            .find(|l| l.contains(&pid.to_string()))
            .unwrap_or_else(|| panic!("{w}×{h}: no row of pid {pid}:\n{s}"));
        assert!(
            row.contains("SIGSEGV") && !row.contains("exited"),
            "{w}×{h}: {row}"
        );
        assert!(s.contains("killed by SIGSEGV (signal 11)"), "{w}×{h}:\n{s}");
        insta::assert_snapshot!(format!("rank_killed_{w}x{h}"), b);
    }
}

fn line_of<'a>(s: &'a str, what: &str) -> &'a str {
    s.lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what}:\n{s}"))
}

/// Issue 36, item 3: a rank that stopped reporting (SIGSTOPped) is `silent 6.2s` in its row, its
/// rates 0 (not its last ones); the QPs of its peers that wait on it are marked `waits` and its
/// own `silent`; the Nodes view says which rank and node; one warning names it and who waits on
/// it, with pids.
#[test]
fn a_silent_rank_and_who_waits_on_it() {
    let mut vm = sample_view_model();
    let r3 = vm
        .processes
        .iter_mut()
        .find(|p| p.rank == Some(3))
        .expect("rank 3");
    r3.silent_s = Some(6.2);
    r3.tx_bps = 0.0;
    r3.rx_bps = 0.0;
    r3.ops_per_s = 0.0;
    let pid = r3.pid;
    let host = r3.host.clone();
    for e in &mut vm.endpoints {
        if e.rank == Some(3) {
            e.mark = "silent".into();
            e.waits_on =
                "r3 silent 6.2s: no frame since (stopped or hung); rates not known".to_string();
            (e.tx_bps, e.rx_bps, e.ops_per_s) = (0.0, 0.0, 0.0);
        } else if e.peer.rank == Some(3) {
            e.mark = "waits".into();
            e.waits_on = format!("r3 ({host} pid {pid}), silent 6.2s");
            (e.tx_bps, e.rx_bps, e.ops_per_s) = (0.0, 0.0, 0.0);
        }
    }
    for n in &mut vm.nodes {
        if n.host == host {
            n.silent = 1;
        }
    }
    for r in &mut vm.ranks {
        if r.rank == 3 {
            r.silent_s = Some(6.2);
        }
    }
    let warning = format!(
        "r3 ({host} pid {pid}) silent 6.2s — waited on by r2 (QP 0x2a23: 382 receives posted), r7 (ep#3: nothing moves)"
    );
    // Where the core puts it: after the stalled edges and hung collectives.
    let at = vm
        .warnings
        .iter()
        .take_while(|w| {
            matches!(
                w.kind,
                sigmatop_tui::WarningKind::StalledEdge | sigmatop_tui::WarningKind::HungCollective
            )
        })
        .count();
    vm.warnings.insert(
        at,
        sigmatop_tui::Warning {
            kind: sigmatop_tui::WarningKind::Silent,
            message: warning.clone(),
            short: "r3 silent 6.2s · waited on by r2 +1".into(),
        },
    );
    for (w, h) in SIZES {
        for (tab, name) in [("1", "overview"), ("2", "qps"), ("4", "nodes")] {
            let mut app = App::new(Theme::dark());
            render(&app, &vm, w, h);
            keys(&mut app, tab);
            let backend = render(&app, &vm, w, h);
            let s = text(&backend);
            match tab {
                "1" => {
                    assert!(
                        s.contains(&format!(
                            "⚠ r3 ({host} pid {pid}) silent 6.2s — waited on by r2"
                        )),
                        "{w}x{h}:\n{s}"
                    );
                    let row = s
                        .lines()
                        .find(|l| l.contains(&pid.to_string()) && !l.contains("waited on"))
                        .unwrap_or_else(|| panic!("{w}×{h}: no row of pid {pid}:\n{s}"));
                    if w >= 200 {
                        assert!(row.contains("silent 6.2s"), "{w}×{h}: {row}");
                        assert!(s.contains("1 silent"), "{s}");
                    }
                }
                // Its rows and its waiters' sink in the default sort (their rates are 0): on
                // the tall terminal they show, marked.
                "2" if h >= 60 => assert!(
                    s.contains("⚠ silent") && s.contains("⚠ waits"),
                    "{w}x{h}:\n{s}"
                ),
                "2" => {}
                _ => {
                    assert!(s.contains("silent: r3"), "{w}x{h}:\n{s}");
                    assert!(line_of(&s, "silent 6.2s").contains(" 3 "), "{w}x{h}:\n{s}");
                }
            }
            insta::assert_snapshot!(format!("silent_{name}_{w}x{h}"), backend);
        }
    }
}

/// QPs whose peers are not traced (issue 36): each is named by its address, as the core fills
/// the peer (`10.0.21.1 qp 0x100` for an IPv4-mapped GID, `lid 24 qp 0x100` on InfiniBand
/// without a GRH, an IPv6 GID, `node7 qp 0x10c` where a traced process is on that address),
/// beside one traced peer. Whole at 200 columns; at 80 cut in the middle, so the QPN stays.
#[test]
fn qps_to_untraced_peers_are_named_by_address() {
    let mut vm = rankless_pair();
    vm.endpoints.clear();
    let peers: [(&str, &str); 5] = [
        ("", "10.0.21.1 qp 0x100"),
        ("", "lid 24 qp 0x101"),
        ("", "fe80::2c9:300:0:18 qp 0x102"),
        ("node7", "qp 0x10c"),
        ("vm", "pid 4200"),
    ];
    for (i, (host, id)) in peers.iter().enumerate() {
        let mut e = endpoint(4100, &format!("0x{:x}", 0x100 + i), false);
        e.layer = "ibverbs".into();
        e.transport = "RC".into();
        e.state = "RTS".into();
        e.tx_bps = 1e6 * (5 - i) as f64;
        e.peer = sigmatop_tui::Peer {
            host: host.to_string(),
            rank: None,
            id: id.to_string(),
        };
        vm.endpoints.push(e);
    }
    vm.header.processes = 1;
    vm.header.qps = peers.len() as u32;
    vm.processes.truncate(1);
    let mut app = App::new(Theme::dark());
    keys(&mut app, "2");
    let wide = text(&render(&app, &vm, 200, 60));
    for (host, id) in peers {
        let whole = format!("{host} {id}");
        assert!(wide.contains(whole.trim()), "{whole} whole at 200:\n{wide}");
    }
    let narrow = text(&render(&app, &vm, 80, 24));
    for q in ["qp 0x100", "qp 0x101", "qp 0x102", "qp 0x10c"] {
        assert!(narrow.contains(q), "{q} at 80 columns:\n{narrow}");
    }
    insta::assert_snapshot!("qps_untraced_peers_80x24", narrow);
    insta::assert_snapshot!("qps_untraced_peers_200x60", wide);
}

/// Issue 39, item 3 (80 columns, the ssh case): the Nodes view drops its bar (a picture of the
/// rate out, which is on screen) before the totals; each ◀ stands right after the figure it
/// flags (the rate, then its ratio to the mean), never after the other direction's figure.
#[test]
fn nodes_at_80_columns_keep_the_totals_and_mark_the_figure_they_flag() {
    let vm = sample_view_model();
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        keys(&mut app, "4");
        let s = text(&render(&app, &vm, w, h));
        let head = line_of(&s, "node↑");
        assert!(head.contains("▼ total"), "{w}×{h}: {head:?}");
        if w == 80 {
            assert!(!head.contains("▲ egress"), "{w}×{h}: no bar: {head:?}");
        }
        // node2's egress is 2.08× the mean: "13.2G ◀ 2.08×", the ingress next.
        let node2: Vec<&str> = line_of(&s, "  node2 ").split_whitespace().collect();
        assert_eq!(
            &node2[..6],
            ["node2", "13.2G", "◀", "2.08×", "4.02G", "0.63×"]
        );
        // rank 7's ingress, 1.93×: its ◀ follows the ingress rate.
        let r7 = s
            .lines()
            .find(|l| l.split_whitespace().next() == Some("7"))
            .unwrap_or_default();
        let r7: Vec<&str> = r7.split_whitespace().collect();
        assert_eq!(&r7[..6], ["7", "2.04G", "0.64×", "6.13G", "◀", "1.93×"]);
    }
}

/// Issue 39, item 3: the header names rows by kind (a UCX job's endpoints and workers are not
/// "QPs"), at 80 columns too; counters that say 0 give way to a warning in the status line.
#[test]
fn the_header_names_rows_by_kind_and_zeros_give_way_to_a_warning() {
    let mut vm = sample_view_model();
    vm.header.qps = 20;
    vm.header.row_kinds = vec![("endpoints".into(), 16), ("workers".into(), 4)];
    vm.status = Default::default();
    vm.warnings = vec![sigmatop_tui::Warning {
        kind: sigmatop_tui::WarningKind::NodeSkew,
        message: "node2 egress 2.08× mean over the last 10s".into(),
        short: String::new(),
    }];
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        keys(&mut app, "2");
        let s = text(&render(&app, &vm, w, h));
        let top = s.lines().next().unwrap_or_default();
        assert!(
            top.contains("16 endpoints · 4 workers") && !top.contains("QPs"),
            "{w}×{h}: {top:?}"
        );
        let status: Vec<&str> = s.lines().rev().take(3).collect();
        let status = status.join("\n");
        assert!(
            status.contains("⚠ node2 egress 2.08× mean over the last 10s"),
            "{w}×{h}: the warning whole: {status}"
        );
        if w == 80 {
            assert!(!status.contains("drops 0"), "{w}×{h}: {status:?}");
        }
    }
}

/// Issue 39, item 2: the "max" under each bandwidth row is that row's (it was the larger of ▲
/// and ▼ under both), and each row is scaled to it.
#[test]
fn each_bandwidth_row_says_its_own_max() {
    let mut vm = sample_view_model();
    vm.bandwidth_history = (0..10)
        .map(|i| (5e9 * (i + 1) as f64 / 10.0, 2e9 * (10 - i) as f64 / 10.0))
        .collect();
    for (w, h) in SIZES {
        let s = text(&render(&App::new(Theme::dark()), &vm, w, h));
        let maxes: Vec<&str> = s
            .lines()
            .filter(|l| l.trim_start().starts_with("max "))
            .map(|l| l.split("max ").nth(1).unwrap_or_default())
            .map(|l| l.split("  ").next().unwrap_or_default().trim())
            .collect();
        if w < 200 && maxes.is_empty() {
            continue; // one line per row: no room for a max line
        }
        assert_eq!(maxes, ["5.00 GB/s", "2.00 GB/s"], "{w}×{h}:\n{s}");
    }
}

/// Issue 39, item 7: stepping back through a live view's history, the header no longer says
/// `live` (in the "ok" colour): it says the view is history; at the newest sample it is live.
#[test]
fn the_header_says_history_in_the_past() {
    let mut vm = sample_view_model();
    vm.header.source = "live".into();
    vm.history_len = 25;
    for (pos, want, not) in [
        (16, "· history, not live", "· live "),
        (24, "· live ", "history"),
    ] {
        vm.history_pos = pos;
        for (w, h) in SIZES {
            let s = text(&render(&App::new(Theme::dark()), &vm, w, h));
            let head = s.lines().next().unwrap_or_default();
            assert!(
                head.contains(want) && !head.contains(not),
                "sample {}/25 at {w}x{h}: {head:?}",
                pos + 1
            );
        }
    }
}

/// Issue 39, item 2: a view of the past says that each process is read at its own latest
/// snapshot, and how far apart they may be; a job younger than the window says how long its
/// averages are over.
#[test]
fn the_tab_line_says_what_the_figures_are_over() {
    let mut vm = sample_view_model();
    vm.history_len = 25;
    vm.history_pos = 16;
    vm.header.snapshot_lag_s = Some(0.21);
    vm.header.window_span_s = Some(3.2);
    let s = text(&render(&App::new(Theme::dark()), &vm, 200, 60));
    let tabs = s.lines().nth(1).unwrap_or_default();
    assert!(
        tabs.contains("window 10s (3.2s so far)")
            && tabs.contains("◀ sample 17/25, each process's snapshot ≤ 0.2s before"),
        "{tabs:?}"
    );
    let s = text(&render(&App::new(Theme::dark()), &vm, 80, 24));
    assert!(
        s.lines().nth(1).unwrap_or_default().contains("17/25"),
        "{s}"
    );
}

/// Issue 38: a communicator whose calls NCCL made of parts (AlltoAll, Group) has their rows, and
/// with kernel events a second arrival line from the GPU's view ("GPU kernels") under the host
/// calls' (labelled so); the empty view of a recording without NCCL events says why.
#[test]
fn collectives_with_calls_made_of_parts_and_gpu_arrivals() {
    let mut vm = sample_view_model();
    let c = &mut vm.collectives;
    let comm = c.rows.first().map(|r| r.comm.clone()).unwrap_or_default();
    for (func, count, bytes) in [("AlltoAll", 24, 24_576), ("Group", 24, 491_520)] {
        c.rows.insert(
            0,
            sigmatop_tui::CollRow {
                comm: comm.clone(),
                ranks: "4/4".into(),
                func: func.into(),
                algo: "-".into(),
                proto: "-".into(),
                count,
                bytes,
                time_s: 3.2,
                busbw_bps: 5.0e3,
                ..Default::default()
            },
        );
    }
    let a = &mut c.arrivals[0];
    a.gpu_collectives = 48;
    a.gpu_median_spread_s = 0.000_012;
    a.gpu_max_spread_s = 0.000_31;
    a.gpu_max_last_rank = Some(0);
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        render(&app, &vm, w, h);
        keys(&mut app, "c");
        let backend = render(&app, &vm, w, h);
        let s = text(&backend);
        assert!(
            s.contains("AlltoAll") && s.contains("Group"),
            "{w}x{h}:\n{s}"
        );
        assert!(
            s.contains("host calls:") && s.contains("GPU kernels: 48 compared"),
            "{w}x{h}:\n{s}"
        );
        insta::assert_snapshot!(format!("collectives_parts_gpu_{w}x{h}"), backend);
    }
    let mut app = App::new(Theme::dark());
    app.collectives_hint =
        Some("this recording's NCCL profiler events were left out for size".into());
    let empty = ViewModel::default();
    render(&app, &empty, 80, 24);
    keys(&mut app, "c");
    let s = text(&render(&app, &empty, 80, 24));
    assert!(s.contains("left out for size"), "{s}");
}

/// A GPU whose QPs stopped ringing (issue 40 item 3): its series says "stop" and how long where
/// the rate stands, the other GPU's rate as before; at 80×24 and 200×60.
#[test]
fn a_stopped_gpu_says_so_in_the_doorbell_view() {
    let mut vm = sample_view_model();
    let s = &mut vm.doorbells.series[1];
    s.rate_now = 0.0;
    s.stopped_s = Some(4.1);
    let label = s.label.clone();
    for (w, h) in SIZES {
        let mut app = App::new(Theme::dark());
        keys(&mut app, "d");
        let backend = render(&app, &vm, w, h);
        let text = format!("{backend}");
        let line = text
            .lines()
            .find(|l| l.contains(&label))
            .unwrap_or_else(|| panic!("{w}x{h}: no row of {label}:\n{text}"));
        assert!(line.contains("stop 4.1s"), "{w}x{h}: {line}");
        insta::assert_snapshot!(format!("doorbells_stopped_{w}x{h}"), backend);
    }
}
