//! The record directory: `DIR/<host>/<pid>/process.stp` (identity, endpoints, clocks, snapshots)
//! and `DIR/<host>/<pid>/thread-<tid>.ste` (events), both made of CRC-checked chunks so that a
//! recording cut by SIGKILL reads back up to its last flushed chunk. Format: docs/FORMAT.md.

pub mod codec;
pub mod reader;
pub mod runs;
pub mod writer;

use serde::{Deserialize, Serialize};

use crate::event::{
    ClockSample, DropCounters, EndpointDef, EndpointUpdate, Identity, MemRegion, Snapshot,
};

/// First 8 bytes of every record file.
pub const FILE_MAGIC: [u8; 8] = *b"SIGMATOP";
/// Version of the file layout (header + chunk framing); the payload schema has its own version.
/// 2: event blocks keep their "previous" values per op code (docs/FORMAT.md).
pub const FORMAT_VERSION: u16 = 2;
/// Marks the start of every chunk ("STCK" little-endian).
pub const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"STCK");
/// Header: magic(8) format_version(2) schema_version(2) kind(1) reserved(3).
pub const FILE_HEADER_LEN: usize = 16;
/// Chunk header: magic(4) payload_len(4) crc32(4).
pub const CHUNK_HEADER_LEN: usize = 12;
/// No chunk is larger than this; a bigger length means corruption.
pub const MAX_CHUNK: usize = 64 << 20;

pub const PROCESS_FILE: &str = "process.stp";

/// Kind byte of a record file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FileKind {
    Process = 1,
    Thread = 2,
}

/// Name of the event file of thread `tid`.
pub fn thread_file_name(tid: u32) -> String {
    format!("thread-{tid}.ste")
}

/// One chunk of the process file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ProcessRecord {
    Identity(Identity),
    Endpoint(EndpointDef),
    EndpointUpdate(EndpointUpdate),
    Clock(ClockSample),
    Snapshot(Snapshot),
    ThreadStart {
        tid: u32,
        name: String,
    },
    /// A thread's event file is complete: `events` were written to it, none after.
    ThreadEnd {
        tid: u32,
        events: u64,
    },
    /// Written last on a clean shutdown. Its absence marks the record as cut.
    End {
        at_ns: u64,
        drops: DropCounters,
    },
    /// A memory region registered or deregistered (appended: older readers stop here with a
    /// clear error, older records simply have none).
    MemRegion(MemRegion),
    /// Outstanding work per verbs QP and SRQ at one interval (appended, as `MemRegion`).
    Queues(crate::queue::Queues),
}

/// `ProcessRecord` as schema version 1 wrote it (its snapshots had fewer counters): the same
/// variants in the same order.
#[derive(Deserialize)]
enum ProcessRecordV1 {
    Identity(Identity),
    Endpoint(EndpointDef),
    EndpointUpdate(EndpointUpdate),
    Clock(ClockSample),
    Snapshot(crate::event::v1::Snapshot),
    ThreadStart { tid: u32, name: String },
    ThreadEnd { tid: u32, events: u64 },
    End { at_ns: u64, drops: DropCounters },
    MemRegion(MemRegion),
}

impl From<ProcessRecordV1> for ProcessRecord {
    fn from(r: ProcessRecordV1) -> ProcessRecord {
        match r {
            ProcessRecordV1::Identity(i) => ProcessRecord::Identity(i),
            ProcessRecordV1::Endpoint(d) => ProcessRecord::Endpoint(d),
            ProcessRecordV1::EndpointUpdate(u) => ProcessRecord::EndpointUpdate(u),
            ProcessRecordV1::Clock(c) => ProcessRecord::Clock(c),
            ProcessRecordV1::Snapshot(s) => ProcessRecord::Snapshot(s.into()),
            ProcessRecordV1::ThreadStart { tid, name } => ProcessRecord::ThreadStart { tid, name },
            ProcessRecordV1::ThreadEnd { tid, events } => ProcessRecord::ThreadEnd { tid, events },
            ProcessRecordV1::End { at_ns, drops } => ProcessRecord::End { at_ns, drops },
            ProcessRecordV1::MemRegion(m) => ProcessRecord::MemRegion(m),
        }
    }
}

/// Decodes one process-file chunk written with schema version `schema`.
pub fn decode_record(schema: u16, payload: &[u8]) -> Result<ProcessRecord, postcard::Error> {
    if schema == 1 {
        postcard::from_bytes::<ProcessRecordV1>(payload).map(Into::into)
    } else {
        postcard::from_bytes::<ProcessRecord>(payload)
    }
}

/// Builds a file header.
pub fn file_header(kind: FileKind) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&FILE_MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&crate::event::SCHEMA_VERSION.to_le_bytes());
    h[12] = kind as u8;
    h
}

/// Frames a payload as a chunk.
pub fn frame_chunk(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&CHUNK_MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}
