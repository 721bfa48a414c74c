//! The NCCL plugin's event queue and its writer thread: NCCL's threads (the application's, the
//! proxy's) push fixed records without a lock, an allocation or a system call (a bounded
//! multi-producer queue, Vyukov's); one writer thread drains it into `<record>/<host>/
//! nccl-<pid>.stn` every 20 ms and at exit. A full queue drops the record and counts it: the
//! count is the file's last record (`kind::TOTALS`) and `report` shows it. The writer thread also
//! feeds every record to the live tracker (`sigmatop::nccl::live`), whose state the collector
//! sends over the live socket each interval (`Frame::Nccl`): with no record directory the
//! records feed the live view alone.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::io::Write;
use std::sync::Mutex;

use sigmatop::nccl::format::{self, REC_BYTES, Rec, WORDS};
use sigmatop::nccl::live::{NcclCalls, NcclLive, NcclWaits, Tracker};

/// Slots in the queue (a power of two): 8 MiB of address space, touched as used.
const CAP: u64 = 1 << 16;

#[repr(C)]
struct Slot {
    seq: AtomicU64,
    w: [AtomicU64; WORDS],
}

static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(core::ptr::null_mut());
static HEAD: AtomicU64 = AtomicU64::new(0);
static TAIL: AtomicU64 = AtomicU64::new(0);
/// Records dropped because the queue was full.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Events of a type this plugin does not read (counted, not written one by one).
pub static UNKNOWN: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
static WRITER: Mutex<Option<Writer>> = Mutex::new(None);
static THREAD: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

struct Writer {
    /// The record's file (none without a record directory, or when it could not be made).
    file: Option<std::fs::File>,
    buf: Vec<u8>,
    tracker: Tracker,
}

/// True once [`start`] made the queue: records are kept (in the file, with a record directory,
/// and for the live view).
pub fn active() -> bool {
    !SLOTS.load(Ordering::Acquire).is_null()
}

/// What the live tracker knows now, and where it waits (none before NCCL's first `init`): the
/// collector sends both.
pub fn live() -> Option<(NcclLive, NcclWaits, NcclCalls)> {
    if !active() {
        return None;
    }
    let w = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    w.as_ref().map(|w| {
        let mut live = w.tracker.live();
        if crate::runtime::config::mode() == sigmatop::event::Mode::Aggregate {
            counted_rows(&mut live);
        }
        (live, w.tracker.waits(), w.tracker.calls())
    })
}

/// Aggregate mode: each communicator's rows are its counted host calls (no time, no
/// algorithm: nothing else is asked of NCCL); a call counts as completed when made.
fn counted_rows(live: &mut NcclLive) {
    use core::sync::atomic::Ordering::Relaxed;
    for k in super::counts::COUNTS.iter() {
        let id = k.comm_id.load(Relaxed);
        let rank = k.rank.load(Relaxed) as u32;
        let Some(c) = live
            .comms
            .iter_mut()
            .find(|c| c.comm_id == id && c.rank == rank)
        else {
            continue;
        };
        c.rows.clear();
        c.started = 0;
        for f in 0..super::counts::NF {
            let calls = k.calls[f].load(Relaxed);
            if calls == 0 {
                continue;
            }
            let p2p = matches!(format::name(format::FUNCS, f as u8), "Send" | "Recv");
            if !p2p {
                c.started += calls;
            }
            c.rows.push(sigmatop::nccl::live::RowLive {
                func: f as u8,
                algo: 255,
                proto: 255,
                count: calls,
                bytes: k.bytes[f].load(Relaxed),
                ..Default::default()
            });
        }
        c.completed = c.started;
    }
}

/// Aggregate mode, at exit: one `COUNTS` record per communicator and function counted.
fn push_counts() {
    use core::sync::atomic::Ordering::Relaxed;
    for (i, k) in super::counts::COUNTS.iter().enumerate() {
        for f in 0..super::counts::NF {
            let calls = k.calls[f].load(Relaxed);
            if calls == 0 {
                continue;
            }
            let mut r = Rec::new(crate::runtime::clock::now(), 0, format::kind::COUNTS, 0, 0);
            r.0[4] = i as u64 + 1;
            r.0[5] = f as u64;
            r.0[6] = calls;
            r.0[7] = k.bytes[f].load(Relaxed);
            push(&r);
        }
    }
}

/// Opens the file (with a record directory) and starts the writer (control path: the first
/// communicator's `init`). Returns a line to print when something could not start: without the
/// file the live view still gets the collectives.
pub fn start() -> Option<String> {
    if active() {
        return None;
    }
    let mut w = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    if active() {
        return None;
    }
    let (file, line) = match crate::runtime::config::paths().record.clone() {
        Some(root) => match open_file(&root) {
            Ok(f) => (Some(f), None),
            Err(line) => (None, Some(line)),
        },
        None => (None, None),
    };
    let bytes = CAP as usize * core::mem::size_of::<Slot>();
    let Some(p) = crate::runtime::os::map_zeroed(bytes, false) else {
        return Some(
            "sigmatop: NCCL collectives are not recorded or shown: no memory for the queue".into(),
        );
    };
    let slots = p as *mut Slot;
    for i in 0..CAP {
        // SAFETY: `slots` maps CAP zeroed slots; nothing else sees them before the store below.
        unsafe { (*slots.add(i as usize)).seq.store(i, Ordering::Relaxed) };
    }
    *w = Some(Writer {
        file,
        buf: Vec::with_capacity(1 << 16),
        tracker: Tracker::new(),
    });
    drop(w);
    SLOTS.store(slots, Ordering::Release);
    let t = std::thread::Builder::new()
        .name("sigmatop-nccl".into())
        .stack_size(256 << 10)
        .spawn(|| {
            while !STOP.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(20));
                drain();
            }
        });
    if let Ok(t) = t {
        *THREAD.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
    }
    line
}

