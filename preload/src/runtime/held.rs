//! The guards that the forking thread holds across `fork()` (runtime::fork takes them): each
//! module that owns a lock a program thread can hold adds it through [`Held::lock`] or
//! [`Held::with`]. A leaf: it names no other module, so every floor can use it.

use core::any::Any;
use std::sync::{Mutex, TryLockError, TryLockResult};
use std::time::{Duration, Instant};

/// How long `prepare` waits for one lock before forking without it: these locks are held for
/// microseconds, so only a fork made while the forking thread itself holds one (from a signal
/// handler that interrupted sigmatop) waits this long, and it must not wait for ever.
const GIVE_UP_AFTER: Duration = Duration::from_millis(100);

/// The guards taken for one fork (released by dropping them).
pub struct Held {
    guards: Vec<Box<dyn Any>>,
    /// Wait for each lock for as long as it takes (the bench probe of a child, which must hang
    /// when a lock was left held so that the test sees it).
    blocking: bool,
}

impl Held {
    /// Nothing held yet. `blocking`: wait for each lock as long as it takes.
    pub fn new(blocking: bool) -> Held {
        Held {
            guards: Vec::with_capacity(16),
            blocking,
        }
    }

    /// Takes `m`, unless it is poisoned (its data is not read again) or not free in time.
    pub fn lock<T: 'static>(&mut self, m: &'static Mutex<T>) {
        self.with(|| m.try_lock());
    }

    /// Takes a lock through its `try_lock` (a map's writers' lock, ...), as [`Held::lock`].
    pub fn with<G: 'static>(&mut self, mut try_lock: impl FnMut() -> TryLockResult<G>) {
        let start = Instant::now();
        loop {
            match try_lock() {
                Ok(g) => {
                    self.guards.push(Box::new(g));
                    return;
                }
                Err(TryLockError::Poisoned(_)) => return,
                Err(TryLockError::WouldBlock) => {
                    if !self.blocking && start.elapsed() > GIVE_UP_AFTER {
                        return;
                    }
                    std::thread::yield_now();
                }
            }
        }
    }

    /// How many locks are held.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }
}
