#!/usr/bin/env python3
"""Import circles among the modules of one Rust crate (its src/ dir), at two grains.

    modcycles.py CRATE_SRC_DIR

Top grain: a top-level module is src/X.rs or src/X/; a tie is any `crate::X` path from a file of
another top-level module. File grain: every file is a module (mod.rs is its directory); a tie is a
`crate::a::b` or `super::x` path resolved to the longest existing module, ties between a module and
its own ancestors or descendants left out (a parent re-exporting its children is no circle).
Comments and `#[cfg(test)] mod tests` are ignored. Prints every circle; exits 1 if there is one.

The check that keeps the floors one-way (docs/PRELOAD.md): tests/floors.rs runs it on preload/src,
src and tui/src, and fails on any circle."""
import os, re, sys
from collections import defaultdict
src = sys.argv[1]

def modpath(rel):
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)

files = {}
for root, _, fs in os.walk(src):
    for f in fs:
        if f.endswith(".rs"):
            p = os.path.join(root, f)
            t = open(p, errors="replace").read()
            t = re.sub(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{.*", "", t, flags=re.S)
            t = re.sub(r"//[^\n]*", "", t)
            files[modpath(os.path.relpath(p, src))] = t
mods = set(files)

def longest(path):
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return None

def refs(me, text):
    out = set()
    for m in re.finditer(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
        out.add(longest(m.group(1).split("::")))
    for m in re.finditer(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*)\{([^;]*?)\}", text, re.S):
        pre = [x for x in m.group(1).split("::") if x]
        for name in re.findall(r"(?:^|[,{\s])([a-z_][a-z0-9_]*)", m.group(2)):
            out.add(longest(pre + [name]))
    for m in re.finditer(r"\b((?:super::)+)((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)?", text):
        up = m.group(1).count("super::")
        base = list(me[:-up]) if up <= len(me) else []
        rest = (m.group(2) or "").split("::") if m.group(2) else []
        out.add(longest(base + rest) if base + rest else None)
    out.discard(None)
    return out

def related(a, b):
    n = min(len(a), len(b))
    return a[:n] == b[:n]

def circles(edges, nodes):
    idx, low, st, on, res, c = {}, {}, [], set(), [], [0]
    def sc(v):
        idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in edges[v]:
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            g = []
            while True:
                w = st.pop(); on.discard(w); g.append(w)
                if w == v: break
            if len(g) > 1: res.append(sorted(g))
    for v in sorted(nodes):
        if v not in idx: sc(v)
    return res

sys.setrecursionlimit(20000)
top = {m[0] for m in mods if m}
te, fe = defaultdict(set), defaultdict(set)
for me, t in files.items():
    for r in refs(me, t):
        if me and r and r[0] != me[0]:
            te[me[0]].add(r[0])
        if not related(me, r):
            fe[me].add(r)
bad = 0
for g in circles(te, top):
    bad += 1
    ties = [f"{a}->{b}" for a in g for b in sorted(te[a]) if b in g]
    print(f"top-level circle of {len(g)}: {', '.join(g)} ({len(ties)} ties: {' '.join(ties[:10])}{' ...' if len(ties) > 10 else ''})")
for g in circles(fe, mods):
    bad += 1
    names = ["::".join(m) for m in g]
    print(f"file circle of {len(g)}: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}")
n = sum(len(v) for v in fe.values())
print(f"{src}: {len(top)} top-level modules, {len(mods)} files, {n} file ties, {bad} circles")
sys.exit(1 if bad else 0)
