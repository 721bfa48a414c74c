//! Helpers shared by the export and multi-node tests (included with `#[path]`; as a test target
//! of its own it has no tests): the Python validator of Perfetto traces, running the CLI, and
//! counting the events of a record.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use sigmatop::trace::reader::Recording;

static VENV_LOCK: Mutex<()> = Mutex::new(());

/// `cmd`'s output, the test failing when it runs past `limit` (it is then killed): no program
/// these helpers run can keep a test waiting forever. (tests/common's `Bounded` does the same;
/// this file is also a test target of its own, without tests/common.)
fn output_within(cmd: &mut Command, limit: std::time::Duration) -> std::io::Result<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let read = |p: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let out = read(child.stdout.take().map(|p| Box::new(p) as _));
    let err = read(child.stderr.take().map(|p| Box::new(p) as _));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still ran after {limit:?}: killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

const LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// target/<profile>/ of the running test binary.
fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|p| p.parent())
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// Python of a venv under target/ holding the PyPI `perfetto` and `protobuf` packages (the
/// official perfetto_trace_pb2 schema). Created on first use; fails loudly when pip cannot
/// install them.
pub fn perfetto_python() -> PathBuf {
    let _g = VENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let venv = target_profile_dir()
        .parent()
        .expect("target/")
        .join("pyenv-perfetto");
    let py = venv.join("bin/python");
    let ok = |py: &Path| {
        output_within(
            Command::new(py).args([
                "-c",
                "from perfetto.protos.perfetto.trace import perfetto_trace_pb2; from google.protobuf import unknown_fields",
            ]),
            LIMIT,
        )
        .map(|o| o.status.success())
        .unwrap_or(false)
    };
    if py.is_file() && ok(&py) {
        return py;
    }
    let st = output_within(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        LIMIT,
    )
    .map(|o| o.status)
    .unwrap_or_else(|e| {
        panic!(
            "python3 -m venv {}: cannot run python3: {e}",
            venv.display()
        )
    });
    assert!(st.success(), "python3 -m venv {} failed", venv.display());
    let out = output_within(
        Command::new(venv.join("bin/pip")).args(["install", "-q", "perfetto", "protobuf"]),
        LIMIT,
    )
    .expect("run pip");
    assert!(
        out.status.success(),
        "pip install perfetto protobuf failed (the Perfetto validity test needs PyPI):\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        ok(&py),
        "perfetto_trace_pb2 not importable after pip install"
    );
    py
}

/// Runs tests/tools/check_perfetto.py on `trace`, expecting `ops` operation instants; returns
/// its JSON summary. Panics with the checker's complaints.
pub fn check_perfetto(trace: &Path, ops: u64) -> serde_json::Value {
    let py = perfetto_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/check_perfetto.py");
    let out = output_within(
        Command::new(py)
            .arg(script)
            .arg(trace)
            .args(["--ops", &ops.to_string()]),
        LIMIT,
    )
    .expect("run check_perfetto.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check_perfetto.py rejected {}:\n{}\n{}",
        trace.display(),
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("checker summary is JSON")
}

/// Runs `sigmatop ARGS`, returning (status ok, stdout, stderr).
pub fn sigmatop(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let bin = target_profile_dir().join("sigmatop");
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build --workspace`",
        bin.display()
    );
    let out = output_within(Command::new(&bin).args(args), LIMIT).expect("run sigmatop");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Exports `dirs` to `out/trace.pftrace` and `out/agg.json`; returns the parsed JSON and stderr.
pub fn export(dirs: &[PathBuf], out: &Path) -> (serde_json::Value, String) {
    let trace = out.join("trace.pftrace");
    let json = out.join("agg.json");
    let mut args: Vec<&std::ffi::OsStr> = vec!["export".as_ref()];
    for d in dirs {
        args.push(d.as_os_str());
    }
    args.extend([
        "--perfetto".as_ref(),
        trace.as_os_str(),
        "--json".as_ref(),
        json.as_os_str(),
    ]);
    let (ok, stdout, stderr) = sigmatop(&args);
    assert!(ok, "sigmatop export failed:\n{stdout}\n{stderr}");
    let v = serde_json::from_slice(&std::fs::read(&json).expect("agg.json written"))
        .expect("agg.json parses");
    (v, stderr)
}

/// Events readable from every thread file of the recordings (what the export must contain).
pub fn readable_events(dirs: &[PathBuf]) -> u64 {
    let rec = Recording::open(dirs).expect("open record");
    let mut probs = Vec::new();
    rec.processes
        .iter()
        .map(|p| p.read_all_events(&mut probs).len() as u64)
        .sum()
}
