//! Finding the preload library that `sigmatop run` puts into programs: `$SIGMATOP_PRELOAD`, else
//! beside the binary or in `../lib` (a relocatable install: `PREFIX/bin/sigmatop` +
//! `PREFIX/lib/libsigmatop_preload.so`), else the copy the binary carries (embedded at build time
//! by scripts/install.sh), written once to a per-user cache under a name holding its content hash
//! and checked against that hash before every use.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/embedded_preload.rs"));

pub const PRELOAD_NAME: &str = "libsigmatop_preload.so";

/// FNV-1a, 64 bits: the content hash in the cached file's name (it tells versions apart; the
/// cache directory's ownership and permissions, checked below, keep other users out).
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// This user's cache directory: $XDG_CACHE_HOME/sigmatop, else ~/.cache/sigmatop, else
/// /tmp/sigmatop-cache-$UID.
pub fn cache_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(x) = env("XDG_CACHE_HOME") {
        return PathBuf::from(x).join("sigmatop");
    }
    if let Some(h) = env("HOME") {
        return PathBuf::from(h).join(".cache").join("sigmatop");
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/sigmatop-cache-{uid}"))
}

/// Is `p` ours and writable by nobody else?
fn private(md: &std::fs::Metadata) -> bool {
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    md.uid() == me && md.permissions().mode() & 0o022 == 0
}

/// The embedded library `bytes` as a file in `dir`: `libsigmatop_preload-<hash>.so`, written once
/// (to a temporary name, then renamed) and reused while its content still has that hash.
pub fn materialize(bytes: &[u8], dir: &Path) -> Result<PathBuf, String> {
    let hash = content_hash(bytes);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create the cache directory {}: {e}", dir.display()))?;
    let md = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !md.is_dir() || !private(&md) {
        return Err(format!(
            "{} is not a directory of yours that only you can write: not putting the preload there (set XDG_CACHE_HOME, or SIGMATOP_PRELOAD)",
            dir.display()
        ));
    }
    let path = dir.join(format!("libsigmatop_preload-{hash:016x}.so"));
    if let Ok(md) = std::fs::symlink_metadata(&path)
        && md.is_file()
        && private(&md)
        && md.len() == bytes.len() as u64
        && std::fs::read(&path).is_ok_and(|b| content_hash(&b) == hash)
    {
        return Ok(path);
    }
    let tmp = dir.join(format!(
        ".libsigmatop_preload-{hash:016x}.{}",
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write the preload to {}: {e}", path.display())
    })?;
    Ok(path)
}

/// The preload library: $SIGMATOP_PRELOAD, beside the binary, ../lib, or the embedded copy.
pub fn find_preload() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SIGMATOP_PRELOAD").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("SIGMATOP_PRELOAD={} does not exist", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate sigmatop itself: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for cand in [
        dir.join(PRELOAD_NAME),
        dir.join("../lib").join(PRELOAD_NAME),
    ] {
        if cand.is_file() {
            return cand
                .canonicalize()
                .map_err(|e| format!("{}: {e}", cand.display()));
        }
    }
    if let Some(bytes) = EMBEDDED_PRELOAD {
        return materialize(bytes, &cache_dir());
    }
    Err(format!(
        "{PRELOAD_NAME} not found beside {} nor in ../lib, and this sigmatop carries none: install with `make install PREFIX=...` (or scripts/install.sh), build with `cargo build --release --workspace`, or set SIGMATOP_PRELOAD",
        exe.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_once_checked_and_rewritten_when_changed() {
        let dir = std::env::temp_dir().join(format!("sigmatop-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let lib = b"not really an ELF, but bytes with a hash".to_vec();
        let p = materialize(&lib, &dir).expect("written");
        assert!(
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == format!("libsigmatop_preload-{:016x}.so", content_hash(&lib)))
        );
        assert_eq!(std::fs::read(&p).unwrap(), lib);
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(materialize(&lib, &dir).unwrap(), p, "reused");
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), mtime);
        // Tampered with (same length): the hash check notices and the file is written again.
        let mut bad = lib.clone();
        bad[0] ^= 0xff;
        std::fs::write(&p, &bad).unwrap();
        assert_eq!(materialize(&lib, &dir).unwrap(), p);
        assert_eq!(std::fs::read(&p).unwrap(), lib);
        // Another version sits beside it under its own name.
        let other = materialize(b"version 2", &dir).unwrap();
        assert_ne!(other, p);
        // A directory others can write is refused.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = materialize(&lib, &dir).unwrap_err();
        assert!(e.contains("only you can write"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
