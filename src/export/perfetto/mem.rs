//! The window's memory in 2 MiB pages. A full window holds 256 Ki encoded events (~11 MB) and
//! their entries (4 MB); with the 2 Mi events it held before 2026-12-07 (~100 MB and ~32 MB), in
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

/// Implemented by the types a `Ring` may hold: plain integers or structs of them.
///
/// # Safety
/// Every bit pattern, all zeros included, must be a valid value of the type, and its alignment
/// at most a page's.
pub(super) unsafe trait Plain: Copy + Default {}

/// A double-ended queue of `Plain` values in a ring of huge-page memory (a `Vec` where mapping
/// fails): the window's entries, up to ~2 Mi of them. It grows by doubling, but not past
/// `limit` slots until it holds that many (the window's bound): a ring of one more power of
/// two would be written all over as it turns, twice the memory for nothing.
pub(super) struct Ring<T: Plain> {
    /// Where the `cap` slots are: `mapped`'s memory, else `heap`'s (kept here to free them).
    mapped: Option<Mem>,
    heap: Vec<T>,
    /// The first slot; valid for `cap` slots (dangling with `cap` 0).
    ptr: *mut T,
    cap: usize,
    head: usize,
    len: usize,
    limit: usize,
}

// SAFETY: `ptr` points into memory the ring owns (`mapped` or `heap`), like a Vec's.
unsafe impl<T: Plain + Send> Send for Ring<T> {}

impl<T: Plain> Ring<T> {
    /// An empty ring that grows to `limit` slots at most while it holds no more.
    pub(super) fn new(limit: usize) -> Self {
        Ring {
            mapped: None,
            heap: Vec::new(),
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            cap: 0,
            head: 0,
            len: 0,
            limit,
        }
    }

    /// The slot `i` places after the head (`i < len`, so `cap > 0`).
    #[inline(always)]
    fn slot(&self, i: usize) -> *mut T {
        debug_assert!(i < self.len && self.head < self.cap);
        let mut at = self.head + i;
        if at >= self.cap {
            at -= self.cap;
        }
        // SAFETY: `head < cap` and `i < len <= cap`, so `at < cap` after the wrap, and `ptr`
        // is valid for `cap` slots (`grow`); `len > 0` implies `cap > 0`.
        unsafe { self.ptr.add(at) }
    }

    #[inline(always)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`-th value from the front.
    #[inline(always)]
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `slot(i)` is a valid, initialised slot (`i < len`; every slot holds a valid T:
        // `Plain`, zeroed or written), borrowed with self.
        Some(unsafe { &*self.slot(i) })
    }

