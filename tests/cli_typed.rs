//! The CLI as users type it (issue 14, item 5), end to end with real programs, the figures a
//! person reads on the screen compared with values computed from what the programs were asked to
//! do (never from sigmatop's own reading of a recording):
//!
//! 1. `sigmatop run -- ucx_life paced 30 50` in tmux: a real UCX program (tests/programs/ucx_life.c,
//!    30 tagged messages of 64 B, one every 50 ms) shows up live; once it exited the dashboard
//!    says so and keeps its totals: 1.92 kB sent on its endpoint in 30 `tag_send`, received on its
//!    worker in 30 `tag_recv`, 1.92k each way on the node; `q` leaves with its status 0.
//! 2. `sigmatop --record out/ -- mpirun -np 4 --oversubscribe --mca pml ucx --mca pml_ucx_tls any
//!    --mca pml_ucx_devices any ./mpi_pattern`, as the README says for a host without an RDMA NIC
//!    (and `--oversubscribe`, since CI has 2 cores), with no `-x`: the ranks inherit LD_PRELOAD and
//!    the SIGMATOP_* variables from mpirun. tests/programs/mpi_pattern.c sends (i+1)·(j+2)·1000
//!    bytes from rank i to rank j; the summary printed at the end has each rank's row, each
//!    endpoint's sends and the total exactly so; the record has the four ranks.
//! 3. `sigmatop replay out/` of that recording in tmux: the rank × rank matrix, the rank totals
//!    and the node totals are the pattern's.
mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::tmux::Tmux;
use common::*;

const LIMIT: Duration = Duration::from_secs(60);

fn ucx_life() -> PathBuf {
    build_program("gcc", "ucx_life.c", "ucx_life", &["-lucp", "-lucs"])
}

#[test]
fn run_shows_a_real_programs_exact_totals_in_the_dashboard() {
    let (n, size) = (30u64, 64u64);
    let dir = scratch("cli-run");
    let line = format!(
        "SIGMATOP_SOCKET_DIR={} UCX_TLS=sm,self {} run -- {} paced {n} 50",
        dir.join("sock").display(),
        sigmatop_bin().display(),
        ucx_life().display()
    );
    let Some(t) = Tmux::start_in("cli-run", &line, Some(&dir)) else {
        return;
    };
    t.wait_for("the program live in the dashboard", LIMIT, |s| {
        // The layers column shows the layers the program used (UCX), not all that were enabled.
        s.contains("1 proc")
            && s.lines()
                .any(|l| l.contains(" ucx ") && l.contains("simple"))
            && (s.contains(" up") || s.contains("exited"))
    });
    let done = t.wait_for("the program's exit", LIMIT, |s| {
        s.contains("» ucx_life exited (status 0)")
    });
    // No loss counter is above zero (they fold to "no losses" to leave room for the notice).
    assert!(
        done.contains("no losses") || done.contains("drops 0 "),
        "{done}"
    );
    let total = table_si(n * size); // 1.92k
    t.keys(&["4"]);
    let nodes = t.wait_for("the Nodes view", LIMIT, |s| s.contains("[4 Nodes]"));
    let vm = nodes
        .lines()
        .find(|l| l.trim_start().starts_with("vm "))
        .unwrap_or_else(|| panic!("no node row:\n{nodes}"));
    let w = words(vm);
    assert_eq!(w[5..7], [total.clone(), total.clone()], "node totals: {vm}");
    // The QPs view: the endpoint's and the worker's totals, one row selected at a time.
    t.keys(&["2"]);
    let mut seen = (false, false);
    for _ in 0..4 {
        let s = t.wait_settled("a selected row", LIMIT, |s| s.contains("selected row"));
        let (before, sel) = s.split_once("selected row").unwrap_or_default();
        let header = before.lines().last().unwrap_or_default();
        // The endpoint sent, the receiving worker received; the sending worker did neither.
        let row = if header.contains("ucx ep@") {
            seen.0 = true;
            Some(("tag_send", "▲ tx"))
        } else if header.contains("ucx worker@") && sel.contains("tag_recv") {
            seen.1 = true;
            Some(("tag_recv", "▼ rx"))
        } else {
            None
        };
        if let Some((op, dir)) = row {
            assert!(
                sel.contains(&format!("ops by opcode (since start): {op} {n}")),
                "{sel}"
            );
            let line = sel.lines().find(|l| l.contains(dir)).unwrap_or_default();
            assert!(
                line.trim_end()
                    .ends_with(&format!("total   {}", summary_bytes(n * size))),
                "{line}"
            );
        }
        if seen == (true, true) {
            break;
        }
        // The next row, once the selection has moved to it.
        t.keys(&["Down"]);
        t.wait_for(
            &format!("the selection to move down from {header:?}"),
            LIMIT,
            |s| {
                s.split_once("selected row")
                    .and_then(|(before, _)| before.lines().last())
                    .is_some_and(|h| h != header)
            },
        );
    }
    assert_eq!(seen, (true, true), "the endpoint's and the worker's rows");
    t.keys(&["q"]);
    t.wait_for("sigmatop's exit", LIMIT, |s| s.contains("SIGMATOP-EXIT=0"));
    // The program's own output went to the log the dashboard named.
    let log = std::fs::read_dir(dir.join("state/sigmatop"))
        .expect("the state directory the run log is in")
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("sigmatop-run-"))
        .expect("the run log");
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(text.contains(&format!(" sent {n}")), "{text}");
    // Nothing in the working directory (issue 22: a test's empty log was once committed).
    let here: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert!(here.is_empty(), "logs in the working directory: {here:?}");
}

