//! Symbol lookup: the real `dlsym`/`dlvsym` found in libc's own dynamic symbol table (calling
//! them by name would reach the exported wrappers of crate::interpose::dlsym), and the real-function slots
//! of the hooks (`RealFn`: RTLD_NEXT, then the already-loaded library by soname: UCX opens
//! libibverbs with local scope, where RTLD_NEXT finds nothing). Names no other module of the
//! preload: the dlsym wrappers and every layer sit above it.

use core::ffi::{CStr, c_char, c_int, c_void};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicPtr, Ordering};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// libc's own `dlsym` (and `dlvsym`), once found; the exported wrappers (crate::interpose::dlsym) jump to it.
pub(crate) static REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
pub(crate) static REAL_DLVSYM: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// ELF64 dynamic section entry (elf.h `Elf64_Dyn`).
#[repr(C)]
struct Elf64Dyn {
    d_tag: i64,
    d_un: u64,
}
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;

/// GNU hash of a symbol name (the ELF DT_GNU_HASH function).
fn gnu_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 5381;
    for &c in name {
        h = h.wrapping_mul(33).wrapping_add(c as u32);
    }
    h
}

struct Found {
    want: &'static [u8],
    addr: *mut c_void,
}

/// Looks up `want` in the dynamic symbol table of a loaded libc through its GNU hash table.
/// Pure reads of memory the dynamic linker already mapped; no allocation, no lock but
/// dl_iterate_phdr's own.
unsafe extern "C" fn phdr_callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info struct and our own `data` pointer.
    let (info, found) = unsafe { (&*info, &mut *(data as *mut Found)) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: dlpi_name is a NUL-terminated string owned by the dynamic linker.
    let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    let is_libc = name.ends_with(b"/libc.so.6") || name == b"libc.so.6";
    if !is_libc {
        return 0;
    }
    let base = info.dlpi_addr as usize;
    let mut dynamic: *const Elf64Dyn = core::ptr::null();
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_DYNAMIC {
            dynamic = (base + ph.p_vaddr as usize) as *const Elf64Dyn;
        }
    }
    if dynamic.is_null() {
        return 0;
    }
    let (mut symtab, mut strtab, mut gnuhash) = (0usize, 0usize, 0usize);
    let fix = |p: u64| -> usize {
        // glibc relocates these entries in place on x86_64; other loaders leave them relative.
        if (p as usize) < base {
            base + p as usize
        } else {
            p as usize
        }
    };
    let mut d = dynamic;
    loop {
        // SAFETY: the dynamic section is an array terminated by DT_NULL.
        let e = unsafe { &*d };
        match e.d_tag {
            0 => break,
            DT_SYMTAB => symtab = fix(e.d_un),
            DT_STRTAB => strtab = fix(e.d_un),
            DT_GNU_HASH => gnuhash = fix(e.d_un),
            _ => {}
        }
        // SAFETY: not past DT_NULL yet.
        d = unsafe { d.add(1) };
    }
    if symtab == 0 || strtab == 0 || gnuhash == 0 {
        return 0;
    }
    let h = gnu_hash(found.want);
    // SAFETY: layout of DT_GNU_HASH: nbuckets, symoffset, bloom_size, bloom_shift, bloom[], buckets[], chain[].
    unsafe {
        let hdr = gnuhash as *const u32;
        let nbuckets = *hdr;
        let symoffset = *hdr.add(1);
        let bloom_size = *hdr.add(2);
        if nbuckets == 0 {
            return 0;
        }
        let buckets = hdr
            .add(4)
            .cast::<u64>()
            .add(bloom_size as usize)
            .cast::<u32>();
        let chain = buckets.add(nbuckets as usize);
        let mut idx = *buckets.add((h % nbuckets) as usize);
        if idx < symoffset {
            return 0;
        }
        loop {
            let ch = *chain.add((idx - symoffset) as usize);
            if (ch | 1) == (h | 1) {
                let sym = &*(symtab as *const libc::Elf64_Sym).add(idx as usize);
                let sname = CStr::from_ptr((strtab + sym.st_name as usize) as *const c_char);
                if sname.to_bytes() == found.want && sym.st_value != 0 {
                    found.addr = (base + sym.st_value as usize) as *mut c_void;
                    return 1;
                }
            }
            if ch & 1 != 0 {
                break;
            }
            idx += 1;
        }
    }
    0
}