    #[inline(always)]
    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        // SAFETY: as in `get`, and `&mut self` makes the borrow unique.
        Some(unsafe { &mut *self.slot(i) })
    }

    #[inline(always)]
    pub(super) fn front(&self) -> Option<&T> {
        self.get(0)
    }

    #[inline(always)]
    pub(super) fn push_back(&mut self, v: T) {
        if self.len == self.cap {
            self.grow();
        }
        self.len += 1;
        let at = self.slot(self.len - 1);
        // SAFETY: `at` is a slot of the ring (index `len - 1 < len <= cap`).
        unsafe { at.write(v) };
    }

    #[inline(always)]
    pub(super) fn pop_front(&mut self) -> Option<T> {
        let v = *self.front()?;
        self.head += 1;
        if self.head == self.cap {
            self.head = 0;
        }
        self.len -= 1;
        Some(v)
    }

    /// The values from the front to the end of the slots or of the values, whichever comes
    /// first: the front's contiguous part (empty only when the ring is).
    #[inline(always)]
    pub(super) fn front_slice(&self) -> &[T] {
        if self.len == 0 {
            return &[];
        }
        let n = self.len.min(self.cap - self.head);
        // SAFETY: `len > 0` so `cap > 0` and `head < cap`; slots `head..head + n` lie inside the
        // `cap` slots `ptr` is valid for (`n <= cap - head`) and are live (`n <= len`), borrowed
        // with self.
        unsafe { std::slice::from_raw_parts(self.ptr.add(self.head), n) }
    }

    /// Removes the first `n` values (at most `len`).
    #[inline(always)]
    pub(super) fn drop_front(&mut self, n: usize) {
        assert!(n <= self.len, "drop_front({n}) of {}", self.len);
        if n == 0 {
            return;
        }
        self.head += n;
        if self.head >= self.cap {
            self.head -= self.cap;
        }
        self.len -= n;
    }

    /// Doubles the capacity (at first 2 MiB worth), keeping the order.
    #[cold]
    fn grow(&mut self) {
        let size = std::mem::size_of::<T>().max(1);
        let mut cap = (self.cap * 2).max(HUGE / size);
        if self.cap < self.limit {
            cap = cap.min(self.limit);
        }
        let mut next = Ring::new(self.limit);
        match Mem::zeroed(cap * size) {
            mut m @ Mem::Mapped { .. } => {
                next.ptr = m.as_mut_ptr() as *mut T;
                next.mapped = Some(m);
            }
            Mem::Heap(_) => {
                next.heap = vec![T::default(); cap];
                next.ptr = next.heap.as_mut_ptr();
            }
        }
        next.cap = cap;
        // The live values in order (a mapping is page aligned, enough for T: `Plain`): from
        // the head to the end of the slots, then from the first slot.
        let first = self.len.min(self.cap - self.head);
        // SAFETY: `self`'s slots `head..head + first` and `0..len - first` are live and inside
        // its `cap` slots; `next`'s `0..len` lie inside its `cap > len` slots, in another
        // allocation, so the copies do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.add(self.head), next.ptr, first);
            std::ptr::copy_nonoverlapping(self.ptr, next.ptr.add(first), self.len - first);
        }
        next.len = self.len;
        *self = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Default, Debug, PartialEq)]
    struct Pair(u64, u64);
    // SAFETY: two u64: every bit pattern is valid.
    unsafe impl Plain for Pair {}

    /// The ring keeps first-in first-out order across growth and wrap-around, like a VecDeque.
    #[test]
    fn ring_is_a_queue() {
        // A limit that is no power of two, reached and passed.
        let mut r: Ring<Pair> = Ring::new(300_001);
        let mut d = std::collections::VecDeque::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..400_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Mostly pushes at first, then balanced: the ring grows, then wraps.
            if !x.is_multiple_of(3) || i < 300_000 && !x.is_multiple_of(5) {
                r.push_back(Pair(i, x));
                d.push_back(Pair(i, x));
            } else {
                assert_eq!(r.pop_front(), d.pop_front());
            }
            assert_eq!(r.len(), d.len());
            if i % 1009 == 0 {
                // The front's contiguous part, then dropping part of it.
                let s = r.front_slice();
                assert!(!s.is_empty() || d.is_empty());
                for (k, v) in s.iter().enumerate() {
                    assert_eq!(Some(v), d.get(k));
                }
                let n = s.len() / 3;
                r.drop_front(n);
                d.drain(..n);
                assert_eq!(r.len(), d.len());
            }
            if i % 997 == 0 && !d.is_empty() {
                let k = (x as usize) % d.len();
                assert_eq!(r.get(k), d.get(k));
                if let Some(v) = r.get_mut(k) {
                    v.1 ^= 1;
                }
                d[k].1 ^= 1;
            }
        }
        while let Some(v) = d.pop_front() {
            assert_eq!(r.pop_front(), Some(v));
        }
        assert!(r.is_empty() && r.pop_front().is_none() && r.front().is_none());
    }

    #[test]
    fn mapped_memory_is_zeroed_and_writable() {
        let mut m = Mem::zeroed(3 * HUGE);
        assert_eq!(m.len(), 3 * HUGE);
        assert!(m.iter().all(|&b| b == 0));
        m[HUGE + 5] = 7;
        assert_eq!(m[HUGE + 5], 7);
    }
}
