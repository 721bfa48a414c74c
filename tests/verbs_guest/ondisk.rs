//! A reader of sigmatop's thread event files (`thread-<tid>.ste`) written here from
//! docs/FORMAT.md, independent of sigmatop's own reader and decoder (src/trace): the event
//! counts this test expects of the record, the export and the Perfetto trace come from a second
//! reading of the bytes on disk, not from the code under test.

use std::path::Path;

/// One event as the format describes it.
#[derive(Clone, Copy, Debug)]
pub struct Ev {
    pub op: u8,
    pub ep: u64,
    pub bytes: u64,
    pub flags: u8,
    pub addr: u64,
}

/// CRC-32 (IEEE, reflected, polynomial 0xEDB88320), bit by bit.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// LEB128 varint at `*i`.
fn varint(b: &[u8], i: &mut usize, what: &str) -> u64 {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let x = *b
            .get(*i)
            .unwrap_or_else(|| panic!("{what}: varint cut at byte {i}"));
        *i += 1;
        v |= ((x & 0x7f) as u64) << shift;
        if x < 0x80 {
            return v;
        }
        shift += 7;
        assert!(shift < 64, "{what}: varint too long at byte {i}");
    }
}

/// Every event of one thread file; panics on anything the format does not allow (a test
/// file of a clean run must read whole).
pub fn thread_file(path: &Path) -> Vec<Ev> {
    let what = path.display().to_string();
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(b.len() >= 16 && &b[..8] == b"SIGMATOP", "{what}: no header");
    assert_eq!(
        u16::from_le_bytes([b[8], b[9]]),
        2,
        "{what}: format version"
    );
    assert_eq!(b[12], 2, "{what}: not a thread event file");
    let mut out = Vec::new();
    let mut at = 16;
    while at < b.len() {
        assert!(at + 12 <= b.len(), "{what}: chunk header cut at byte {at}");
        assert_eq!(&b[at..at + 4], b"STCK", "{what}: chunk magic at byte {at}");
        let len = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap());
        let payload = b
            .get(at + 12..at + 12 + len)
            .unwrap_or_else(|| panic!("{what}: chunk at byte {at} cut"));
        assert_eq!(crc32(payload), crc, "{what}: chunk at byte {at}: checksum");
        block(payload, &what, &mut out);
        at += 12 + len;
    }
    out
}

/// One block: varint base time, varint count, then the events, each compressed against
/// the previous event of its op (endpoint, bytes, address, aux).
fn block(p: &[u8], what: &str, out: &mut Vec<Ev>) {
    let mut i = 0;
    let _base_tsc = varint(p, &mut i, what);
    let n = varint(p, &mut i, what);
    // (ep, bytes, addr, aux) of the previous event, per op code.
    let mut prev = [(0u64, 0u64, 0u64, 0u64); 256];
    for _ in 0..n {
        let h = p[i];
        i += 1;
        let mut op = h & 0x3f;
        let _dtsc = varint(p, &mut i, what);
        let mut x = 0u8;
        if h & 0x40 != 0 {
            x = p[i];
            i += 1;
            if x & 0x40 != 0 {
                op = p[i];
                i += 1;
            }
        }
        let pv = &mut prev[op as usize];
        if h & 0x80 == 0 {
            pv.0 = varint(p, &mut i, what);
            pv.1 = varint(p, &mut i, what);
        }
        if x & 0x10 != 0 {
            let z = varint(p, &mut i, what);
            let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
            pv.2 = pv.2.wrapping_add(d as u64);
        }
        if x & 0x20 != 0 {
            pv.3 = varint(p, &mut i, what);
        }
        out.push(Ev {
            op,
            ep: pv.0,
            bytes: pv.1,
            flags: x & 0x0f,
            addr: pv.2,
        });
    }
    assert_eq!(i, p.len(), "{what}: bytes left after a block of {n} events");
}

/// The events of every thread of one process's record directory.
pub fn process(dir: &Path) -> Vec<Ev> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("thread-") && name.ends_with(".ste") {
            out.extend(thread_file(&e.path()));
        }
    }
    out
}