fn find_in_libc(want: &'static [u8]) -> *mut c_void {
    let mut found = Found {
        want,
        addr: core::ptr::null_mut(),
    };
    // SAFETY: callback only reads loader data; `found` outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(phdr_callback), &mut found as *mut Found as *mut c_void);
    }
    found.addr
}

/// Appends the path of every object the dynamic linker has loaded (the program, its libraries,
/// what it opened with dlopen), one per line, to `out`. Exit-time diagnosis only.
pub fn loaded_objects(out: &mut Vec<u8>) {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info struct and our own `data` pointer.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<u8>)) };
        if !info.dlpi_name.is_null() {
            // SAFETY: dlpi_name is a NUL-terminated string owned by the dynamic linker.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
            if !name.is_empty() && !name.contains(&b'\n') {
                out.extend_from_slice(name);
                out.push(b'\n');
            }
        }
        0
    }
    // SAFETY: the callback only reads loader data and appends to `out`, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(each), out as *mut Vec<u8> as *mut c_void);
    }
}

/// Resolves the real dlsym/dlvsym once. Safe to call from any thread, any time.
pub fn init() {
    if REAL_DLSYM.load(Ordering::Acquire).is_null() {
        let p = find_in_libc(b"dlsym");
        REAL_DLSYM.store(p, Ordering::Release);
    }
    if REAL_DLVSYM.load(Ordering::Acquire).is_null() {
        let p = find_in_libc(b"dlvsym");
        REAL_DLVSYM.store(p, Ordering::Release);
    }
}

/// Calls the real dlsym.
///
/// # Safety
/// `name` must be a NUL-terminated string; `handle` as for dlsym(3).
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p.is_null() {
        init();
        p = REAL_DLSYM.load(Ordering::Acquire);
        if p.is_null() {
            return core::ptr::null_mut();
        }
    }
    // SAFETY: p is libc's dlsym.
    unsafe { core::mem::transmute::<*mut c_void, DlsymFn>(p)(handle, name) }
}

/// Calls the real dlvsym.
///
/// # Safety
/// `name` and `ver` must be NUL-terminated strings; `handle` as for dlvsym(3).
pub unsafe fn real_dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    ver: *const c_char,
) -> *mut c_void {
    let mut p = REAL_DLVSYM.load(Ordering::Acquire);
    if p.is_null() {
        init();
        p = REAL_DLVSYM.load(Ordering::Acquire);
        if p.is_null() {
            return core::ptr::null_mut();
        }
    }
    // SAFETY: p is libc's dlvsym.
    unsafe { core::mem::transmute::<*mut c_void, DlvsymFn>(p)(handle, name, ver) }
}

/// Finds the next definition of `name` after this library: RTLD_NEXT first, then each loaded
/// library named in `sonames` (RTLD_NOLOAD: never loads anything).
pub fn next_symbol(name: &CStr, sonames: &[&CStr]) -> *mut c_void {
    // SAFETY: name is a CStr.
    let p = unsafe { real_dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if !p.is_null() {
        return p;
    }
    loaded_symbol(name, sonames)
}

/// The definition of `name` in the first already-loaded library of `sonames` that has one
/// (RTLD_NOLOAD: never loads anything), looked up with libc's own dlsym.
pub fn loaded_symbol(name: &CStr, sonames: &[&CStr]) -> *mut c_void {
    for so in sonames {
        // SAFETY: RTLD_NOLOAD only returns a handle to an already-loaded object.
        let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if !h.is_null() {
            // SAFETY: h is a live handle, name a CStr.
            let p = unsafe { real_dlsym(h, name.as_ptr()) };
            // SAFETY: balances the reference taken by dlopen above; the library stays loaded by
            // the program's own reference.
            unsafe { libc::dlclose(h) };
            if !p.is_null() {
                return p;
            }
        }
    }
    core::ptr::null_mut()
}

/// The untyped slot of a [`RealFn`]: where the dlsym wrappers store the real function a
/// program's own lookup found.
pub struct RealSlot {
    ptr: AtomicPtr<c_void>,
    name: &'static CStr,
    sonames: &'static [&'static CStr],
}

