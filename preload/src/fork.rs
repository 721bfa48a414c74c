//! Fork safety: every lock of sigmatop's that a thread of the program can hold is taken by the
//! forking thread across `fork()` (`pthread_atfork`: prepare takes them all, parent and child
//! release them), so a child never starts with a lock that another thread held at the moment of
//! the fork and that nobody in the child will ever release.
//!
//! Without it, a fork while any other thread was inside one of these locks left it locked for
//! good in the child, whose next hook needing it waited forever: seen with the registry (`ucx_life
//! fork` hung in `ucp_ep_close_nbx` → `registry::update`); the doorbell state is held across CUDA
//! driver calls, and a PyTorch DataLoader forks its workers from a process whose other threads
//! are setting up GPU QPs.
//!
//! Each module names its own locks in a `hold_for_fork` function; [`hold_all`] calls them outer
//! locks first (a lock that is held while another is taken comes before it: the doorbell state
//! before the warnings it may queue, every layer before the registry it defines endpoints in), so
//! taking them cannot deadlock against a thread that nests two of them.

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

/// Every lock, outer ones first (see the module doc). `blocking`: wait for each as long as it
/// takes.
pub fn hold_all(blocking: bool) -> Held {
    let mut h = Held {
        guards: Vec::with_capacity(16),
        blocking,
    };
    crate::doorbell::hold_for_fork(&mut h);
    crate::mlx5::hold_for_fork(&mut h);
    crate::ibverbs::hold_for_fork(&mut h);
    crate::ofi::hold_for_fork(&mut h);
    crate::cuda::hold_for_fork(&mut h);
    crate::registry::hold_for_fork(&mut h);
    crate::config::hold_for_fork(&mut h);
    h
}

thread_local! {
    static HELD: core::cell::RefCell<Option<Held>> = const { core::cell::RefCell::new(None) };
}

/// `pthread_atfork` prepare handler, in the forking thread: takes every lock. (glibc runs the
/// prepare handlers before it takes malloc's own locks, so the guards' allocation is safe.)
pub extern "C" fn prepare() {
    let held = hold_all(false);
    let _ = HELD.try_with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            *h = Some(held);
        }
    });
}

/// `pthread_atfork` parent and child handler: releases what [`prepare`] took.
pub extern "C" fn release() {
    let _ = HELD.try_with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            h.take();
        }
    });
}
