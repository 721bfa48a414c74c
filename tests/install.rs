//! sigmatop reaches every node (issue 12, item 6): `scripts/install.sh PREFIX` (what `make
//! install` runs) gives a relocatable `PREFIX/bin/sigmatop` + `PREFIX/lib/libsigmatop_preload.so`,
//! and the binary carries its preload.
//!
//! 1. The install tree moved elsewhere (as a shared /opt mounted at another path) traces a real
//!    ucx_perftest pair through `bin/../lib`.
//! 2. The binary alone, copied into an unrelated directory, traces it too: its embedded preload is
//!    written once to the per-user cache under its content hash, reused by the next run, and
//!    written again when the cached file no longer matches its hash.
//!
//! Exact figures each time: tag_bw's sender moves (N + 1) × SIZE bytes (tests/ucx_perftest.rs).
//! The install builds a debug sigmatop in target/install (its own target directory; the first
//! run compiles the dependencies there once).
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const N: u64 = 500;
const SIZE: u64 = 4096;

/// The section names of an ELF file (binutils' readelf, which gcc brings).
fn sections(f: &Path) -> Vec<String> {
    let o = Command::new(require("readelf"))
        .args(["-W", "-S"])
        .arg(f)
        .output_bounded()
        .expect("readelf");
    assert!(
        o.status.success(),
        "readelf {}: {}",
        f.display(),
        stderr_of(&o)
    );
    stdout_of(&o)
        .lines()
        .filter_map(|l| {
            let l = l.split_once(']')?.1;
            l.split_whitespace().next().map(String::from)
        })
        .collect()
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `sigmatop run --json -- sh -c 'server & client'` with `bin`, from `cwd`, the environment
/// cleared of sigmatop's variables, with `cache` as XDG_CACHE_HOME. Returns the summary.
///
/// The script starts the client once the server listens itself (a listening socket on its port
/// that the server's own descriptors hold, read from /proc: see tests/common `listened`), and
/// starts the server again on another port when it ends saying the address is in use (another
/// process took the port between the look and the bind); anything else fails the run, and so
/// does a server that does not listen within 60 s.
fn traced_pair(bin: &Path, cwd: &Path, cache: &Path) -> serde_json::Value {
    let perftest = require("ucx_perftest").display().to_string();
    let ports: Vec<String> = (0..8).map(|_| port().to_string()).collect();
    let script = format!(
        r#"
listens() {{ # PID PORT: PID holds a listening socket on PORT
  for i in $(awk -v p=":$(printf %04X "$2")" '$4 == "0A" && substr($2, length($2) - 4) == p {{ print $10 }}' /proc/net/tcp /proc/net/tcp6); do
    ls -l /proc/"$1"/fd 2>/dev/null | grep -q "socket:\[$i\]" && return 0
  done
  return 1
}}
for p in {ports}; do
  {perftest} -p $p >/dev/null 2>server.err & s=$!
  n=0
  while ! listens $s $p; do
    if ! kill -0 $s 2>/dev/null; then break; fi
    n=$((n + 1))
    if [ $n -gt 1200 ]; then echo "the server does not listen on $p after 60 s" >&2; kill $s; exit 3; fi
    sleep 0.05
  done
  if listens $s $p; then
    {perftest} 127.0.0.1 -p $p -t tag_bw -n {N} -s {SIZE} -w 1 >/dev/null
    c=$?
    wait $s
    exit $c
  fi
  wait $s
  grep -qi "address already in use" server.err || {{ echo "the server ended:" >&2; cat server.err >&2; exit 4; }}
done
echo "8 ports were taken between the look and the server's bind" >&2
exit 5
"#,
        ports = ports.join(" ")
    );
    let o = Command::new(bin)
        .args(["run", "--json", "--", "sh", "-c", &script])
        .current_dir(cwd)
        .env_remove("SIGMATOP_PRELOAD")
        .env("XDG_CACHE_HOME", cache)
        .env("UCX_TLS", "tcp")
        .stdin(Stdio::null())
        .output_bounded()
        .expect("sigmatop run");
    assert!(
        o.status.success(),
        "{} run: {}\n{}",
        bin.display(),
        stderr_of(&o),
        stdout_of(&o)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout_of(&o)))
}

fn check(j: &serde_json::Value, what: &str) {
    assert_eq!(j["totals"]["tx_bytes"], (N + 1) * SIZE, "{what}: {j}");
    assert_eq!(
        j["processes"].as_array().map(Vec::len),
        Some(2),
        "{what}: the server and the client were traced"
    );
}

