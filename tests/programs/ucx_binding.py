"""A small UCX binding of sigmatop's tests, over ctypes, and a multiprocessing driver for it
(tests/reliability/ runs it with `python3 -c`).

The library is tests/programs/ucx_life.c built with -DUCX_LIFE_LIBRARY: ucx_life_messages(n,
size) opens a UCP context with two workers and an endpoint, sends n real tagged messages of
`size` bytes from one worker to the other (each received and checked), and closes everything.

run(lib, method, procs): starts `procs` processes with multiprocessing's start method `method`
("fork": the child is a copy of this interpreter; "spawn": fork + exec of a fresh python3).
Process i sends 100*(i+1) messages of 64*(i+1) bytes. The parent never touches UCX. Prints one
line per process ("proc i pid P messages N size S exit 0") and exits non-zero if any failed.
"""

import ctypes
import multiprocessing
import os
import sys


def messages(lib, n, size):
    """n tagged messages of `size` bytes through the library at path `lib`."""
    ucx = ctypes.CDLL(lib)
    ucx.ucx_life_messages.argtypes = [ctypes.c_long, ctypes.c_long]
    ucx.ucx_life_messages.restype = ctypes.c_int
    if ucx.ucx_life_messages(n, size) != 0:
        sys.exit(5)


def work(lib, i, report):
    n, size = 100 * (i + 1), 64 * (i + 1)
    messages(lib, n, size)
    report.put((i, os.getpid(), n, size))


def run(lib, method, procs):
    ctx = multiprocessing.get_context(method)
    report = ctx.Queue()
    ps = [ctx.Process(target=work, args=(lib, i, report)) for i in range(procs)]
    for p in ps:
        p.start()
    done = sorted(report.get(timeout=60) for _ in ps)
    for p in ps:
        p.join(60)
    for (i, pid, n, size), p in zip(done, ps):
        print(f"proc {i} pid {pid} messages {n} size {size} exit {p.exitcode}")
    if any(p.exitcode != 0 for p in ps):
        sys.exit(1)
