//! End to end as a person over ssh would use it: a real traced workload (libfabric's fi_pingpong
//! over tcp, under the preload), `sigmatop attach` in a detached tmux session with TERM=screen,
//! keys sent with `send-keys`, the screen read back with `capture-pane -p` after each.
//!
//! 1. attach while the workload runs: its endpoints show non-zero rates on the QPs tab, the
//!    doorbell view and the help overlay render, a filter applies, space pauses, the window resizes,
//!    q leaves and restores the terminal;
//! 2. attach before the workload starts and stay after it exits: the processes appear, then are
//!    marked exited with their totals kept.
//!
//! Each test runs its own tmux server (`tmux -L`), so nothing touches the user's sessions.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::*;

/// fi_pingpong server and client over tcp msg, traced in simple mode, live sockets in `sock`.
struct Workload {
    server: Proc,
    client: Proc,
}

impl Workload {
    fn command(sock: &Path, iters: u64) -> Command {
        let mut c = Command::new(require("fi_pingpong"));
        c.env("LD_PRELOAD", preload())
            .env("SIGMATOP_MODE", "simple")
            .env("SIGMATOP_SOCKET_DIR", sock)
            .env_remove("SIGMATOP_RECORD")
            .args([
                "-p",
                "tcp",
                "-e",
                "msg",
                "-S",
                "4096",
                "-I",
                &iters.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }

    /// The server; returns it with its port once it listens.
    fn server(sock: &Path, iters: u64) -> (Proc, u16) {
        start_server(
            |port| {
                let mut c = Self::command(sock, iters);
                c.args(["-B", &port.to_string()]);
                c
            },
            Duration::from_secs(30),
        )
    }

    fn client(sock: &Path, iters: u64, port: u16) -> Proc {
        spawn(Self::command(sock, iters).args(["-P", &port.to_string(), "127.0.0.1"]))
    }

    fn start(sock: &Path, iters: u64) -> Workload {
        let (server, port) = Self::server(sock, iters);
        let client = Self::client(sock, iters, port);
        Workload { server, client }
    }

    fn pids(&self) -> [u32; 2] {
        [self.server.id(), self.client.id()]
    }

    fn wait(&mut self, limit: Duration) {
        let start = Instant::now();
        for c in [&mut self.client, &mut self.server] {
            loop {
                match c.try_wait() {
                    Ok(Some(st)) => {
                        assert!(st.success(), "fi_pingpong failed: {st}");
                        break;
                    }
                    Ok(None) if start.elapsed() < limit => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => panic!("fi_pingpong did not finish within {limit:?}"),
                }
            }
        }
    }
}

/// A rate or volume cell with an SI prefix and a non-zero value ("672M", "80.0k", "1.92G").
fn nonzero_si(tok: &str) -> bool {
    let Some(num) = tok.strip_suffix(['k', 'M', 'G', 'T']) else {
        return false;
    };
    num.parse::<f64>().is_ok_and(|v| v > 0.0)
}

/// Rows of the QPs tab of process `pid` (its pid column, then the layer column `libfabric`), not rows
/// that merely name it as their peer.
fn ofi_rows(screen: &str, pid: u32) -> Vec<&str> {
    let pid = pid.to_string();
    screen
        .lines()
        .filter(|l| {
            let toks: Vec<&str> = l.split_whitespace().collect();
            toks.windows(2).any(|w| w[0] == pid && w[1] == "libfabric")
        })
        .collect()
}

fn attach_cmd(sock: &Path) -> String {
    format!(
        "{} attach --socket-dir {}",
        sigmatop_bin().display(),
        sock.display()
    )
}

fn sock_dir(name: &str) -> PathBuf {
    scratch(name).join("sock")
}

#[test]
fn attach_to_a_running_workload_and_drive_every_key() {
    let sock = sock_dir("tmux-running");
    let mut work = Workload::start(&sock, 50_000_000);
    let [server, client] = work.pids();
    let Some(t) = Tmux::start("running", &attach_cmd(&sock)) else {
        return;
    };
    let limit = Duration::from_secs(30);

    let overview = t.wait_for("both processes on the overview", limit, |s| {
        s.contains(&server.to_string()) && s.contains(&client.to_string())
    });
    assert!(overview.contains("sigmatop"), "{overview}");
    assert!(overview.contains("▲ tx B/s"), "{overview}");

    t.keys(&["2"]);
    let qps = t.wait_for("endpoints with non-zero rates on the QPs tab", limit, |s| {
        s.contains("QPs")
            && [server, client].iter().all(|pid| {
                ofi_rows(s, *pid)
                    .iter()
                    .any(|row| row.split_whitespace().any(nonzero_si))
            })
    });
    assert!(qps.contains("tcp"), "transport shown:\n{qps}");
    // fi_pingpong's traffic is all on its endpoints: no "(unattributed)" row of zeros per
    // process, the title says so (issue 39, item 7).
    assert!(
        qps.contains("none unattributed") && !qps.contains("(unattr"),
        "{qps}"
    );

    t.keys(&["d"]);
    let db = t.wait_for("the doorbell view", limit, |s| s.contains("Doorbells"));
    assert!(db.lines().count() >= 20, "{db}");

    t.keys(&["?"]);
    let help = t.wait_for("the help overlay", limit, |s| {
        s.to_lowercase().contains("help") && s.contains("quit")
    });
    t.keys(&["Escape"]);
    let after = t.wait_for("the help overlay closed", limit, |s| *s != help);
    assert!(after.contains("Doorbells"), "{after}");

    t.keys(&["2", "/"]);
    t.type_text(&format!("pid={client}"));
    t.keys(&["Enter"]);
    let filtered = t.wait_for("the filter applied", limit, |s| {
        s.contains(&format!("pid={client}")) && !ofi_rows(s, client).is_empty()
    });
    assert!(
        ofi_rows(&filtered, server).is_empty(),
        "the server's rows are filtered out:\n{filtered}"
    );

    t.keys(&["Space"]);
    let paused = t.wait_for("the paused mark", limit, |s| {
        s.to_lowercase().contains("paused")
    });
    // Frozen: the screen does not change while paused (collection goes on underneath).
    common::holds_for(
        "the view frozen while paused",
        Duration::from_millis(800),
        || {
            let now = t.capture();
            if now == paused {
                Ok(())
            } else {
                Err(format!("the screen changed from\n{paused}\nto\n{now}"))
            }
        },
    );
    t.keys(&["["]);
    // Stepping back is not live, and the header says so (issue 39, item 7: it said `live`).
    let past = t.wait_for("a step back through history", limit, |s| {
        s != paused
            && s.lines()
                .next()
                .unwrap_or_default()
                .contains("history, not live")
    });
    assert!(
        !past.lines().next().unwrap_or_default().contains("· live"),
        "{past}"
    );
    t.keys(&["Space"]);
    t.wait_for("unpaused", limit, |s| !s.to_lowercase().contains("paused"));

    t.tmux(&["resize-window", "-t", "main", "-x", "80", "-y", "24"]);
    let small = t.wait_for("the 80×24 redraw", limit, |s| {
        s.lines().count() <= 24 && s.contains("sigmatop") && s.contains("QPs")
    });
    assert!(
        small.lines().all(|l| l.chars().count() <= 80),
        "fits in 80 columns:\n{small}"
    );
    t.tmux(&["resize-window", "-t", "main", "-x", "200", "-y", "60"]);
    t.wait_for("the 200×60 redraw", limit, |s| {
        s.lines().any(|l| l.chars().count() > 120)
    });

    t.keys(&["q"]);
    let gone = t.wait_for("sigmatop to exit", limit, |s| s.contains("SIGMATOP-EXIT="));
    assert!(gone.contains("SIGMATOP-EXIT=0"), "{gone}");
    assert!(
        !gone.contains("QPs & endpoints"),
        "the alternate screen is gone:\n{gone}"
    );
    // The workload is unaffected by the dashboard coming and going.
    assert!(work.client.try_wait().expect("try_wait").is_none());
}

#[test]
fn attach_before_the_workload_and_stay_after_it_exits() {
    let sock = sock_dir("tmux-before");
    let Some(t) = Tmux::start("before", &attach_cmd(&sock)) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the waiting note", limit, |s| {
        s.contains("waiting for traced processes")
    });