fn cached(cache: &Path) -> Vec<PathBuf> {
    let dir = cache.join("sigmatop");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn installed_tree_and_lone_binary_run_programs() {
    let dir = scratch("install");
    let prefix = dir.join("prefix");
    let o = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .arg(&prefix)
        .env("SIGMATOP_INSTALL_PROFILE", "dev")
        .env("CARGO_TARGET_DIR", repo().join("target/install"))
        .stdin(Stdio::null())
        // The first run compiles sigmatop and its dependencies in target/install.
        .output_within(Duration::from_secs(1800))
        .expect("scripts/install.sh");
    assert!(o.status.success(), "install.sh: {}", stderr_of(&o));
    for (f, debug) in [
        ("bin/sigmatop", "lib/debug/sigmatop.debug"),
        (
            "lib/libsigmatop_preload.so",
            "lib/debug/libsigmatop_preload.so.debug",
        ),
    ] {
        assert!(prefix.join(f).is_file(), "{f} installed");
        // Installed stripped, naming its debug info, which is installed beside.
        let have = sections(&prefix.join(f));
        assert!(
            !have
                .iter()
                .any(|s| s.starts_with(".debug_") && s != ".debug_gdb_scripts"),
            "{f} is stripped: {have:?}"
        );
        assert!(have.iter().any(|s| s == ".gnu_debuglink"), "{f}: {have:?}");
        assert!(
            sections(&prefix.join(debug))
                .iter()
                .any(|s| s == ".debug_line"),
            "{debug} holds the debug info"
        );
    }

    // 1. The tree, moved: found through bin/../lib.
    let moved = dir.join("elsewhere/opt-sigmatop");
    std::fs::create_dir_all(moved.parent().expect("parent")).expect("mkdir");
    std::fs::rename(&prefix, &moved).expect("move the install");
    let cache1 = dir.join("cache-tree");
    let unrelated = dir.join("unrelated");
    std::fs::create_dir_all(&unrelated).expect("mkdir");
    check(
        &traced_pair(&moved.join("bin/sigmatop"), &unrelated, &cache1),
        "moved install",
    );
    assert!(
        cached(&cache1).is_empty(),
        "the tree's lib/ was used, no cache"
    );

    // 2. The binary alone.
    let lone = unrelated.join("sigmatop");
    std::fs::copy(moved.join("bin/sigmatop"), &lone).expect("copy");
    let cache = dir.join("cache");
    check(&traced_pair(&lone, &unrelated, &cache), "lone binary");
    let files = cached(&cache);
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().and_then(|n| n.to_str()).unwrap_or("");
    let lib = std::fs::read(moved.join("lib/libsigmatop_preload.so")).expect("lib");
    assert_eq!(
        name,
        format!(
            "libsigmatop_preload-{:016x}.so",
            sigmatop::cli::preload::content_hash(&lib)
        ),
        "named by its content hash"
    );
    assert_eq!(std::fs::read(&files[0]).expect("cached"), lib);
    let mtime = std::fs::metadata(&files[0]).and_then(|m| m.modified()).ok();
    std::thread::sleep(Duration::from_millis(20));
    check(
        &traced_pair(&lone, &unrelated, &cache),
        "lone binary, cached",
    );
    assert_eq!(
        std::fs::metadata(&files[0]).and_then(|m| m.modified()).ok(),
        mtime,
        "written once"
    );
    // A cached file that no longer matches its hash is written again before use.
    let mut bad = lib.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    std::fs::write(&files[0], &bad).expect("tamper");
    check(
        &traced_pair(&lone, &unrelated, &cache),
        "lone binary, re-written",
    );
    assert_eq!(std::fs::read(&files[0]).expect("cached"), lib);

    // The binary of a plain `cargo build` carries nothing and says what to do.
    let plain = unrelated.join("sigmatop-plain");
    std::fs::copy(sigmatop_bin(), &plain).expect("copy");
    let o = Command::new(&plain)
        .args(["run", "--", "true"])
        .env_remove("SIGMATOP_PRELOAD")
        .stdin(Stdio::null())
        .output_bounded()
        .expect("run");
    assert!(!o.status.success());
    assert!(
        stderr_of(&o).contains("make install PREFIX="),
        "{}",
        stderr_of(&o)
    );
    // The installed trees and copies are ~300 MB a run; gone once the test has passed.
    let _ = std::fs::remove_dir_all(&dir);
}
