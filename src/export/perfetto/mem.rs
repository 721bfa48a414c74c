//! The window's chunks in 2 MiB pages. A full window holds 256 Ki encoded events (~11 MB; their
//! 16-byte entries, 4 MB, are a `VecDeque`); with the 2 Mi events it held before 2026-12-07
//! (~100 MB of chunks and ~32 MB of entries, then also in huge pages), in
//! 4 KiB pages the kernel takes a page fault for every 4 KiB the first
//! time it is written, and on the development VM those faults cost more system time than writing
//! the trace (0.1–0.4 s for a 6 M-event export, against 0.08 s for its 300 MB of writes).
//! Anonymous memory asked for with `madvise(MADV_HUGEPAGE)` faults in 2 MiB at a time where the
//! kernel has transparent huge pages (`/sys/kernel/mm/transparent_hugepage/enabled` "always" or
//! "madvise"); elsewhere it is ordinary memory. Zeroed either way.

use std::ops::{Deref, DerefMut};

/// The huge page size asked for (x86-64 and aarch64 with 4 KiB base pages).
const HUGE: usize = 2 << 20;

/// A zeroed byte buffer of a fixed length: mapped anonymous memory advised into huge pages, or
/// heap memory where mapping fails.
pub(super) enum Mem {
    Mapped { ptr: *mut u8, len: usize },
    Heap(Box<[u8]>),
}

// SAFETY: `Mapped` owns its mapping exclusively (nothing else holds the pointer), like a Box.
unsafe impl Send for Mem {}

impl Mem {
    /// `len` zeroed bytes (a multiple of 2 MiB stays huge-page aligned).
    pub(super) fn zeroed(len: usize) -> Mem {
        match map_huge(len) {
            Some(ptr) => Mem::Mapped { ptr, len },
            None => Mem::Heap(vec![0; len].into_boxed_slice()),
        }
    }
}

/// Maps `len` bytes aligned to `HUGE` and advises them into huge pages; None when mapping fails.
fn map_huge(len: usize) -> Option<*mut u8> {
    if len == 0 {
        return None;
    }
    let span = len.checked_add(HUGE)?;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
    // existing memory; the result is checked against MAP_FAILED.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = raw as usize;
    let aligned = start.next_multiple_of(HUGE);
    let head = aligned - start;
    let tail = span - head - len;
    // SAFETY: [start, start + head) and [aligned + len, start + span) lie inside the mapping
    // just made and outside the part kept; unmapping them leaves [aligned, aligned + len).
    // A failed unmap only leaves them mapped (reclaimed with the process).
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
        // Advice only: without transparent huge pages it fails and changes nothing.
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
    Some(aligned as *mut u8)
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Mem::Mapped { ptr, len } = *self {
            // SAFETY: `ptr..ptr + len` is the mapping `map_huge` returned, unmapped once here.
            unsafe {
                libc::munmap(ptr as *mut libc::c_void, len);
            }
        }
    }
}

impl Deref for Mem {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            // SAFETY: the mapping is `len` readable bytes (zeroed by the kernel), owned by self
            // for as long as the borrow.
            Mem::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Mem::Heap(b) => b,
        }
    }
}

impl DerefMut for Mem {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            // SAFETY: as in `deref`, and `&mut self` makes the borrow unique.
            Mem::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
            Mem::Heap(b) => b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_memory_is_zeroed_and_writable() {
        let mut m = Mem::zeroed(3 * HUGE);
        assert_eq!(m.len(), 3 * HUGE);
        assert!(m.iter().all(|&b| b == 0));
        m[HUGE + 5] = 7;
        assert_eq!(m[HUGE + 5], 7);
    }
}
