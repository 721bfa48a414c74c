#!/usr/bin/env python3
"""Checks one run of tests/gpu/nccl_device.sh's `hang` mode (issue 36 item 6):

    python3 tests/gpu/hang_check.py RUNDIR

RUNDIR holds sigmatop.err (`sigmatop run --headless --hang-after 2s`'s stderr, each line stamped
with its epoch seconds), err.N / out.N (each rank's stderr and stdout: rank 1's has the software
NIC's `testnic: pid P stall: ... t=MONO` and `stall lifted: ... t=MONO` lines, CLOCK_MONOTONIC
seconds), and rc (sigmatop's exit status). It passes when:
- the NIC held rank 1's sends, and lifted the hold;
- sigmatop's first warning that rank 1's edge waits on the network (`r1→rK chC waits on the
  network (QP 0x..: N WRs, none completed ...)`, the hung call located) came no sooner than the
  threshold (2 s) and within the threshold plus a second of the NIC's stall line;
- a line said it moved again after the lift (`✓`);
- the job completed (rc 0) and nccl-tests' check passed on every rank (`Out of bounds values : 0
  OK`).
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
        if not (HANG_S <= after <= HANG_S + 1.0):
            ok = False
            print(f"FAIL: located {after:.2f} s after the stall: not within [{HANG_S}, {HANG_S + 1}] s")
    if not cleared:
        ok = False
        print("FAIL: nothing said it moved again after the lift")
    else:
        print(f"  cleared {cleared[0][0] - lift:.2f} s after the lift: {cleared[0][1][:200]}")
    rc = open(os.path.join(d, "rc")).read().strip()
    if rc != "0":
        ok = False
        print(f"FAIL: sigmatop run exited {rc}")
    outs = sorted(glob.glob(os.path.join(d, "out.*")))
    checked = [f for f in outs if "Out of bounds values : 0 OK" in open(f, errors="replace").read()]
    if len(outs) != 4 or len(checked) != 4:
        ok = False
        print(f"FAIL: nccl-tests' check passed on {len(checked)} of {len(outs)} ranks (want 4)")
    print(("PASS" if ok else "FAIL") + f": {os.path.basename(d)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
