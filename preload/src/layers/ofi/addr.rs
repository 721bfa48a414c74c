//! libfabric addresses: what sigmatop knows of a domain's address format, the identifying bytes
//! and text of an address blob, and the AV book that maps each endpoint's `fi_addr`s to peers.

use core::ffi::{c_int, c_void};
use std::sync::Mutex;

use sigmatop::event::{Peer, fnv1a64};

use super::abi::{FiInfo, Fid};

const FI_SOCKADDR: u32 = 1;
const FI_SOCKADDR_IN: u32 = 2;
const FI_SOCKADDR_IN6: u32 = 3;
const FI_ADDR_STR: u32 = 9;

/// Largest address sigmatop reads (getname / av lookup buffers, string addresses).
pub const ADDR_MAX: usize = 256;

/// What sigmatop knows about an opened domain: the provider and its address format.
#[derive(Clone, Default)]
pub struct AddrInfo {
    pub prov: String,
    pub addr_format: u32,
    pub addrlen: usize,
}

/// AV bookkeeping (control path): which endpoints are bound to which AV and what was inserted,
/// so each endpoint gets an "av" update per (fi_addr → peer address).
#[derive(Default)]
pub struct AvBook {
    pub av: usize,
    pub eps: Vec<u32>,
    pub addrs: Vec<(u64, u64)>,
}

pub static AV_BOOKS: Mutex<Vec<AvBook>> = Mutex::new(Vec::new());

/// Tells endpoint `ep` that its `fi_addr` names the peer whose address hashes to `hash`.
pub fn announce(ep: u32, fi_addr: u64, hash: u64) {
    crate::runtime::registry::update(
        ep,
        "av",
        Some(Peer {
            addr_hash: hash,
            text: format!("fi_addr {fi_addr}"),
            ..Default::default()
        }),
    );
}

/// Runs `f` on the book of AV `av` (made on first use).
pub fn av_book<R>(av: usize, f: impl FnOnce(&mut AvBook) -> R) -> Option<R> {
    let mut books = AV_BOOKS.lock().ok()?;
    let i = match books.iter().position(|b| b.av == av) {
        Some(i) => i,
        None => {
            books.push(AvBook {
                av,
                ..Default::default()
            });
            books.len() - 1
        }
    };
    Some(f(&mut books[i]))
}

/// The identifying bytes of an address blob, and a printable form. Socket addresses keep family,
/// port and IP only (padding and flow info vary between copies); string addresses stop at NUL.
pub fn canon(format: u32, b: &[u8]) -> (Vec<u8>, String) {
    let family = if b.len() >= 2 {
        u16::from_ne_bytes([b[0], b[1]]) as i32
    } else {
        -1
    };
    let sockaddr = matches!(format, FI_SOCKADDR | FI_SOCKADDR_IN | FI_SOCKADDR_IN6)
        || (format == 0 && (family == libc::AF_INET || family == libc::AF_INET6));
    if sockaddr && family == libc::AF_INET && b.len() >= 8 {
        let port = u16::from_be_bytes([b[2], b[3]]);
        let ip = std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7]);
        return (b[..8].to_vec(), format!("{ip}:{port}"));
    }
    if sockaddr && family == libc::AF_INET6 && b.len() >= 24 {
        let port = u16::from_be_bytes([b[2], b[3]]);
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&b[8..24]);
        let mut key = b[..4].to_vec();
        key.extend_from_slice(&ip);
        return (key, format!("[{}]:{port}", std::net::Ipv6Addr::from(ip)));
    }
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let looks_str =
        format == 0 && end > 0 && end < b.len() && b[..end].iter().all(u8::is_ascii_graphic);
    if format == FI_ADDR_STR || looks_str {
        let s = String::from_utf8_lossy(&b[..end]).into_owned();
        return (b[..end].to_vec(), s);
    }
    let hex: String = b.iter().take(16).map(|x| format!("{x:02x}")).collect();
    (b.to_vec(), hex)
}

