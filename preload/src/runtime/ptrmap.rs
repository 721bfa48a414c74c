//! The one lock-free map from a library's object pointer (a `ucp_ep_h`, an `ibv_qp *`, an
//! `ibv_context *`...) to what sigmatop keeps for it: an endpoint id, or a pointer to a leaked
//! per-object state. Reads (the hot path) are a hash and a few loads, with no lock; writes (the
//! control path) take a mutex among themselves. Open addressing with linear probing over a fixed
//! array: nothing is allocated, and a slot, once used, is never emptied, so a reader's probe
//! sequence never breaks. A key is forgotten by clearing its value to the zero word; its slot can
//! then be taken by a later key. A map made with `FRONT` keeps its first key in a slot of its own,
//! checked before hashing: for maps that usually hold one key (a process's verbs contexts).

use core::marker::PhantomData;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Slots probed per key at most; a key that finds no slot within them is not mapped.
const MAX_PROBE: usize = 64;

/// What a map holds per key: a non-zero word (zero means "no value").
pub trait Value: Copy {
    fn to_word(self) -> usize;
    fn from_word(w: usize) -> Self;
}

impl Value for u32 {
    #[inline(always)]
    fn to_word(self) -> usize {
        self as usize
    }
    #[inline(always)]
    fn from_word(w: usize) -> u32 {
        w as u32
    }
}

impl Value for u64 {
    #[inline(always)]
    fn to_word(self) -> usize {
        self as usize
    }
    #[inline(always)]
    fn from_word(w: usize) -> u64 {
        w as u64
    }
}

impl<T> Value for *const T {
    #[inline(always)]
    fn to_word(self) -> usize {
        self as usize
    }
    #[inline(always)]
    fn from_word(w: usize) -> *const T {
        w as *const T
    }
}

/// A map of at most `CAP` (a power of two) pointer keys to values of type `V` (plus, with
/// `FRONT`, its first key in a front slot). Keys and values sit in two arrays of words, so each is
/// one scaled load on the hot path.
pub struct PtrMap<V, const CAP: usize, const FRONT: bool = false> {
    front_key: AtomicUsize,
    front_value: AtomicUsize,
    keys: [AtomicUsize; CAP],
    values: [AtomicUsize; CAP],
    writers: Mutex<()>,
    _value: PhantomData<fn() -> V>,
}

impl<V: Value, const CAP: usize, const FRONT: bool> Default for PtrMap<V, CAP, FRONT> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Value, const CAP: usize, const FRONT: bool> PtrMap<V, CAP, FRONT> {
    const BITS: u32 = {
        assert!(CAP.is_power_of_two() && CAP >= MAX_PROBE);
        CAP.trailing_zeros()
    };

    pub const fn new() -> Self {
        PtrMap {
            front_key: AtomicUsize::new(0),
            front_value: AtomicUsize::new(0),
            keys: [const { AtomicUsize::new(0) }; CAP],
            values: [const { AtomicUsize::new(0) }; CAP],
            writers: Mutex::new(()),
            _value: PhantomData,
        }
    }

    /// Fibonacci hashing of the pointer without its alignment bits.
    #[inline(always)]
    fn home(key: usize) -> usize {
        (((key >> 3) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - Self::BITS)) as usize
    }

    /// The value of `key`, if it was ever inserted: a key that was cleared since gives the zero
    /// word's value (0, a null pointer), which the caller tells apart where it clears keys.
    /// Lock-free; safe against concurrent writers.
    #[inline(always)]
    pub fn get(&self, key: usize) -> Option<V> {
        match self.at_home(key) {
            Ok(v) => v,
            Err(i) => self.probe_from(key, i),
        }
    }

    /// As [`PtrMap::get`], with the probe past the home slot out of line: for a hook whose
    /// bookkeeping must stay small enough to be inlined into it (the UCX hooks: with the loop
    /// inlined, their record path in simple mode with a record compiled to a call with every
    /// capture spilled). Where the lookup sits inside a loop (the verbs completion and WR loops)
    /// the plain `get` is cheaper: a call there costs registers on every iteration.
    #[inline(always)]
    pub fn get_compact(&self, key: usize) -> Option<V> {
        match self.at_home(key) {
            Ok(v) => v,
            Err(i) => self.probe(key, i),
        }
    }

    /// The front slot and the home slot: `Ok` with the answer, or `Err(home)` when another key
    /// holds the home slot and the probe must go on. The home slot is checked before any probe
    /// loop: it is where nearly every key lives, and the loop's counter then costs nothing on the
    /// hot path.
    #[inline(always)]
    fn at_home(&self, key: usize) -> Result<Option<V>, usize> {
        if FRONT && self.front_key.load(Ordering::Acquire) == key {
            return Ok(Some(V::from_word(self.front_value.load(Ordering::Acquire))));
        }
        let i = Self::home(key);
        let k = self.keys[i].load(Ordering::Acquire);
        if k == key {
            return Ok(Some(V::from_word(self.values[i].load(Ordering::Acquire))));
        }
        if k == 0 {
            return Ok(None);
        }
        Err(i)
    }

