#!/usr/bin/env python3
"""Instructions per call of the preload's hooks under callgrind: deterministic, unlike time on a
shared machine, and independent of what the real library does (only the hook function's own
instructions are counted, with whatever the compiler inlined into it: the hook idiom, the thread
state, the recording step).

    python3 benches/hook_ir.py PATTERN[,PATTERN...] -- COMMAND [ARGS...]

Runs COMMAND under `valgrind --tool=callgrind --separate-threads=yes` (the environment as given:
set LD_PRELOAD, SIGMATOP_MODE, ... yourself), then reads the output of the program's main thread
(thread 1) and prints the preload's own instructions in all, and for each function whose
demangled name contains one of the PATTERNs (a Rust function of sigmatop_preload; the
library file may have any name): its self instructions, the calls made to it, and instructions per call.
Module paths are left out of the match on purpose: `post_send_hook` finds the verbs wrapper
wherever its file sits, so two builds of a moved tree compare by function.
"""
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict


def parse(path):
    """Self instructions and calls received, by (object, function): a hook and the real function
    it wraps share a name (`ucp_tag_send_nbx`), and only their objects tell them apart."""
    tables = {"fn": {}, "ob": {}, "fl": {}}
    kind_of = {"fn": "fn", "cfn": "fn", "ob": "ob", "cob": "ob"}
    selfir, calls = defaultdict(int), defaultdict(int)
    cur_ob = cur_fn = None
    call_ob = call_fn = None
    after_calls = False

    def name(kind, val):
        m = re.match(r"\((\d+)\)(?: (.*))?", val)
        if not m:
            return val
        table = tables[kind_of.get(kind, "fl")]
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), val)

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            k, _, v = line.partition("=")
            if k == "ob":
                cur_ob = name("ob", v)
            elif k == "fn":
                cur_fn = name("fn", v)
                call_ob = None
            elif k == "cob":
                call_ob = name("cob", v)
            elif k == "cfn":
                call_fn = name("cfn", v)
            elif k in ("fl", "fi", "fe", "cfi", "cfl"):
                name("fl", v)
            elif k == "calls":
                calls[(call_ob or cur_ob, call_fn)] += int(v.split()[0])
                call_ob = None
                after_calls = True
            elif line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                ir = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
                if after_calls:
                    after_calls = False  # the call's line: the callee's inclusive cost
                else:
                    selfir[(cur_ob, cur_fn)] += ir
    return selfir, calls


def main():
    if "--" not in sys.argv or sys.argv.index("--") != 2:
        sys.exit(__doc__)
    pats = sys.argv[1].split(",")
    cmd = sys.argv[3:]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg")
        r = subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--compress-strings=yes",
             f"--callgrind-out-file={out}"] + cmd,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"hook_ir: {' '.join(cmd)} failed under callgrind ({r.returncode}):\n{r.stderr[-2000:]}")
        main_thread = out + "-01"
        if not os.path.exists(main_thread):
            sys.exit(f"hook_ir: no callgrind output for thread 1 in {tmp}")
        selfir, calls = parse(main_thread)
    # The preload's functions: its Rust ones by name, its exported C entry points (`ucp_*`, ...)
    # by the object they live in (the LD_PRELOAD library, whatever its file is called).
    lib = os.path.realpath(os.environ.get("LD_PRELOAD", "/nonexistent"))
    ours = {
        key
        for key in selfir
        if (key[1] or "").startswith(("sigmatop_preload::", "<sigmatop_preload::"))
        or os.path.realpath(key[0] or "/nonexistent") == lib
    }
    preload = sum(selfir[key] for key in ours)
    print(f"preload total (thread 1): {preload} instructions")
    for key in sorted(ours, key=lambda k: k[1] or ""):
        fn = key[1] or ""
        short = re.sub(r"sigmatop_preload::(?:runtime::|interpose::(?:libc::)?|layers::(?:gpu::)?)?", "", fn)
        short = re.sub(r"::h[0-9a-f]{16}$", "", short)
        if any(p in short for p in pats) and calls.get(key):
            n = calls[key]
            print(f"{short}: self {selfir[key]} instructions, {n} calls, {selfir[key] / n:.2f} per call")


main()
