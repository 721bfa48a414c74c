//! `sigmatop attach node-a node-b` across two nodes, with real parts only: two network namespaces,
//! each with its own host name (a UTS namespace) and a real OpenSSH server (keys made here, in a
//! scratch directory; nothing of the system's ssh configuration is used or touched), and a client
//! ssh configuration of the test's own that the dashboard's `ssh` reads (`--ssh-opt=-F...`).
//! A dashboard host in the root namespace reaches each node through a veth pair of its own; the
//! nodes talk to each other over a third one.
//!
//! The traffic: ucx_perftest tag_bw over tcp, its server on node-a and its client on node-b: node-b
//! sends (N + 1) × SIZE bytes to node-a and nothing else moves between traced processes (see
//! tests/ucx_perftest.rs). Both sides keep their sockets after their work (tests/programs/
//! linger.c), so a live attach sees the final, exact counters.
//!
//! 1. `sigmatop attach node-a node-b` in tmux: the Nodes view shows both hosts up with one process
//!    each, and the node matrix shows node-b → node-a = (N + 1) × SIZE, nothing elsewhere;
//! 2. `sigmatop attach --json --once node-a node-b` prints that matrix exactly, both hosts up;
//! 3. the same through `--via` with a template command of the test's own (nsenter into each
//!    node's namespaces instead of ssh);
//! 4. a second workload runs on node-a; node-b's sshd is killed (the listener and its sessions):
//!    the dashboard marks node-b lost with ssh's own words while node-a's row keeps changing.
//!
//! Needs root (namespaces, sshd); without it the test says so and is skipped, except under
//! CI=true, where a missing prerequisite fails.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::Net;
use common::tmux::Tmux;
use common::*;

const N: u64 = 3000;
const SIZE: u64 = 4096;
const SSHD: &str = "/usr/sbin/sshd";

/// A missing prerequisite: a failure under CI=true, a loud skip elsewhere, listed by
/// scripts/test.sh (tests/common `skip`).
fn skip(what: &str) {
    common::skip(&format!(
        "{what} (scripts/test.sh installs every prerequisite and runs as root)"
    ));
}

/// /run/sshd, sshd's privilege separation directory, made for the test when missing and removed
/// afterwards.
struct PrivsepDir(bool);

impl Drop for PrivsepDir {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::fs::remove_dir("/run/sshd");
        }
    }
}

struct Node {
    name: &'static str,
    ns: String,
    /// Address the dashboard host reaches it at.
    admin_ip: String,
    /// Address on the link between the nodes, and that link's device.
    ip: String,
    dev: String,
    sock: PathBuf,
}

impl Node {
    /// `prog` inside this node: its namespace, its host name, its socket directory. `preload`
    /// is set for `prog` alone (not for the shell and tools that enter the node: the lingering
    /// shim would keep `hostname` alive).
    fn run(
        &self,
        prog: &[&str],
        preload: Option<&str>,
        env: &[(&str, &str)],
        log: &Path,
    ) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "unshare", "--uts", "sh", "-c"])
            .arg(format!(
                "hostname {} && exec env LD_PRELOAD=\"$NODE_PRELOAD\" \"$@\"",
                self.name
            ))
            .arg("sh")
            .args(prog)
            .env("NODE_PRELOAD", preload.unwrap_or(""))
            .env_remove("LD_PRELOAD")
            .env("SIGMATOP_SOCKET_DIR", &self.sock)
            .env("SIGMATOP_MODE", "simple")
            .env_remove("SIGMATOP_RECORD")
            .env("UCX_TLS", "tcp")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"));
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }
}

/// Starts `c` with the stdio it was given (common::spawn pipes them).
fn start(c: &mut Command) -> Child {
    c.spawn()
        .unwrap_or_else(|e| panic!("cannot start {c:?}: {e}"))
}

fn keygen(path: &Path) {
    let o = Command::new(require("ssh-keygen"))
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "sigmatop-test", "-f"])
        .arg(path)
        .output_bounded()
        .expect("ssh-keygen");
    assert!(o.status.success(), "ssh-keygen: {}", stderr_of(&o));
}

fn sshd_config(dir: &Path, node: &Node) -> PathBuf {
    let p = dir.join(format!("sshd_{}.conf", node.name));
    std::fs::write(
        &p,
        format!(
            "Port 22\nListenAddress {admin}\nHostKey {dir}/host_key\nPidFile none\n\
             AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             StrictModes no\nSetEnv SIGMATOP_SOCKET_DIR={sock}\nLogLevel ERROR\n",
            admin = node.admin_ip,
            dir = dir.display(),
            sock = node.sock.display()
        ),
    )
    .expect("sshd config");
    p
}

