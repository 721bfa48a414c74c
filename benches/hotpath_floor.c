// The floor under issue 15's "aggregate <= 3 ns per call": reference interposers in C, each one
// feature more than the last, to be run by benches/hotpath.c in place of sigmatop's preload (they
// export the same sigmatop_bench_* entry points). Built four times by benches/hotpath_floor.sh:
//   FLOOR_LEVEL=0  call through, then the endpoint lookup (the same Fibonacci hash and one probe)
//                  and two counter updates in one static array: the least any tool that counts
//                  per endpoint after the call can do (no thread safety at all)
//   FLOOR_LEVEL=1  + the run-time layer check (one global load and test before anything)
//   FLOOR_LEVEL=2  + per-thread state through initial-exec TLS and the re-entrancy guard
//   FLOOR_LEVEL=3  + per-thread counters in lazily mapped chunks of 16 endpoints, and the
//                  endpoint's range check: the feature set of sigmatop's aggregate hook
// Not a tracer: the counters are never read, and below level 2 they are shared by all threads.
#include <stddef.h>
#include <stdint.h>

typedef long (*fake_fn)(void *, size_t);

#ifndef FLOOR_LEVEL
#define FLOOR_LEVEL 0
#endif

enum { MAP_SLOTS = 1 << 15, MAX_EPS = 1 << 14, EPS_PER_CHUNK = 16, SLOT_WORDS = 24, OPS = 16 };

struct thread_state {
    uint32_t depth;
    uint64_t *chunks[MAX_EPS / EPS_PER_CHUNK];
};

static __thread struct thread_state *current __attribute__((tls_model("initial-exec")));
static struct thread_state the_thread;
static uint64_t counters[EPS_PER_CHUNK * OPS * SLOT_WORDS];
static uintptr_t map_keys[MAP_SLOTS];
static uint32_t map_ids[MAP_SLOTS];
static uint32_t layers = 1;

static inline uint32_t slot_of(const void *handle) {
    return (uint32_t)((((uintptr_t)handle >> 3) * 0x9e3779b97f4a7c15ull) >> 49);
}

long sigmatop_bench_hook(fake_fn real, void *arg, size_t bytes) {
#if FLOOR_LEVEL >= 1
    if (!(__atomic_load_n(&layers, __ATOMIC_RELAXED) & 1)) return real(arg, bytes);
#endif
#if FLOOR_LEVEL >= 2
    struct thread_state *t = current;
    if (__builtin_expect(t == NULL, 0)) {
        t = &the_thread;
        t->chunks[0] = counters;
        current = t;
    }
    if (t->depth) return real(arg, bytes);
    t->depth = 1;
#endif
    long r = real(arg, bytes);
    uint32_t h = slot_of(arg);
    uint32_t id = map_keys[h] == (uintptr_t)arg ? map_ids[h] : 0;
#if FLOOR_LEVEL >= 3
    if (id >= MAX_EPS) id = 0;
    uint64_t *chunk = t->chunks[id / EPS_PER_CHUNK];
    if (chunk) {
        uint64_t *slot = chunk + ((id % EPS_PER_CHUNK) * OPS + 1) * SLOT_WORDS;
        slot[0]++;
        slot[1] += bytes;
    }
#else
    counters[(id % EPS_PER_CHUNK) * OPS * SLOT_WORDS + SLOT_WORDS]++;
    counters[(id % EPS_PER_CHUNK) * OPS * SLOT_WORDS + SLOT_WORDS + 1] += bytes;
#endif
#if FLOOR_LEVEL >= 2
    t->depth = 0;
#endif
    return r;
}

void sigmatop_bench_setup(void *handle) {
    uint32_t h = slot_of(handle);
    map_keys[h] = (uintptr_t)handle;
    map_ids[h] = 1;
}

uint32_t sigmatop_bench_clock_is_tsc(void) { return 1; }

uint64_t sigmatop_bench_pending(void) { return 0; }