/// The record's NCCL file, its header written; the line to print when it cannot be.
fn open_file(root: &std::path::Path) -> Result<std::fs::File, String> {
    let host = sigmatop::trace::writer::sanitize(&crate::runtime::os::hostname());
    let dir = root.join(host);
    let path = dir.join(format!("nccl-{}.stn", crate::runtime::os::pid()));
    let file = sigmatop::trace::writer::create_private_dir(&dir).and_then(|_| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
    });
    let mut file = file.map_err(|e| {
        format!(
            "sigmatop: NCCL collectives are not recorded (the live view still shows them): cannot create {}: {e}",
            path.display()
        )
    })?;
    if file.write_all(format::MAGIC).is_err() {
        return Err(format!(
            "sigmatop: NCCL collectives are not recorded (the live view still shows them): cannot write {}",
            path.display()
        ));
    }
    Ok(file)
}

/// Pushes one record; drops it (counted) when the queue is full or not started.
#[inline]
pub fn push(r: &Rec) {
    let slots = SLOTS.load(Ordering::Acquire);
    if slots.is_null() {
        return;
    }
    let mut pos = HEAD.load(Ordering::Relaxed);
    loop {
        // SAFETY: `slots` maps CAP slots for the life of the process (never unmapped).
        let slot = unsafe { &*slots.add((pos & (CAP - 1)) as usize) };
        let seq = slot.seq.load(Ordering::Acquire);
        if seq == pos {
            match HEAD.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    for (d, s) in slot.w.iter().zip(r.0.iter()) {
                        d.store(*s, Ordering::Relaxed);
                    }
                    slot.seq.store(pos + 1, Ordering::Release);
                    return;
                }
                Err(p) => pos = p,
            }
        } else if seq < pos {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        } else {
            pos = HEAD.load(Ordering::Relaxed);
        }
    }
}

/// Moves every ready record to the file (the writer thread, and the final flush).
fn drain() {
    let slots = SLOTS.load(Ordering::Acquire);
    if slots.is_null() {
        return;
    }
    let mut guard = WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = guard.as_mut() else { return };
    let mut pos = TAIL.load(Ordering::Relaxed);
    let mut b = [0u8; REC_BYTES];
    loop {
        // SAFETY: as in `push`.
        let slot = unsafe { &*slots.add((pos & (CAP - 1)) as usize) };
        if slot.seq.load(Ordering::Acquire) != pos + 1 {
            break;
        }
        let mut r = Rec::default();
        for (d, s) in r.0.iter_mut().zip(slot.w.iter()) {
            *d = s.load(Ordering::Relaxed);
        }
        slot.seq.store(pos + CAP, Ordering::Release);
        pos += 1;
        w.tracker.push(&r);
        if let Some(f) = w.file.as_mut() {
            r.to_bytes(&mut b);
            w.buf.extend_from_slice(&b);
            if w.buf.len() >= 1 << 16 {
                let _ = f.write_all(&w.buf);
                w.buf.clear();
            }
        }
    }
    TAIL.store(pos, Ordering::Relaxed);
    if let Some(f) = w.file.as_mut()
        && !w.buf.is_empty()
    {
        let _ = f.write_all(&w.buf);
        w.buf.clear();
    }
    let s = crate::runtime::clock::sample();
    w.tracker.clock(s);
    w.tracker.advance(s.tsc);
    w.tracker.set_losses(
        DROPPED.load(Ordering::Relaxed),
        UNKNOWN.load(Ordering::Relaxed),
    );
}

/// The final flush (the preload's destructor): the last records, then the totals record.
pub fn shutdown() {
    if !active() {
        return;
    }
    STOP.store(true, Ordering::Release);
    if let Some(t) = THREAD.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = t.join();
    }
    super::clock_record();
    push_counts();
    drain();
    // Written directly, after everything else: a full queue cannot lose it.
    let mut r = Rec::new(crate::runtime::clock::now(), 0, format::kind::TOTALS, 0, 0);
    r.0[5] = DROPPED.load(Ordering::Relaxed);
    r.0[6] = UNKNOWN.load(Ordering::Relaxed);
    r.0[7] = super::chain::LOST.load(Ordering::Relaxed);
    r.0[8] = super::counts::LOST.load(Ordering::Relaxed);
    let mut b = [0u8; REC_BYTES];
    r.to_bytes(&mut b);
    if let Some(f) = WRITER
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(|w| w.file.as_mut())
    {
        let _ = f.write_all(&b);
    }
}