/// Waits until `ssh -F cfg host true` works (sshd is up).
fn wait_ssh(cfg: &Path, host: &str) {
    let start = Instant::now();
    loop {
        let o = Command::new("ssh")
            .arg("-F")
            .arg(cfg)
            .args([host, "true"])
            .stdin(Stdio::null())
            .output_bounded()
            .expect("ssh");
        if o.status.success() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "ssh {host} never worked: {}",
            stderr_of(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `log` says the program's main returned (the lingering shim's line).
fn wait_done(log: &Path, child: &mut Child) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("linger: main returned 0") {
            return;
        }
        assert!(
            !text.contains("linger: main returned"),
            "{} failed: {text}",
            log.display()
        );
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "{} exited ({st}) before its work was done: {text}",
                log.display()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} did not finish: {text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The lingering shim, built into the scratch directory.
fn linger(dir: &Path) -> PathBuf {
    let out = dir.join("liblinger.so");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/linger.c");
    let o = Command::new(require("cc"))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-ldl")
        .output_bounded()
        .expect("cc");
    assert!(o.status.success(), "cc linger.c: {}", stderr_of(&o));
    out
}

fn json_once(args: &[String]) -> serde_json::Value {
    let o = Command::new(sigmatop_bin())
        .args(["attach", "--json", "--once"])
        .args(args)
        .stdin(Stdio::null())
        .output_bounded()
        .expect("sigmatop attach");
    assert!(
        o.status.success(),
        "attach --json --once {args:?}: {}\n{}",
        stderr_of(&o),
        stdout_of(&o)
    );
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// The exact figures of one merged snapshot.
fn check_snapshot(j: &serde_json::Value, what: &str) {
    let sent = (N + 1) * SIZE;
    let hosts: Vec<(&str, &str)> = j["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| {
            (
                h["host"].as_str().unwrap_or("?"),
                h["state"]["state"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(hosts, [("node-a", "up"), ("node-b", "up")], "{what}: {j}");
    let mut procs: Vec<&str> = j["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| p["host"].as_str().unwrap_or("?"))
        .collect();
    procs.sort_unstable();
    assert_eq!(procs, ["node-a", "node-b"], "{what}: one process per node");
    let nm = &j["node_matrix"];
    assert_eq!(
        nm["labels"],
        serde_json::json!(["node-a", "node-b"]),
        "{what}"
    );
    assert_eq!(
        nm["bytes"],
        serde_json::json!([[0, 0], [sent, 0]]),
        "{what}: node-b sent (N + 1) × SIZE to node-a"
    );
    assert_eq!(j["totals"]["tx_bytes"], sent, "{what}");
}

/// The row of `host` in the Nodes view.
fn row<'a>(screen: &'a str, host: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.trim_start().starts_with(host))
        .unwrap_or("")
}

#[test]
fn attach_follows_two_ssh_nodes_and_marks_a_lost_one() {
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } != 0 {
        return skip("not root: network namespaces and sshd need root");
    }
    for p in [
        SSHD,
        "/usr/bin/ssh",
        "/usr/bin/ssh-keygen",
        "/usr/bin/nsenter",
    ] {
        if !Path::new(p).is_file() {
            return skip(&format!(
                "{p} is missing (openssh-server, openssh-client, util-linux)"
            ));
        }
    }
    let perftest = require("ucx_perftest").display().to_string();
    let id = std::process::id() % 100000;
    let k = id % 250;
    let net = match Net::new(&[format!("mhA{id}"), format!("mhB{id}")]) {
        Ok(n) => n,
        Err(e) => return skip(&format!("cannot create network namespaces: {e}")),
    };
    let dir = scratch("multihost");
    let mk = |name: &'static str, ns: &str, i: u32| Node {
        name,
        ns: ns.to_string(),
        admin_ip: format!("10.{}.{k}.2", 80 + i),
        ip: format!("10.83.{k}.{}", i + 1),
        dev: format!("mh{}{id}", ["a", "b"][i as usize]),
        sock: dir.join(format!("sock-{name}")),
    };
    let nodes = [mk("node-a", &net.ns[0], 0), mk("node-b", &net.ns[1], 1)];
    for (i, n) in nodes.iter().enumerate() {
        net.link(
            (
                None,
                &format!("mr{}{id}", i),
                &format!("10.{}.{k}.1/24", 80 + i),
            ),
            (
                Some(&n.ns),
                &format!("mx{}{id}", i),
                &format!("{}/24", n.admin_ip),
            ),
        )
        .expect("veth to the dashboard host");
        std::fs::create_dir_all(&n.sock).expect("socket dir");
        std::fs::set_permissions(&n.sock, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
    }
    net.link(
        (
            Some(&nodes[0].ns),
            &nodes[0].dev,
            &format!("{}/24", nodes[0].ip),
        ),
        (
            Some(&nodes[1].ns),
            &nodes[1].dev,
            &format!("{}/24", nodes[1].ip),
        ),
    )
    .expect("veth between the nodes");

    // Keys and configurations, all in the scratch directory.
    keygen(&dir.join("host_key"));
    keygen(&dir.join("user_key"));
    std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).expect("authorized_keys");
    let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).expect("host key");
    let host_pub: Vec<&str> = host_pub.split_whitespace().take(2).collect();
    let mut known = String::new();
    let mut cfg = String::new();
    for n in &nodes {
        known.push_str(&format!(
            "{},{} {}\n",
            n.name,
            n.admin_ip,
            host_pub.join(" ")
        ));
        cfg.push_str(&format!("Host {}\n  HostName {}\n", n.name, n.admin_ip));
    }
    std::fs::write(dir.join("known_hosts"), known).expect("known_hosts");
    cfg.push_str(&format!(
        "Host *\n  User root\n  IdentityFile {d}/user_key\n  IdentitiesOnly yes\n  \
         UserKnownHostsFile {d}/known_hosts\n  GlobalKnownHostsFile /dev/null\n  \
         StrictHostKeyChecking yes\n  LogLevel ERROR\n",
        d = dir.display()
    ));
    let ssh_cfg = dir.join("ssh_config");
    std::fs::write(&ssh_cfg, cfg).expect("ssh_config");
    let _privsep = PrivsepDir(
        !Path::new("/run/sshd").exists() && {
            std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
            true
        },
    );

    let mut sshd: Vec<Child> = Vec::new();
    for n in &nodes {
        let conf = sshd_config(&dir, n);
        let log = dir.join(format!("sshd-{}.log", n.name));
        let mut c = n.run(
            &[SSHD, "-D", "-e", "-f", &conf.display().to_string()],
            None,
            &[],
            &log,
        );
        sshd.push(start(&mut c));
    }
    for n in &nodes {
        wait_ssh(&ssh_cfg, n.name);
    }
    let sshd_pids: Vec<u32> = sshd.iter().map(Child::id).collect();
    let sshd = Procs(sshd);

    let bin = sigmatop_bin().display().to_string();
    let remote = [
        format!("--ssh-opt=-F{}", ssh_cfg.display()),
        format!("--remote-cmd={bin}"),
        "node-a".to_string(),
        "node-b".to_string(),
    ];
    let t = match Tmux::start("multihost", &format!("{bin} attach {}", remote.join(" "))) {
        Some(t) => t,
        None => return skip("tmux is missing"),
    };
    let limit = Duration::from_secs(60);
    t.keys(&["4"]);
    t.wait_for("both hosts up in the Nodes view", limit, |s| {
        row(s, "node-a").contains(" up ") && row(s, "node-b").contains(" up ")
    });

    // The exact workload: node-b sends to node-a, then both linger.
    let preload_with_linger = format!("{} {}", preload().display(), linger(&dir).display());
    let port1 = port().to_string();
    let run = |n: &Node, prog: &[&str], log: &Path| {
        let env = [("UCX_NET_DEVICES", n.dev.as_str()), ("LINGER_S", "600")];
        start(&mut n.run(prog, Some(&preload_with_linger), &env, log))
    };
    let (slog, clog) = (dir.join("server.log"), dir.join("client.log"));
    let mut work = Procs(vec![run(&nodes[0], &[&perftest, "-p", &port1], &slog)]);
    common::netns::wait_listen_in(&mut work.0[0], port1.parse().expect("port"));
    let (n_s, size_s) = (N.to_string(), SIZE.to_string());
    let client = run(
        &nodes[1],
        &[
            &perftest,
            &nodes[0].ip,
            "-p",
            &port1,
            "-t",
            "tag_bw",
            "-n",
            &n_s,
            "-s",
            &size_s,
            "-w",
            "1",
        ],
        &clog,
    );
    work.0.push(client);
    let (server, client) = work.0.split_at_mut(1);
    wait_done(&slog, &mut server[0]);
    wait_done(&clog, &mut client[0]);

    // 1. The dashboard: one process per node, then the node matrix.
    let nodes_view = t.wait_for("one process on each node", limit, |s| {
        let procs = |h: &str| {
            row(s, h)
                .split_whitespace()
                .nth(2)
                .map(str::to_string)
                .unwrap_or_default()
        };
        s.contains("[4 Nodes]") && procs("node-a") == "1" && procs("node-b") == "1"
    });
    assert!(nodes_view.contains("state"), "{nodes_view}");
    let sent = (N + 1) * SIZE;
    let cell = sigmatop_tui::units::volume(sent as f64, sigmatop_tui::units::Units::Bytes);
    t.keys(&["5"]);
    let matrix = t.wait_for("the node matrix with node-b → node-a", limit, |s| {
        s.contains("[5 Matrix]") && row(s, "node-b").contains(&cell)
    });
    eprintln!("multihost: the Nodes view:\n{nodes_view}\nthe node matrix:\n{matrix}");
    assert!(
        !row(&matrix, "node-a").contains(&cell),
        "nothing from node-a to node-b:\n{matrix}"
    );

    // 2. One merged snapshot, exact.
    check_snapshot(&json_once(&remote), "attach --json --once");

    // 3. --via with a command of the test's own: into each node's namespaces with nsenter.
    let via = dir.join("via.sh");
    std::fs::write(
        &via,
        format!(
            "#!/bin/sh\n# via.sh HOST CMD...: runs CMD on the test node HOST\nhost=$1; shift\n\
             case $host in\n  node-a) pid={a}; sock={sa};;\n  node-b) pid={b}; sock={sb};;\n  \
             *) echo \"via.sh: no node $host\" >&2; exit 2;;\nesac\n\
             exec nsenter -t $pid -n -u env SIGMATOP_SOCKET_DIR=$sock sh -c \"$*\"\n",
            a = sshd_pids[0],
            b = sshd_pids[1],
            sa = nodes[0].sock.display(),
            sb = nodes[1].sock.display()
        ),
    )
    .expect("via.sh");
    let via_args = vec![
        format!("--via=sh {} {{host}}", via.display()),
        format!("--remote-cmd={bin}"),
        "node-a".to_string(),
        "node-b".to_string(),
    ];
    check_snapshot(&json_once(&via_args), "attach --via");

    // 4. More traffic on node-a (a pair within it), then node-b's sshd dies.
    t.keys(&["4"]);
    let port2 = port().to_string();
    let preload_only = preload().display().to_string();
    let lo = |prog: &[&str], log: &Path| {
        start(&mut nodes[0].run(prog, Some(&preload_only), &[("UCX_NET_DEVICES", "lo")], log))
    };
    work.0
        .push(lo(&[&perftest, "-p", &port2], &dir.join("busy-server.log")));
    let last = work.0.len() - 1;
    common::netns::wait_listen_in(&mut work.0[last], port2.parse().expect("port"));
    let busy_client = lo(
        &[
            &perftest,
            "127.0.0.1",
            "-p",
            &port2,
            "-t",
            "tag_bw",
            "-n",
            "100000000",
            "-s",
            "4096",
            "-w",
            "1",
        ],
        &dir.join("busy-client.log"),
    );
    work.0.push(busy_client);
    t.wait_for("node-a with two more processes", limit, |s| {
        s.contains("[4 Nodes]") && row(s, "node-a").split_whitespace().nth(2) == Some("3")
    });
    kill_tree(sshd_pids[1]);
    let lost = t.wait_for("node-b lost", limit, |s| row(s, "node-b").contains("lost:"));
    let b = row(&lost, "node-b");
    assert!(
        b.contains("closed") || b.contains("refused") || b.contains("Connection"),
        "the reason is ssh's own line: {b}"
    );
    let a1 = row(&lost, "node-a").to_string();
    assert!(a1.contains(" up "), "{lost}");
    let a2 = t.wait_for("node-a still updating", limit, |s| row(s, "node-a") != a1);
    assert!(row(&a2, "node-a").contains(" up "), "{a2}");
    eprintln!("multihost: node-b lost, node-a updating:\n{a2}");
    assert!(row(&a2, "node-b").contains("lost:"), "{a2}");
    t.keys(&["q"]);
    t.wait_for("sigmatop to exit", limit, |s| s.contains("SIGMATOP-EXIT=0"));
    drop(work);
    drop(sshd);
    drop(net);
}