    // fi_pingpong sets up libfabric only once its client connects; both then live about a second
    // (longer on a loaded machine), well over the dashboard's 200 ms socket scan.
    let mut work = Workload::start(&sock, 50_000);
    let [server, client] = work.pids();
    t.keys(&["2"]);
    t.wait_for("the workload's endpoints", limit, |s| {
        !ofi_rows(s, server).is_empty() || !ofi_rows(s, client).is_empty()
    });
    work.wait(Duration::from_secs(240));

    t.keys(&["1"]);
    // The Overview's own words, so that the QPs tab still on screen (its unattributed rows name
    // the pids and say "exited" too) cannot satisfy the wait before the key is handled.
    let done = t.wait_for("both processes marked exited", limit, |s| {
        s.contains("exited, totals kept")
            && s.lines()
                .filter(|l| {
                    (l.contains(&server.to_string()) || l.contains(&client.to_string()))
                        && l.contains("exited")
                })
                .count()
                == 2
    });
    assert!(done.contains("exited, totals kept"), "{done}");
    // Totals kept: the QPs tab (wide enough for the total columns) still shows each side's bytes.
    t.tmux(&["resize-window", "-t", "main", "-x", "200", "-y", "50"]);
    t.keys(&["2"]);
    let qps = t.wait_for("totals on the QPs tab", limit, |s| {
        [server, client].iter().all(|pid| {
            ofi_rows(s, *pid)
                .iter()
                .any(|row| row.split_whitespace().any(nonzero_si))
        })
    });
    assert!(qps.contains("total"), "{qps}");
    t.keys(&["q"]);
    let gone = t.wait_for("sigmatop to exit", limit, |s| s.contains("SIGMATOP-EXIT="));
    assert!(gone.contains("SIGMATOP-EXIT=0"), "{gone}");
}
