//! Network namespaces as the nodes of a cluster on one machine: each joined to the others by veth
//! pairs, removed (with their links) when the `Net` is dropped. Needs root (CI runs as root).

use std::process::{Child, Command};

use super::Bounded;
use std::time::{Duration, Instant};

/// Namespaces that exist until this is dropped.
pub struct Net {
    pub ns: Vec<String>,
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .status_bounded();
        }
    }
}

/// Runs a command; its stderr is the error.
pub fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output_bounded()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Net {
    /// Empty namespaces named `names` (lo up).
    pub fn new(names: &[String]) -> Result<Net, String> {
        let mut net = Net { ns: Vec::new() };
        for n in names {
            sh(&["ip", "netns", "add", n])?;
            net.ns.push(n.clone());
            sh(&["ip", "-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// A veth pair between `a` and `b` (a namespace name, or None for this one), ends named
    /// `va`/`vb` with addresses `ip_a`/`ip_b` (CIDR).
    pub fn link(
        &self,
        (a, va, ip_a): (Option<&str>, &str, &str),
        (b, vb, ip_b): (Option<&str>, &str, &str),
    ) -> Result<(), String> {
        sh(&["ip", "link", "add", va, "type", "veth", "peer", "name", vb])?;
        for (ns, dev, ip) in [(a, va, ip_a), (b, vb, ip_b)] {
            match ns {
                Some(ns) => {
                    sh(&["ip", "link", "set", dev, "netns", ns])?;
                    sh(&["ip", "-n", ns, "addr", "add", ip, "dev", dev])?;
                    sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
                }
                None => {
                    sh(&["ip", "addr", "add", ip, "dev", dev])?;
                    sh(&["ip", "link", "set", dev, "up"])?;
                }
            }
        }
        Ok(())
    }
}

/// Waits until `child` (inside its namespace) listens on TCP `port` itself (a listener on the
/// port held by it or a process below it: see [`super::listened`]).
pub fn wait_listen_in(child: &mut Child, port: u16) {
    let start = Instant::now();
    loop {
        let listeners = super::listener_inodes(&format!("/proc/{}/net", child.id()), port);
        if !listeners.is_empty() && super::holds_any(child.id(), &listeners) {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("server exited before listening: {st:?}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "pid {} does not listen on {port} after 30 s (listeners there: socket inodes {listeners:?})",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
