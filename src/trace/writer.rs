//! Writes a process's record directory: used by the preload's collector thread, never by an
//! application thread. Every write is a whole chunk, so a reader sees complete chunks only.

use std::collections::HashMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{
    FileKind, PROCESS_FILE, ProcessRecord, codec, file_header, frame_chunk, thread_file_name,
};
use crate::event::RawEvent;

/// The record files of one process.
pub struct ProcessWriter {
    dir: PathBuf,
    process: File,
    threads: HashMap<u32, File>,
    scratch: Vec<u8>,
    framed: Vec<u8>,
    pub bytes_written: u64,
    pub events_written: u64,
}

/// Creates `path` and its parents with mode 0700 (existing directories are left as they are).
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

fn create_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

impl ProcessWriter {
    /// Creates `root/<host>/<pid>/` and its process file. When that directory already holds a
    /// recording (the same pid after exec, or pid reuse), the next free `<pid>.<n>` is used:
    /// nothing is ever overwritten.
    pub fn create(root: &Path, host: &str, pid: u32) -> io::Result<ProcessWriter> {
        Self::create_with_first(root, host, pid, None)
    }

    /// As [`ProcessWriter::create`], with the file's first record (the process's identity)
    /// written in the same `write` as the header: a process killed right after its record
    /// began (a Ctrl-C at 5 ms) leaves a file that names it, never a header alone that no reader
    /// can place.
    pub fn create_with_first(
        root: &Path,
        host: &str,
        pid: u32,
        first: Option<&ProcessRecord>,
    ) -> io::Result<ProcessWriter> {
        let host_dir = root.join(sanitize(host));
        let mut last_err = None;
        for generation in 0..64u32 {
            let dir = if generation == 0 {
                host_dir.join(pid.to_string())
            } else {
                host_dir.join(format!("{pid}.{generation}"))
            };
            create_private_dir(&dir)?;
            match create_file(&dir.join(PROCESS_FILE)) {
                Ok(f) => return Self::start(dir, f, first),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no free process directory")))
    }

    fn start(
        dir: PathBuf,
        mut process: File,
        first: Option<&ProcessRecord>,
    ) -> io::Result<ProcessWriter> {
        let mut head = file_header(FileKind::Process).to_vec();
        let mut bytes_written = 0;
        if let Some(rec) = first {
            let payload = postcard::to_allocvec(rec).map_err(io::Error::other)?;
            frame_chunk(&payload, &mut head);
            bytes_written = (head.len() - super::FILE_HEADER_LEN) as u64;
        }
        process.write_all(&head)?;
        Ok(ProcessWriter {
            dir,
            process,
            threads: HashMap::new(),
            scratch: Vec::with_capacity(1 << 16),
            framed: Vec::with_capacity(1 << 16),
            bytes_written,
            events_written: 0,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one record to the process file.
    pub fn write_record(&mut self, rec: &ProcessRecord) -> io::Result<()> {
        let payload = postcard::to_allocvec(rec).map_err(io::Error::other)?;
        self.framed.clear();
        frame_chunk(&payload, &mut self.framed);
        self.process.write_all(&self.framed)?;
        self.bytes_written += self.framed.len() as u64;
        Ok(())
    }

    /// Appends one block of events of thread `tid` (in time order) to its event file.
    pub fn write_events(&mut self, tid: u32, events: &[RawEvent]) -> io::Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        if !self.threads.contains_key(&tid) {
            let mut f = create_file(&self.dir.join(thread_file_name(tid)))?;
            f.write_all(&file_header(FileKind::Thread))?;
            self.threads.insert(tid, f);
        }
        self.scratch.clear();
        codec::encode_block(events, &mut self.scratch);
        self.framed.clear();
        frame_chunk(&self.scratch, &mut self.framed);
        if let Some(f) = self.threads.get_mut(&tid) {
            f.write_all(&self.framed)?;
        }
        self.bytes_written += self.framed.len() as u64;
        self.events_written += events.len() as u64;
        Ok(())
    }
}

/// Host names become directory names: keep them printable and free of path separators.
pub fn sanitize(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out == "." || out == ".." {
        "_".to_string()
    } else {
        out
    }
}