/// tests/programs/mpi_pattern.c: rank i sends this many bytes to rank j.
fn pattern(i: u64, j: u64) -> u64 {
    (i + 1) * (j + 2) * 1000
}

fn mpi_pattern() -> PathBuf {
    build_program("mpicc", "mpi_pattern.c", "mpi_pattern", &[])
}

#[test]
fn record_mpirun_without_x_then_replay_it_in_the_dashboard() {
    let np = 4u64;
    let prog = mpi_pattern();
    let dir = scratch("cli-mpirun");
    // As typed, from the directory the user is in: a relative `out/`, no -x.
    let out = Command::new(sigmatop_bin())
        .args([
            "--record",
            "out/",
            "--",
            "mpirun",
            "-np",
            "4",
            "--oversubscribe",
        ])
        .args(["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any"])
        .args(["--mca", "pml_ucx_devices", "any"])
        .arg(&prog)
        .current_dir(&dir)
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env_remove("OMPI_MCA_pml")
        .env_remove("UCX_TLS")
        .stdin(std::process::Stdio::null())
        .output_bounded()
        .expect("sigmatop --record out/ -- mpirun");
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(stdout_of(&out).trim(), "mpi_pattern: 4 ranks done");

    // The summary at the end: per rank, per endpoint, in total.
    let sent = |i: u64| {
        (0..np)
            .filter(|&j| j != i)
            .map(|j| pattern(i, j))
            .sum::<u64>()
    };
    let recv = |j: u64| {
        (0..np)
            .filter(|&i| i != j)
            .map(|i| pattern(i, j))
            .sum::<u64>()
    };
    let lines: Vec<&str> = err.lines().collect();
    for i in 0..np {
        let at = lines
            .iter()
            .position(|l| {
                let w = words(l);
                w.len() > 3 && w[0] == "vm" && w[2] == i.to_string() && w[3] == "mpi_pattern"
            })
            .unwrap_or_else(|| panic!("no row for rank {i}:\n{err}"));
        let row = lines[at];
        assert!(
            words(row).join(" ").contains(&format!(
                "mpi_pattern {} {}",
                summary_bytes(sent(i)),
                summary_bytes(recv(i))
            )),
            "rank {i}: {row}"
        );
        assert!(
            words(row).ends_with(&["3".into(), "3".into(), "0".into()]),
            "rank {i}: 3 sends, 3 receives, nothing lost: {row}"
        );
        let block: Vec<&str> = lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("    "))
            .copied()
            .collect();
        for j in (0..np).filter(|&j| j != i) {
            let want = format!("r{j} tag_send 1×{}", summary_bytes(pattern(i, j)));
            assert!(
                block.iter().any(|l| words(l).join(" ").ends_with(&want)),
                "rank {i} → {j}: {want:?} in\n{}",
                block.join("\n")
            );
        }
        // Received: the bytes that arrived; the program posts receive buffers as large as the
        // messages, so the posted buffers are the same figure, shown apart.
        // "3×~333 B = 1.00 kB": the count, the mean size ("~" when the sizes differ) and the
        // total, not "3×1.00 kB" (issue 25, item 10).
        let times = summary_times;
        let want = format!(
            "tag_recv {} (posted {})",
            times(3, recv(i)),
            times(3, recv(i))
        );
        assert!(
            block.iter().any(|l| words(l).join(" ").ends_with(&want)),
            "rank {i}: {want:?} in\n{}",
            block.join("\n")
        );
    }
    let all: u64 = (0..np).map(sent).sum();
    let total = format!(
        "total: ▲ {b} in 12 ops, ▼ {b} in 12 ops; events lost 0",
        b = summary_bytes(all)
    );
    assert!(err.contains(&total), "{total:?} in\n{err}");
    assert!(err.contains("sigmatop: record written to out/"), "{err}");
    // The record: the four ranks, each from its own environment (OMPI_COMM_WORLD_RANK).
    let rec = dir.join("out");
    let recording =
        sigmatop::trace::reader::Recording::open(std::slice::from_ref(&rec)).expect("the record");
    let mut ranks: Vec<u32> = recording
        .processes
        .iter()
        .filter_map(|p| p.identity.rank)
        .collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2, 3]);

    // The same recording in the dashboard, as typed, at the recorded speed.
    let line = format!("{} replay out/", sigmatop_bin().display());
    let Some(t) = Tmux::start_in("cli-replay", &line, Some(&dir)) else {
        return;
    };
    t.wait_for("the replay to finish", LIMIT, |s| {
        s.contains("replay finished")
    });
    t.keys(&["5"]);
    let m = t.wait_for("the matrix", LIMIT, |s| s.contains("rank × rank"));
    let matrix: Vec<Vec<u64>> = (0..np)
        .map(|i| {
            (0..np)
                .map(|j| if i == j { 0 } else { pattern(i, j) })
                .collect()
        })
        .collect();
    assert_rank_matrix(&m, &matrix);
    t.keys(&["4"]);
    let v = t.wait_settled("the Nodes view with its 4 rank rows", LIMIT, |s| {
        s.contains("[4 Nodes]")
            && (0..np).all(|i| {
                s.lines().skip_while(|l| !l.contains("Ranks 4")).any(|l| {
                    words(l)
                        .into_iter()
                        .find(|w| w != "▸" && w != "◀")
                        .is_some_and(|w| w == i.to_string())
                })
            })
    });
    let vm = v
        .lines()
        .find(|l| l.trim_start().starts_with("vm "))
        .expect("node row");
    assert_eq!(words(vm)[5..7], [table_si(all), table_si(all)], "{vm}");
    // Rank rows: rank, egress and ingress B/s, ×mean twice, then the totals (the selection
    // mark ▸ and the skew mark ◀ left out).
    let rank_rows: Vec<Vec<String>> = v
        .lines()
        .skip_while(|l| !l.contains("Ranks 4"))
        .map(|l| {
            words(l)
                .into_iter()
                .filter(|w| w != "▸" && w != "◀")
                .collect()
        })
        .collect();
    for i in 0..np {
        let w = rank_rows
            .iter()
            .find(|w| w.first() == Some(&i.to_string()))
            .unwrap_or_else(|| panic!("no rank row {i}:\n{v}"));
        assert_eq!(
            w[5..7],
            [table_si(sent(i)), table_si(recv(i))],
            "rank {i} totals: {w:?}"
        );
    }
    t.keys(&["q"]);
    t.wait_for("sigmatop's exit", LIMIT, |s| s.contains("SIGMATOP-EXIT=0"));
}