    /// The rest of a probe sequence after the home slot `i` (a collision: rare), out of line.
    #[inline(never)]
    fn probe(&self, key: usize, i: usize) -> Option<V> {
        self.probe_from(key, i)
    }

    #[inline(always)]
    fn probe_from(&self, key: usize, mut i: usize) -> Option<V> {
        for _ in 1..MAX_PROBE {
            i = (i + 1) & (CAP - 1);
            let k = self.keys[i].load(Ordering::Acquire);
            if k == key {
                return Some(V::from_word(self.values[i].load(Ordering::Acquire)));
            }
            if k == 0 {
                return None;
            }
        }
        None
    }

    /// Tries the writers' lock (held across a fork: `fork::prepare`).
    pub fn try_lock_writers(&self) -> std::sync::TryLockResult<std::sync::MutexGuard<'_, ()>> {
        self.writers.try_lock()
    }

    /// Maps `key` (non-zero) to `value` (non-zero), replacing what it had. False when the map
    /// has no room for it near its home slot.
    pub fn insert(&self, key: usize, value: V) -> bool {
        let value = value.to_word();
        if key == 0 || value == 0 {
            return false;
        }
        let _writers = self.writers.lock();
        if FRONT {
            // The front slot belongs to the first key ever inserted, for good: a key is always
            // in one place only.
            let front = self.front_key.load(Ordering::Relaxed);
            if front == key || front == 0 {
                self.front_value.store(value, Ordering::Release);
                self.front_key.store(key, Ordering::Release);
                return true;
            }
        }
        let mut i = Self::home(key);
        let mut reusable = None;
        for _ in 0..MAX_PROBE {
            let k = self.keys[i].load(Ordering::Relaxed);
            if k == key {
                self.values[i].store(value, Ordering::Release);
                return true;
            }
            if k == 0 {
                reusable.get_or_insert(i);
                break;
            }
            if reusable.is_none() && self.values[i].load(Ordering::Relaxed) == 0 {
                // A forgotten key's slot: taken unless `key` is further along.
                reusable = Some(i);
            }
            i = (i + 1) & (CAP - 1);
        }
        let Some(i) = reusable else {
            return false;
        };
        // Value first: a reader that sees the key sees its value.
        self.values[i].store(value, Ordering::Release);
        self.keys[i].store(key, Ordering::Release);
        true
    }

    /// Every value present now (cleared keys' zero words left out). Control path: a scan of the
    /// whole map.
    pub fn values(&self) -> impl Iterator<Item = V> + '_ {
        let front = FRONT
            .then(|| self.front_value.load(Ordering::Acquire))
            .into_iter();
        front
            .chain(self.values.iter().map(|v| v.load(Ordering::Acquire)))
            .filter(|&w| w != 0)
            .map(V::from_word)
    }

    /// Forgets the value of `key` (the object is gone).
    pub fn clear(&self, key: usize) {
        let _writers = self.writers.lock();
        if FRONT && self.front_key.load(Ordering::Relaxed) == key {
            self.front_value.store(0, Ordering::Release);
            return;
        }
        let mut i = Self::home(key);
        for _ in 0..MAX_PROBE {
            let k = self.keys[i].load(Ordering::Relaxed);
            if k == key {
                self.values[i].store(0, Ordering::Release);
                return;
            }
            if k == 0 {
                return;
            }
            i = (i + 1) & (CAP - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_replace_clear_reuse() {
        let m: Box<PtrMap<u32, 1024>> = Box::default();
        for i in 1..700usize {
            assert!(m.insert(i * 64, i as u32));
        }
        for i in 1..700usize {
            assert_eq!(m.get(i * 64), Some(i as u32));
        }
        assert_eq!(m.get(12345 * 64 + 8), None);
        assert!(m.insert(64, 777));
        assert_eq!(m.get(64), Some(777));
        m.clear(64);
        assert_eq!(m.get(64), Some(0));
        // Keys further along the probe sequence are still found after a clear.
        for i in 2..700usize {
            assert_eq!(m.get(i * 64), Some(i as u32));
        }
        assert!(m.insert(99_999 * 64, 5));
        assert_eq!(m.get(99_999 * 64), Some(5));
        assert!(!m.insert(0, 1));
        assert!(!m.insert(8, 0));
    }

    #[test]
    fn the_front_slot_keeps_its_first_key() {
        let m: Box<PtrMap<u32, 64, true>> = Box::default();
        assert!(m.insert(0x1000, 1));
        assert!(m.insert(0x2000, 2));
        assert_eq!((m.get(0x1000), m.get(0x2000)), (Some(1), Some(2)));
        m.clear(0x1000);
        assert_eq!(m.get(0x1000), Some(0));
        // A new key never takes the front: the first key stays there (a reopened context at the
        // same address finds its slot again).
        assert!(m.insert(0x3000, 3));
        assert!(m.insert(0x1000, 4));
        assert_eq!((m.get(0x1000), m.get(0x3000)), (Some(4), Some(3)));
    }

    #[test]
    fn a_full_neighbourhood_refuses() {
        let m: Box<PtrMap<u32, 64>> = Box::default();
        let mut stored = 0;
        for i in 1..200usize {
            if m.insert(i * 8, 1) {
                stored += 1;
            }
        }
        assert_eq!(stored, 64);
    }
}
