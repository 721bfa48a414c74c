#!/usr/bin/env python3
"""Validates a Perfetto trace written by `sigmatop export --perfetto` against the official schema
(the PyPI `perfetto` package's perfetto_trace_pb2, parsed with `protobuf`) and the rules the
exporter promises:

- the file parses as perfetto.protos.Trace and no message anywhere holds unknown fields;
- every track uuid (and parent uuid) is defined by a TrackDescriptor before any packet uses it;
- every interned id used (event names, categories, annotation names, annotation strings) is
  defined on the sequence before use, and the first packet clears incremental state;
- SLICE_BEGIN / SLICE_END balance per track, in timestamp order;
- every flow id has exactly one source (flow_ids) and one end (terminating_flow_ids), the end no
  earlier than the source;
- timestamps never go backwards in file order;
- timestamps are read as Perfetto's trace processor reads them: in the packet's clock
  (`timestamp_clock_id`, else the sequence's TracePacketDefaults), converted to the trace clock
  through the ClockSnapshots; a sequence-scoped clock (ids 64-127) marked `is_incremental`
  counts each timestamp from the previous one of that clock (its snapshot gives the start), so
  every clock used must have been defined by a snapshot before, on the same sequence;
- with --ops N: the number of instants of category "op" is N.

Its summary also counts slices per category (`slices_by_category`), slices of category "nccl"
per the first word of their name (`nccl_by_name`), flows per the category of the slice that
starts them (`flows_by_category`), and the tracks per name prefix ("NCCL comm": `nccl_comm_tracks`).

Prints a JSON summary on stdout; exits 1 with the reasons on stderr when a check fails.
With --dump FILE it also writes every TrackEvent as one line, "<timestamp in the trace clock>
<the TrackEvent's bytes, hex>", in file order: two traces whose dumps are equal hold the same
events at the same times however their packets encode the times (used to compare encodings).
Usage: check_perfetto.py TRACE [--ops N] [--dump FILE]
"""
import json
import sys
from collections import defaultdict

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def unknown(msg, path, out):
    if len(unknown_fields.UnknownFieldSet(msg)) > 0:
        out.append(path)
    for fd, val in msg.ListFields():
        if fd.message_type is None:
            continue
        repeated = getattr(fd, "is_repeated", None)
        if repeated is None:
            repeated = fd.label == fd.LABEL_REPEATED
        if repeated:
            for i, v in enumerate(val):
                unknown(v, f"{path}.{fd.name}[{i}]", out)
        else:
            unknown(val, f"{path}.{fd.name}", out)


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    path = args[0]
    want_ops = None
    if "--ops" in args:
        want_ops = int(args[args.index("--ops") + 1])
    dump = None
    if "--dump" in args:
        dump = open(args[args.index("--dump") + 1], "w")
    data = open(path, "rb").read()
    trace = pb.Trace.FromString(data)
    errors = []
    unk = []
    defined = set()
    names, cats, an_names, an_strings = {}, {}, {}, {}
    cleared = set()
    open_slices = defaultdict(list)
    begins = ends = 0
    flow_src = {}
    flow_end = {}
    op_instants = 0
    instants = 0
    counters = 0
    last_ts = None
    per_name = defaultdict(int)
    slices_by_cat = defaultdict(int)
    nccl_by_name = defaultdict(int)
    flows_by_cat = defaultdict(int)
    track_names = {}
    # Clocks: per sequence, the default clock; per (sequence, clock id) of a sequence-scoped
    # clock or (0, clock id) of a global one: [offset to the trace clock, incremental, last].
    default_clock = {}
    clocks = {}
    trace_clock = None

    def clock_key(seq, cid):
        return (seq, cid) if 64 <= cid < 128 else (0, cid)

    for i, p in enumerate(trace.packet):
        unknown(p, f"packet[{i}]", unk)
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & 1:
            cleared.add(seq)
            names, cats, an_names, an_strings = {}, {}, {}, {}
        if p.HasField("interned_data"):
            if seq not in cleared:
                errors.append(f"packet {i}: interned data before incremental state was cleared")
            d = p.interned_data
            for e in d.event_names:
                names[e.iid] = e.name
            for e in d.event_categories:
                cats[e.iid] = e.name
            for e in d.debug_annotation_names:
                an_names[e.iid] = e.name
            for e in d.debug_annotation_string_values:
                an_strings[e.iid] = e.str
        if p.HasField("trace_packet_defaults") and p.trace_packet_defaults.HasField("timestamp_clock_id"):
            default_clock[seq] = p.trace_packet_defaults.timestamp_clock_id
        if p.HasField("clock_snapshot"):
            cs = p.clock_snapshot
            if cs.HasField("primary_trace_clock"):
                trace_clock = cs.primary_trace_clock
            values = {c.clock_id: c.timestamp for c in cs.clocks}
            if trace_clock not in values:
                errors.append(f"packet {i}: clock snapshot without the trace clock {trace_clock}")
            else:
                for c in cs.clocks:
                    if c.is_incremental and not 64 <= c.clock_id < 128:
                        errors.append(f"packet {i}: global clock {c.clock_id} marked incremental")
                    clocks[clock_key(seq, c.clock_id)] = [
                        values[trace_clock] - c.timestamp, c.is_incremental, c.timestamp]
        ts = None
        if p.HasField("timestamp"):
            cid = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else default_clock.get(seq, 0)
            k = clock_key(seq, cid)
            if cid == 0 or cid == trace_clock:
                ts = p.timestamp
            elif k not in clocks:
                errors.append(f"packet {i}: timestamp on clock {cid}, which no snapshot defined")
            else:
                c = clocks[k]
                v = c[2] + p.timestamp if c[1] else p.timestamp
                c[2] = v
                ts = v + c[0]
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            if td.HasField("parent_uuid") and td.parent_uuid not in defined:
                errors.append(f"packet {i}: track {td.uuid} names parent {td.parent_uuid} before it is defined")
            if td.uuid in defined:
                errors.append(f"packet {i}: track {td.uuid} defined twice")
            defined.add(td.uuid)
            track_names[td.uuid] = td.name
        if ts is not None:
            if last_ts is not None and ts < last_ts:
                errors.append(f"packet {i}: timestamp {ts} goes back from {last_ts}")
            last_ts = ts
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        if dump is not None:
            dump.write(f"{ts} {te.SerializeToString(deterministic=True).hex()}\n")
        if not p.HasField("timestamp"):
            errors.append(f"packet {i}: track event without timestamp")
        if p.sequence_flags & 2 == 0:
            errors.append(f"packet {i}: track event without SEQ_NEEDS_INCREMENTAL_STATE")
        if te.track_uuid not in defined:
            errors.append(f"packet {i}: track {te.track_uuid} used before it is defined")
        if te.HasField("name_iid") and te.name_iid not in names:
            errors.append(f"packet {i}: name iid {te.name_iid} not interned")
        for c in te.category_iids:
            if c not in cats:
                errors.append(f"packet {i}: category iid {c} not interned")
        for a in te.debug_annotations:
            if a.HasField("name_iid") and a.name_iid not in an_names:
                errors.append(f"packet {i}: annotation name iid {a.name_iid} not interned")
            if a.HasField("string_value_iid") and a.string_value_iid not in an_strings:
                errors.append(f"packet {i}: annotation string iid {a.string_value_iid} not interned")
        t = te.type
        cat = [cats.get(c) for c in te.category_iids]
        if t == pb.TrackEvent.TYPE_SLICE_BEGIN:
            open_slices[te.track_uuid].append(ts)
            begins += 1
            for c in cat:
                slices_by_cat[c] += 1
            if "nccl" in cat:
                nccl_by_name[(te.name or "?").split(" ")[0]] += 1
            for c in cat:
                flows_by_cat[c] += len(te.flow_ids)
        elif t == pb.TrackEvent.TYPE_SLICE_END:
            ends += 1
            st = open_slices[te.track_uuid]
            if not st:
                errors.append(f"packet {i}: SLICE_END on track {te.track_uuid} without an open slice")
            elif st.pop() > ts:
                errors.append(f"packet {i}: slice on track {te.track_uuid} ends before it begins")
        elif t == pb.TrackEvent.TYPE_INSTANT:
            instants += 1
            if "op" in cat:
                op_instants += 1
                per_name[names.get(te.name_iid, "?")] += 1
        elif t == pb.TrackEvent.TYPE_COUNTER:
            counters += 1
        for f in te.flow_ids:
            if f in flow_src:
                errors.append(f"packet {i}: flow {f} has two sources")
            flow_src[f] = ts
        for f in te.terminating_flow_ids:
            if f in flow_end:
                errors.append(f"packet {i}: flow {f} terminated twice")
            flow_end[f] = ts
    if unk:
        errors.append(f"unknown fields in {len(unk)} messages, first: {unk[:5]}")
    for tr, st in open_slices.items():
        if st:
            errors.append(f"track {tr}: {len(st)} slices never end")
    for f, ts in flow_src.items():
        if f not in flow_end:
            errors.append(f"flow {f}: no end")
        elif flow_end[f] < ts:
            errors.append(f"flow {f}: ends at {flow_end[f]} before its source at {ts}")
    for f in flow_end:
        if f not in flow_src:
            errors.append(f"flow {f}: end without a source")
    if want_ops is not None and op_instants != want_ops:
        errors.append(f"{op_instants} operation instants, the record holds {want_ops} events")
    summary = {
        "packets": len(trace.packet),
        "tracks": len(defined),
        "op_instants": op_instants,
        "instants": instants,
        "counters": counters,
        "slices": begins,
        "flows": len(flow_src),
        "slices_by_category": dict(sorted(slices_by_cat.items())),
        "nccl_by_name": dict(sorted(nccl_by_name.items())),
        "flows_by_category": dict(sorted(flows_by_cat.items())),
        "nccl_comm_tracks": sum(1 for n in track_names.values() if n.startswith("NCCL comm")),
        "ops_by_name": dict(sorted(per_name.items())),
        "errors": len(errors),
    }
    print(json.dumps(summary))
    if errors:
        for e in errors[:50]:
            print("check_perfetto: " + e, file=sys.stderr)
        if len(errors) > 50:
            print(f"check_perfetto: ... and {len(errors) - 50} more", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
