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
//! Each module names its own locks in a `hold_for_fork` function; the layers' are installed by
//! the composition root (lib.rs, [`install`]: this module names no layer), and [`hold_all`] calls
//! them outer locks first, then the runtime's own (a lock that is held while another is taken
//! comes before it: the doorbell state before the warnings it may queue, every layer before the
//! registry it defines endpoints in), so taking them cannot deadlock against a thread that nests
//! two of them.

use std::sync::OnceLock;

use crate::runtime::held::Held;

/// A layer's `hold_for_fork`: adds the locks it owns to the fork's guards.
pub type HoldFn = fn(&mut Held);
/// What a layer does in a fork child before the child's collector can start (forget a thread of
/// the parent's that the child does not have).
pub type ChildFn = fn();

/// The layers' lock holders, outer locks first, and their child hooks: installed once by the
/// composition root (lib.rs) in the constructor, before the program can have threads.
static LAYER_HOLDS: OnceLock<&'static [HoldFn]> = OnceLock::new();
static CHILD_HOOKS: OnceLock<&'static [ChildFn]> = OnceLock::new();

/// Installs the layers' lock holders (outer locks first: see the module doc) and their child
/// hooks. Constructor only; a second call changes nothing.
pub fn install(holds: &'static [HoldFn], child: &'static [ChildFn]) {
    let _ = LAYER_HOLDS.set(holds);
    let _ = CHILD_HOOKS.set(child);
}

/// Every lock, outer ones first (see the module doc): the layers' (in the order installed), then
/// the runtime's own, which the layers take while they hold theirs (registry, then config).
/// `blocking`: wait for each as long as it takes.
pub fn hold_all(blocking: bool) -> Held {
    let mut h = Held::new(blocking);
    for hold in LAYER_HOLDS.get().copied().unwrap_or(&[]) {
        hold(&mut h);
    }
    crate::runtime::registry::hold_for_fork(&mut h);
    crate::runtime::config::hold_for_fork(&mut h);
    h
}

/// Runs the layers' child hooks, in the order installed (the collector's fork-child handler, at
/// the point where the child forgets the parent's threads).
pub fn run_child_hooks() {
    for hook in CHILD_HOOKS.get().copied().unwrap_or(&[]) {
        hook();
    }
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
