//! Perfetto trace writer (protobuf `Trace`, streamed as `TracePacket`s), a `Sink` of the
//! correlator. Field numbers: reference/hardware-and-hooks.md §7 and Perfetto's protos.
//!
//! Layout of the trace:
//! - one packet sequence (`trusted_packet_sequence_id` 1); its first packet clears incremental
//!   state, sets the default timestamp clock to the incremental clock `CLOCK_DELTA` (id 64,
//!   sequence-scoped) and interns every event name, category, annotation name and peer label; a
//!   ClockSnapshot pairs CLOCK_BOOTTIME with CLOCK_REALTIME and makes REALTIME the trace clock,
//!   so timestamps from all hosts share it;
//! - operation instants carry the ns since the operation instant before them (1–3 bytes instead
//!   of 9), on `CLOCK_DELTA`, which a second ClockSnapshot starts at the first instant's
//!   REALTIME (`is_incremental`: Perfetto adds each timestamp to the clock's last value); every
//!   other timed packet (counters, slices, flow-end markers) names CLOCK_REALTIME itself. Until
//!   2026-12-07 every packet carried its REALTIME ns (the trace was 14 % larger); both read the
//!   same in Perfetto (`tests/tools/check_perfetto.py --dump` resolves the clocks);
//! - tracks: one process track per traced process (named "exe pid@host", pids made unique over
//!   hosts), a thread track per thread file under it, a custom track per endpoint / QP (under its
//!   GPU's track when the endpoint names a GPU, else under the process), a "phases" track per
//!   process, counter tracks for payload bytes/s per endpoint, per GPU (under its GPU track) and
//!   egress bytes/s per node;
//! - an instant (category "op") per recorded operation on its endpoint's track, with debug
//!   annotations (bytes or count, tag / raddr / fi_addr, AM id, tid, peer, flags);
//! - a doorbell instant (`mlx5.doorbell`) carries its QP number, producer index, the recomputed
//!   range `[prev_pi, end_pi)`, WQEBBs, and a summary of the WQEs it covered (count, bytes,
//!   opcodes, first raddr/rkey); each recovered WQE instant on the same QP track carries the
//!   doorbell's index (`doorbell_pi`) and its position (`wqe_index`); one-sided operations carry
//!   their `rkey` (low 16 bits) and, when the memory region was found, the `target` process;
//! - flows from each send to its receive (`flow_ids` on the send, `terminating_flow_ids` on the
//!   receiving side), id = 1 + the send's position in the merged stream;
//! - slices: bursts of activity per thread ("busy") and per process ("phase"), and the calls
//!   that blocked (`Op::blocks`) on a "blocking calls" track under their thread;
//! - NCCL (`set_nccl`): per rank each call as a slice on its communicator's track, its proxy
//!   operations and steps on tracks under it, and a flow from each call to every verbs work
//!   request joined to it (module `nccl`).
//!
//! Packets are written in timestamp order through a bounded reorder window (events wait there
//! until their flow and phase boundaries are known), so memory does not grow with the trace.
//!
//! Modules:
//! - `sink`: the [`PerfettoSink`] (the correlator's calls in, packets out) and its stats;
//! - `fields`: protobuf field numbers, clock ids and the interned ids of names;
//! - `header`: the first packets: interned names and the clock snapshot;
//! - `tracks`: track uuids and descriptors (processes, threads, endpoints, GPUs);
//! - `counters`: the counter samples computed from the recorded snapshots;
//! - `item`: what is kept of one operation while it can still change;
//! - `window`: the bounded reorder window that releases packets in timestamp order;
//! - `mem`: the window's chunks, in huge pages where the kernel gives them;
//! - `encode`: the encoders of operation instants (the fast plain one and the general one);
//! - `late`: packets outside the event stream (counters, slices, flow ends), by time;
//! - `nccl`: NCCL calls, proxy operations and steps as slices, and their flows;
//! - `stage`: the staged output and the fixed-size byte cursor the encoders write through.

mod counters;
mod encode;
mod fields;
mod header;
mod item;
mod late;
mod mem;
mod nccl;
mod sink;
mod stage;
mod tracks;
mod window;

pub use sink::{PerfettoSink, PerfettoStats};
pub use window::{WINDOW_EVENTS, WINDOW_NS};

#[cfg(test)]
mod tests;
