#!/usr/bin/env python3
"""Checks one run of tests/gpu/nccl_device.sh's `hang` mode (issue 36 item 6):

    python3 tests/gpu/hang_check.py RUNDIR

RUNDIR holds sigmatop.err (`sigmatop run --headless --hang-after 2s`'s stderr, each line stamped
with its epoch seconds), err.N / out.N (each rank's stderr and stdout: rank 1's has the software
NIC's `testnic: pid P stall: ... t=MONO` and `stall lifted: ... t=MONO` lines, CLOCK_MONOTONIC
seconds), and rc (sigmatop's exit status). It passes when:
- the NIC held rank 1's sends, and lifted the hold;
- sigmatop's first warning that rank 1's edge waits on the network (`r1→rK chC waits on the
  network (QP 0x..: N WRs, none completed ...)`, the hung call located) came after the NIC's stall
  line and within the threshold (2 s) plus a second of it, and says its call had been open at
  least the threshold (`in it 2.8s`). Usually the call starts at the stall and the warning comes
  2-3 s after it; a call that was already slow before the stall (seen on the H100: every rank
  silent 1.6-2.1 s just before it) is named as soon as its edge waits on the network;
- a line said it moved again after the lift (`✓`);
- the job completed (rc 0) and nccl-tests' check passed: under MPI only rank 0 prints its
  summary, whose `Out of bounds values : 0 OK` counts the wrong values of every rank (nccl-tests
  reduces them over the ranks), so rank 0's output has that line and no output says FAILED.
RUNDIR/clock_offset, when there (nccl_device.sh writes it), is the epoch minus CLOCK_MONOTONIC of
the machine that ran the job, so the check can be run again elsewhere; without it, this machine's.
Prints what it found; exit status 1 when something does not hold.
"""
import glob
import os
import re
import sys
import time

HANG_S = 2.0


def main(d):
    # CLOCK_MONOTONIC → epoch on this machine (the NIC stamps its lines with the first).
    try:
        offset = float(open(os.path.join(d, "clock_offset")).read())
    except (OSError, ValueError):
        offset = time.time() - time.monotonic()
    ok = True
    stall = lift = None
    for f in sorted(glob.glob(os.path.join(d, "err.*"))):
        for line in open(f, errors="replace"):
            m = re.search(r"testnic: pid \d+ stall: .* t=([0-9.]+)", line)
            if m and stall is None:
                stall = float(m.group(1)) + offset
                print(f"  stall: {line.strip()}")
            m = re.search(r"testnic: pid \d+ stall lifted: .* t=([0-9.]+)", line)
            if m and lift is None:
                lift = float(m.group(1)) + offset
                print(f"  lift:  {line.strip()}")
    if stall is None or lift is None:
        print("FAIL: the NIC did not hold rank 1's sends (or did not lift): no stall/lift line")
        return 1
    lines = []
    for line in open(os.path.join(d, "sigmatop.err"), errors="replace"):
        stamp, _, text = line.partition(" ")
        try:
            lines.append((float(stamp), text.rstrip("\n")))
        except ValueError:
            continue
    net = [(t, x) for t, x in lines if "⚠" in x and re.search(r"r1→r\d+ ch\d+ waits on the network \(QP 0x", x)]
    edge = [(t, x) for t, x in lines if "⚠ stalled QP" in x and " r1 pid " in x]
    cleared = [(t, x) for t, x in lines if "✓" in x and t >= lift]
    for name, found in (("located hang", net), ("stalled edge", edge)):
        if found:
            t, x = found[0]
            print(f"  first {name}: {t - stall:.2f} s after the stall: {x[:240]}")
        else:
            print(f"  no {name} line")
    if not net:
        ok = False
        print("FAIL: no warning located the hang on rank 1's edge, on the network")
    else:
        after = net[0][0] - stall
        m = re.search(r"in it ([0-9.]+)s", net[0][1])
        open_s = float(m.group(1)) if m else 0.0
        if not (0.0 < after <= HANG_S + 1.0):
            ok = False
            print(f"FAIL: located {after:.2f} s after the stall: not within (0, {HANG_S + 1}] s")
        if open_s < HANG_S:
            ok = False
            print(f"FAIL: the located call had been open {open_s:.1f} s, under the threshold {HANG_S} s")
        elif after < HANG_S:
            print(f"  located {after:.2f} s after the stall: its call had been open {open_s:.1f} s "
                  f"(slow before the stall)")
    if not cleared:
        ok = False
        print("FAIL: nothing said it moved again after the lift")
    else:
        print(f"  cleared {cleared[0][0] - lift:.2f} s after the lift: {cleared[0][1][:200]}")
    rc = open(os.path.join(d, "rc")).read().strip()
    if rc != "0":
        ok = False
        print(f"FAIL: sigmatop run exited {rc}")
    outs = {os.path.basename(f): open(f, errors="replace").read()
            for f in sorted(glob.glob(os.path.join(d, "out.*")))}
    failed = [f for f, t in outs.items() if "FAILED" in t]
    if len(outs) != 4 or "Out of bounds values : 0 OK" not in outs.get("out.0", "") or failed:
        ok = False
        print(f"FAIL: nccl-tests' check: {len(outs)} rank outputs (want 4), rank 0's summary "
              f"{'says' if 'Out of bounds values : 0 OK' in outs.get('out.0', '') else 'lacks'} "
              f"'Out of bounds values : 0 OK', FAILED in {failed or 'none'}")
    else:
        print("  nccl-tests' check passed (rank 0's summary, over all 4 ranks)")
    print(("PASS" if ok else "FAIL") + f": {os.path.basename(d)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
