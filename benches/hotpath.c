// Hot-path microbenchmark: cost that sigmatop's hook pattern adds to an intercepted call, measured
// through the real shared library (its thread-local model and all), per mode.
// Usage: SIGMATOP_MODE=simple LD_PRELOAD=libsigmatop_preload.so ./hotpath
// (the preload built with `--features bench`, which exports the sigmatop_bench_* entry points)
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef long (*fake_fn)(void *, size_t);
typedef long (*hook_fn)(fake_fn, void *, size_t);

static long sink;
__attribute__((noinline)) static long fake(void *a, size_t n) { sink += n; return 0; }

static double now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void) {
    hook_fn hook = (hook_fn)dlsym(RTLD_DEFAULT, "sigmatop_bench_hook");
    void (*setup)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "sigmatop_bench_setup");
    uint64_t (*pending)(void) = (uint64_t (*)(void))dlsym(RTLD_DEFAULT, "sigmatop_bench_pending");
    if (!hook || !setup || !pending) { fprintf(stderr, "%s\n", "needs LD_PRELOAD=libsigmatop_preload.so built with its bench entry points: cargo build --release -p sigmatop-preload --features bench"); return 2; }
    void *ep = (void *)0x7f0000001000;
    setup(ep);
    fake_fn volatile f = fake;
    const int burst = 4096, reps = 24000;
    double base = 0, traced = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (int i = 0; i < burst; i++) f(ep, 64);
        double t1 = now_ns();
        for (int i = 0; i < burst; i++) hook(f, ep, 64);
        double t2 = now_ns();
        base += t1 - t0; traced += t2 - t1;
        while (pending() > 0) { struct timespec s = {0, 200000}; nanosleep(&s, 0); }
    }
    double n = (double)burst * reps;
    const char *mode = getenv("SIGMATOP_MODE");
    printf("mode=%s calls=%.0f plain=%.2f ns/call hooked=%.2f ns/call added=%.2f ns/call\n",
           mode ? mode : "simple", n, base / n, traced / n, (traced - base) / n);
    return 0;
}