impl RealSlot {
    pub const fn new(name: &'static CStr, sonames: &'static [&'static CStr]) -> RealSlot {
        RealSlot {
            ptr: AtomicPtr::new(core::ptr::null_mut()),
            name,
            sonames,
        }
    }

    /// Itself (as `RealFn::slot`, for the hook tables).
    pub const fn slot(&'static self) -> &'static RealSlot {
        self
    }

    /// The real function, or null when no library defines it (the caller must then fail the call
    /// the way a missing symbol would, never call null).
    #[inline]
    pub fn get(&self) -> *mut c_void {
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            return p;
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> *mut c_void {
        let p = next_symbol(self.name, self.sonames);
        if !p.is_null() {
            self.ptr.store(p, Ordering::Relaxed);
        }
        p
    }

    /// Takes the real function a program's own lookup just found. Always replaces what was
    /// known: a library that was dlclosed and opened again lives at a new address, and the
    /// program's fresh lookup is the authority on where.
    pub fn set(&self, p: *mut c_void) {
        if !p.is_null() {
            self.ptr.store(p, Ordering::Relaxed);
        }
    }

    /// Remembers the real function when a program's dlsym handed it to us.
    pub fn set_if_unset(&self, p: *mut c_void) {
        if !p.is_null() {
            let _ = self.ptr.compare_exchange(
                core::ptr::null_mut(),
                p,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }
}

/// A lazily resolved pointer to the real implementation of a hooked function, of the C
/// function-pointer type `F`.
pub struct RealFn<F> {
    slot: RealSlot,
    _sig: PhantomData<F>,
}

impl<F: Copy> RealFn<F> {
    const WORD: () = assert!(core::mem::size_of::<F>() == core::mem::size_of::<*mut c_void>());

    /// The real `name`, looked up after this library, then in the loaded `sonames`.
    ///
    /// # Safety
    /// `F` is the C signature of `name` in those libraries (their public header's).
    pub const unsafe fn new(name: &'static CStr, sonames: &'static [&'static CStr]) -> Self {
        RealFn {
            slot: RealSlot::new(name, sonames),
            _sig: PhantomData,
        }
    }

    /// The real function, or None when no loaded library defines it (the hook then fails the
    /// call as a missing symbol would).
    #[inline(always)]
    pub fn get(&self) -> Option<F> {
        let () = Self::WORD;
        let p = self.slot.get();
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` is the loaded library's definition of the symbol, whose C signature is `F`
        // (`new`'s contract); F is one pointer wide (WORD).
        Some(unsafe { core::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// The untyped slot (for the dlsym wrappers' table).
    pub const fn slot(&'static self) -> &'static RealSlot {
        &self.slot
    }
}

/// Declares one `RealFn` static per hooked function of a library: `NAME: Type = c"symbol";`.
/// Each type is the symbol's C signature from that library's public header.
macro_rules! real_fns {
    ($sonames:expr; $($(#[$m:meta])* $vis:vis $slot:ident: $ty:ty = $name:literal;)*) => {
        $(
            $(#[$m])*
            $vis static $slot: crate::runtime::dl::RealFn<$ty> =
                // SAFETY: `$ty` is the C signature of `$name` in the library's public header
                // (each use of this macro states it).
                unsafe { crate::runtime::dl::RealFn::new($name, $sonames) };
        )*
    };
}
pub(crate) use real_fns;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libc_dlsym() {
        init();
        assert!(!REAL_DLSYM.load(Ordering::Acquire).is_null());
        assert!(!REAL_DLVSYM.load(Ordering::Acquire).is_null());
        // SAFETY: a C string literal.
        let p = unsafe { real_dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert!(!p.is_null());
    }
}
