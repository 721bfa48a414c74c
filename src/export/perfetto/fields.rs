//! Protobuf field numbers of the messages written (TracePacket, TrackEvent, DebugAnnotation), the
//! clock ids, and the interned ids of categories, event names and annotation names.

use crate::event::Op;

/// The trace's one packet sequence (`trusted_packet_sequence_id`).
pub(super) const SEQ: u64 = 1;
// TracePacket fields.
pub(super) const P_TIMESTAMP: u32 = 8;
pub(super) const P_SEQ_ID: u32 = 10;
pub(super) const P_TRACK_EVENT: u32 = 11;
pub(super) const P_INTERNED: u32 = 12;
pub(super) const P_SEQ_FLAGS: u32 = 13;
pub(super) const P_CLOCK_SNAPSHOT: u32 = 6;
pub(super) const P_TRACK_DESC: u32 = 60;
pub(super) const P_DEFAULTS: u32 = 59;
/// TracePacket.timestamp_clock_id (also TracePacketDefaults.timestamp_clock_id).
pub(super) const P_TS_CLOCK: u32 = 58;
pub(super) const P_FIRST_ON_SEQ: u32 = 87;
pub(super) const SEQ_CLEARED: u64 = 1;
pub(super) const SEQ_NEEDS: u64 = 2;
// TrackEvent fields.
pub(super) const TE_TYPE: u32 = 9;
pub(super) const TE_TRACK: u32 = 11;
pub(super) const TE_NAME_IID: u32 = 10;
pub(super) const TE_CATEGORY_IIDS: u32 = 3;
pub(super) const TE_COUNTER: u32 = 30;
pub(super) const TE_FLOW: u32 = 47;
pub(super) const TE_TERM_FLOW: u32 = 48;
pub(super) const TE_ANNOT: u32 = 4;
pub(super) const TE_NAME: u32 = 23;
pub(super) const TYPE_BEGIN: u64 = 1;
pub(super) const TYPE_END: u64 = 2;
pub(super) const TYPE_INSTANT: u64 = 3;
pub(super) const TYPE_COUNTER: u64 = 4;
// DebugAnnotation fields.
pub(super) const DA_NAME_IID: u32 = 1;
pub(super) const DA_UINT: u32 = 3;
pub(super) const DA_STRING: u32 = 6;
pub(super) const DA_STRING_IID: u32 = 17;
// Clocks.
pub(super) const CLOCK_REALTIME: u64 = 1;
pub(super) const CLOCK_BOOTTIME: u64 = 6;
/// The clock of operation instants: sequence-scoped (ids 64–127) and incremental, each
/// timestamp the ns since the previous operation instant, in ns of CLOCK_REALTIME from its
/// ClockSnapshot on (`window::write_delta_clock`).
pub(super) const CLOCK_DELTA: u64 = 64;

// Interned iids.
pub(super) const CAT_OP: u64 = 1;
pub(super) const CAT_PHASE: u64 = 2;
pub(super) const CAT_FLOW: u64 = 3;
pub(super) const CAT_NCCL: u64 = 4;
pub(super) const NAME_PHASE: u64 = 100;
pub(super) const NAME_BUSY: u64 = 101;
pub(super) const NAME_FLOW_END: u64 = 102;
pub(super) const NAME_UNKNOWN_OP: u64 = 103;
pub(super) const AN_BYTES: u64 = 1;
pub(super) const AN_COUNT: u64 = 2;
pub(super) const AN_TAG: u64 = 3;
pub(super) const AN_RADDR: u64 = 4;
pub(super) const AN_FI_ADDR: u64 = 5;
pub(super) const AN_AM_ID: u64 = 6;
pub(super) const AN_TID: u64 = 7;
pub(super) const AN_PEER: u64 = 8;
pub(super) const AN_FLAGS: u64 = 9;
pub(super) const AN_QPN: u64 = 10;
pub(super) const AN_PI: u64 = 11;
pub(super) const AN_PREV_PI: u64 = 12;
pub(super) const AN_END_PI: u64 = 13;
pub(super) const AN_WQEBBS: u64 = 14;
pub(super) const AN_WQES: u64 = 15;
pub(super) const AN_WQE_BYTES: u64 = 16;
pub(super) const AN_OPCODES: u64 = 17;
pub(super) const AN_RKEY: u64 = 18;
pub(super) const AN_DB_PI: u64 = 19;
pub(super) const AN_WQE_INDEX: u64 = 20;
pub(super) const AN_PI_MISMATCH: u64 = 21;
pub(super) const AN_TARGET: u64 = 22;
pub(super) const AN_BLOCKED_NS: u64 = 23;
pub(super) const AN_SEQ: u64 = 24;
pub(super) const AN_ALGO: u64 = 25;
pub(super) const AN_PROTO: u64 = 26;
pub(super) const AN_CHANNELS: u64 = 27;
pub(super) const AN_WRS: u64 = 28;
pub(super) const AN_WR_BYTES: u64 = 29;
pub(super) const AN_COMM: u64 = 30;
pub(super) const AN_COMPLETED: u64 = 31;
pub(super) const AN_CHANNEL: u64 = 32;
pub(super) const AN_STEPS: u64 = 33;
pub(super) const AN_STEP: u64 = 34;
pub(super) const AN_SIDE: u64 = 35;
pub(super) const AN_GPU_START: u64 = 36;
pub(super) const AN_GPU_NS: u64 = 37;
pub(super) const ANNOTATION_NAMES: [(u64, &str); 37] = [
    (AN_BYTES, "bytes"),
    (AN_COUNT, "count"),
    (AN_TAG, "tag"),
    (AN_RADDR, "raddr"),
    (AN_FI_ADDR, "fi_addr"),
    (AN_AM_ID, "am_id"),
    (AN_TID, "tid"),
    (AN_PEER, "peer"),
    (AN_FLAGS, "flags"),
    (AN_QPN, "qpn"),
    (AN_PI, "pi"),
    (AN_PREV_PI, "prev_pi"),
    (AN_END_PI, "end_pi"),
    (AN_WQEBBS, "wqebbs"),
    (AN_WQES, "wqes"),
    (AN_WQE_BYTES, "wqe_bytes"),
    (AN_OPCODES, "opcodes"),
    (AN_RKEY, "rkey"),
    (AN_DB_PI, "doorbell_pi"),
    (AN_WQE_INDEX, "wqe_index"),
    (AN_PI_MISMATCH, "pi_mismatch"),
    (AN_TARGET, "target"),
    (AN_BLOCKED_NS, "blocked_ns"),
    (AN_SEQ, "seq"),
    (AN_ALGO, "algo"),
    (AN_PROTO, "proto"),
    (AN_CHANNELS, "channels"),
    (AN_WRS, "work_requests"),
    (AN_WR_BYTES, "work_request_bytes"),
    (AN_COMM, "comm"),
    (AN_COMPLETED, "completed"),
    (AN_CHANNEL, "channel"),
    (AN_STEPS, "steps"),
    (AN_STEP, "step"),
    (AN_SIDE, "side"),
    (AN_GPU_START, "gpu_start_ns"),
    (AN_GPU_NS, "gpu_ns"),
];

/// The interned event name of an op code (`NAME_UNKNOWN_OP` for codes `Op` does not know).
pub(super) fn op_name_iid(op: u8) -> u64 {
    if Op::from_u8(op).is_some() {
        1 + op as u64
    } else {
        NAME_UNKNOWN_OP
    }
}

/// An op's event name, e.g. "ucx.tag_send".
pub(super) fn op_name(op: Op) -> String {
    format!("{}.{}", op.layer().name(), op.name())
}
