//! Corrupt and truncated record files: `sigmatop export` names each bad file with the byte offset
//! where reading stopped, exports everything readable (the Perfetto trace holds exactly the
//! events before the bad chunks and still validates), and `sigmatop report` lists what was
//! skipped. Damage applied to a real fi_pingpong recording:
//! - a flipped byte in the last chunk of one thread file (checksum mismatch at that chunk);
//! - the other process's thread file cut in the middle of its last chunk;
//! - a stray thread file that is not a record file at all (bad magic at byte 0);
//! - a process directory whose process.stp is garbage (the whole process is skipped).
mod common;
#[path = "export_util.rs"]
mod util;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

/// Offsets of the chunks of a record file (after the 16-byte header).
fn chunks(path: &Path) -> Vec<(u64, u64)> {
    let b = std::fs::read(path).expect("read record file");
    let mut out = Vec::new();
    let mut pos = 16usize;
    while pos + 12 <= b.len() {
        let len = u32::from_le_bytes([b[pos + 4], b[pos + 5], b[pos + 6], b[pos + 7]]) as usize;
        out.push((pos as u64, len as u64));
        pos += 12 + len;
    }
    out
}

fn thread_files(rec: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for host in std::fs::read_dir(rec).unwrap().flatten() {
        for proc_dir in std::fs::read_dir(host.path()).unwrap().flatten() {
            for f in std::fs::read_dir(proc_dir.path()).unwrap().flatten() {
                if f.file_name().to_string_lossy().ends_with(".ste") {
                    v.push(f.path());
                }
            }
        }
    }
    v.sort();
    v
}

#[test]
fn corrupt_and_truncated_files_are_named_and_the_rest_is_exported() {
    let dir = scratch("export-corrupt");
    let t = Trace::new("simple", &dir);
    let pp = fi_pingpong(
        &["-p", "tcp", "-e", "rdm", "-I", "3000", "-S", "64"],
        |c| t.apply(c),
        Duration::from_secs(120),
    );
    assert!(pp.server.status.success() && pp.client.status.success());
    let rec = t.record.clone();
    let files = thread_files(&rec);
    assert_eq!(files.len(), 2, "{files:?}");
    let intact = util::readable_events(std::slice::from_ref(&rec));

    // 1. Flip a payload byte of the last chunk of the first thread file.
    let c0 = chunks(&files[0]);
    let (off0, len0) = *c0.last().expect("a chunk");
    let mut b = std::fs::read(&files[0]).unwrap();
    let at = (off0 + 12 + len0 / 2) as usize;
    b[at] ^= 0x5a;
    std::fs::write(&files[0], &b).unwrap();
    // 2. Cut the second thread file inside its last chunk.
    let c1 = chunks(&files[1]);
    let (off1, len1) = *c1.last().expect("a chunk");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[1])
        .unwrap();
    f.set_len(off1 + 12 + len1 / 2).unwrap();
    drop(f);
    // 3. A stray file that is no record file.
    let stray = files[0].with_file_name("thread-999999.ste");
    std::fs::write(&stray, b"this is not a sigmatop record").unwrap();
    // 4. A process whose process.stp is garbage.
    let host_dir = files[0].parent().unwrap().parent().unwrap();
    let bad_proc = host_dir.join("4242");
    std::fs::create_dir_all(&bad_proc).unwrap();
    std::fs::write(bad_proc.join("process.stp"), b"SIGMATOP\x01\x00garbage").unwrap();

    let dirs = vec![rec.clone()];
    let readable = util::readable_events(&dirs);
    assert!(readable < intact && readable > 0, "{readable} of {intact}");
    let (j, stderr) = util::export(&dirs, &dir);
    let expect = [
        (files[0].clone(), off0, "checksum"),
        (files[1].clone(), off1, "cut inside a chunk"),
        (stray.clone(), 0, "bad magic"),
        (bad_proc.join("process.stp"), 0, ""),
    ];
    let skipped = j["skipped"].as_array().expect("skipped list");
    for (file, off, what) in &expect {
        let line = format!("{}: at byte {off}", file.display());
        assert!(
            stderr.contains(&line),
            "export's stderr does not name {line}:\n{stderr}"
        );
        assert!(
            skipped
                .iter()
                .any(|s| s["file"] == file.display().to_string()
                    && s["offset"] == *off
                    && s["what"].as_str().unwrap_or("").contains(what)),
            "{line} ({what}) missing from skipped: {skipped:?}"
        );
    }
    assert_eq!(j["events"], readable);
    util::check_perfetto(&dir.join("trace.pftrace"), readable);

    let (ok, out, err) = util::sigmatop(&["report".as_ref(), rec.as_os_str()]);
    assert!(ok, "report failed: {err}");
    for (file, off, _) in &expect {
        let line = format!("{}: at byte {off}", file.display());
        assert!(out.contains(&line), "report does not list {line}:\n{out}");
    }
}