/// Reads an address of `format` at `p` whose length the caller may not know (`len` 0).
///
/// # Safety
/// `p` is NULL or points at an address of `format` (at least `len` bytes when `len` > 0).
pub unsafe fn read_addr(format: u32, p: *const c_void, len: usize) -> Option<Vec<u8>> {
    if p.is_null() {
        return None;
    }
    let n = match format {
        FI_SOCKADDR_IN => 16,
        FI_SOCKADDR_IN6 => 28,
        FI_SOCKADDR => {
            // SAFETY: a struct sockaddr starts with its 2-byte family.
            let fam = unsafe { *(p as *const u16) } as i32;
            if fam == libc::AF_INET6 { 28 } else { 16 }
        }
        FI_ADDR_STR => {
            let max = if len > 0 { len.min(ADDR_MAX) } else { ADDR_MAX };
            let mut n = 0;
            // SAFETY: reads stop at the terminating NUL, which lies within the address.
            while n < max && unsafe { *(p as *const u8).add(n) } != 0 {
                n += 1;
            }
            n
        }
        _ => len.min(ADDR_MAX),
    };
    if n == 0 {
        return None;
    }
    let n = if len > 0 && format != FI_ADDR_STR {
        n.min(len)
    } else {
        n
    };
    // SAFETY: n bytes of the address are readable (its format's size, or the given length).
    Some(unsafe { core::slice::from_raw_parts(p as *const u8, n) }.to_vec())
}

/// The hash both ends compute of an address: FNV-1a of its identifying bytes.
pub fn addr_hash(format: u32, bytes: &[u8]) -> u64 {
    fnv1a64(&canon(format, bytes).0)
}

/// An address of this process (an endpoint's own name) joins its identity.
pub fn note_own_addr(format: u32, bytes: &[u8]) {
    crate::runtime::registry::add_own_addr(addr_hash(format, bytes));
}

/// The body of the getname wrappers (endpoints and passive endpoints): the provider's getname,
/// then the address it wrote joins this process's own addresses.
///
/// # Safety
/// The contract of `fi_getname`; `getname` is the provider's function for `fid`.
pub unsafe fn getname(
    getname: unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int,
    fid: *mut Fid,
    addr: *mut c_void,
    addrlen: *mut usize,
    format: u32,
) -> c_int {
    crate::interpose::hook::after(
        None,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { getname(fid, addr, addrlen) },
        |r| {
            if r == 0 && !addr.is_null() && !addrlen.is_null() {
                // SAFETY: on success the provider wrote *addrlen bytes (at most the buffer's
                // size, which the program passed in *addrlen) at addr.
                let b = unsafe {
                    core::slice::from_raw_parts(addr as *const u8, (*addrlen).min(ADDR_MAX))
                };
                note_own_addr(format, b);
            }
        },
    )
}

pub fn peer_of(format: u32, bytes: &[u8]) -> Peer {
    let (key, text) = canon(format, bytes);
    Peer {
        addr_hash: fnv1a64(&key),
        text,
        ..Default::default()
    }
}

/// # Safety
/// `info` is NULL or a valid fi_info.
pub unsafe fn addr_info(info: *const FiInfo, fallback: Option<&AddrInfo>) -> AddrInfo {
    let mut a = fallback.cloned().unwrap_or_default();
    if info.is_null() {
        return a;
    }
    // SAFETY: a valid fi_info (caller) whose fabric_attr and prov_name are NULL or valid.
    unsafe {
        let i = &*info;
        if i.addr_format != 0 {
            a.addr_format = i.addr_format;
        }
        let len = if i.src_addrlen != 0 {
            i.src_addrlen
        } else {
            i.dest_addrlen
        };
        if len != 0 {
            a.addrlen = len;
        }
        if !i.fabric_attr.is_null() && !(*i.fabric_attr).prov_name.is_null() {
            a.prov = core::ffi::CStr::from_ptr((*i.fabric_attr).prov_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    a
}
