//! Per-object copies of a provider's ops tables: how sigmatop puts its wrappers into a libfabric
//! object without writing the provider's own (shared, global) tables.

use core::mem::size_of;

use super::abi::OpsTable;
use super::unwrapped;
pub use crate::interpose::hook::wrap_slot;

/// A copy of a provider table, the id of the object it belongs to, and the provider's table.
/// The object's table pointer points at `table` (offset 0), so a wrapper reaches `id` and `orig`
/// from the pointer it already has.
#[repr(C)]
pub struct Wrapped<T> {
    pub table: T,
    pub id: u32,
    pub orig: *const T,
}

impl<T> Wrapped<T> {
    /// The copy an object's table pointer points at, and the provider's table it was made from.
    ///
    /// # Safety
    /// `table` is an object's table pointer that points at a `Wrapped<T>` (only sigmatop's
    /// wrappers installed in that copy call this), which lives as long as the object.
    #[inline(always)]
    pub unsafe fn of<'a>(table: *const T) -> (&'a Wrapped<T>, &'a T) {
        // SAFETY: the caller's contract; `table` is the copy's first field and `orig` the
        // provider's table, which outlives the object.
        unsafe {
            let w = &*(table as *const Wrapped<T>);
            (w, &*w.orig)
        }
    }
}

/// Copies the provider table `orig` into `w` when its `size` fits; slots past `size` stay NULL.
/// Returns false (nothing copied) for a NULL or larger-than-known table.
///
/// # Safety
/// `orig` is NULL or a provider table starting with its `size_t size`.
pub unsafe fn copy_table<T: OpsTable>(w: &mut Wrapped<T>, orig: *const T, id: u32) -> bool {
    if orig.is_null() {
        return false;
    }
    // SAFETY: every libfabric ops table begins with `size_t size` (caller's contract).
    let size = unsafe { *(orig as *const usize) };
    if size < size_of::<usize>() || size > size_of::<T>() {
        unwrapped();
        crate::runtime::config::warn(format!(
            "a libfabric provider table is {size} bytes, sigmatop knows {}: that object is not traced",
            size_of::<T>()
        ));
        return false;
    }
    // SAFETY: `size` bytes are readable at orig (the provider's own size) and fit in w.table.
    unsafe {
        core::ptr::copy_nonoverlapping(orig as *const u8, &mut w.table as *mut T as *mut u8, size)
    };
    w.id = id;
    w.orig = orig;
    true
}

/// Allocates `v` on the heap; None when memory is exhausted (the caller passes through).
pub fn try_box<T>(v: T) -> Option<*mut T> {
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: T is never zero-sized here (every state holds tables).
    let p = unsafe { std::alloc::alloc(layout) } as *mut T;
    if p.is_null() {
        unwrapped();
        return None;
    }
    // SAFETY: p is a fresh allocation for one T.
    unsafe { p.write(v) };
    Some(p)
}

/// Frees what `try_box` allocated.
///
/// # Safety
/// `p` came from `try_box::<T>` and is no longer reachable from any libfabric object.
pub unsafe fn free_box<T>(p: *mut T) {
    // SAFETY: caller's contract.
    unsafe {
        core::ptr::drop_in_place(p);
        std::alloc::dealloc(p as *mut u8, std::alloc::Layout::new::<T>());
    }
}

pub fn zeroed_wrapped<T: OpsTable>() -> Wrapped<T> {
    Wrapped {
        // SAFETY: all-zero bytes are a valid ops table (`OpsTable`'s contract).
        table: unsafe { core::mem::zeroed() },
        id: 0,
        orig: core::ptr::null(),
    }
}
