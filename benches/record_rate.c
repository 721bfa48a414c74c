// Recording at the highest event rate (issue 15, item 5): THREADS threads call sigmatop's hook
// (the same one benches/hotpath.c times) as fast as they can for SECONDS, never waiting for the
// collector, so every call is an event (simple/full mode with SIGMATOP_RECORD) and the collector
// must drain, encode and write them all or count them lost. Prints, for the run: calls made, calls
// per second, the longest 4,096-call burst (an application blocked by the collector would show a
// burst as long as the block), the collector thread's CPU (utime+stime of the thread named
// "sigmatop", from /proc) and the events lost to full rings. benches/record_cost.py runs it and
// reads the record back.
// Build: gcc -O2 -pthread -o record_rate benches/record_rate.c -ldl
// Usage: SIGMATOP_MODE=full SIGMATOP_RECORD=dir LD_PRELOAD=libsigmatop_preload.so ./record_rate THREADS SECONDS
// (the preload built with `--features bench`).
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef long (*fake_fn)(void *, size_t);
typedef long (*hook_fn)(fake_fn, void *, size_t);

static hook_fn hook;
static void (*setup)(void *);
static uint64_t (*ring_full)(void);
static volatile int stop;
static long sink;
__attribute__((noinline)) static long fake(void *a, size_t n) { sink += n; return 0; }

static uint64_t now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

struct worker { int id; uint64_t calls; uint64_t max_burst_ns; uint64_t lost; pthread_t t; };

static void *work(void *arg) {
    struct worker *w = arg;
    void *ep = (void *)(uintptr_t)(0x7f0000001000ull + 0x1000ull * w->id);
    setup(ep);
    fake_fn volatile f = fake;
    while (!stop) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < 4096; i++) hook(f, ep, 64);
        uint64_t d = now_ns() - t0;
        if (d > w->max_burst_ns) w->max_burst_ns = d;
        w->calls += 4096;
    }
    w->lost = ring_full();  // this thread's events lost to its full ring
    return 0;
}

// utime+stime, in clock ticks, of this process's thread named "sigmatop" (the collector).
static long collector_ticks(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    struct dirent *e;
    long ticks = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[64] = "", stat[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        if (strcmp(comm, "sigmatop\n") != 0) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        f = fopen(path, "r");
        if (!f) continue;
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = 0;
        char *p = strrchr(stat, ')');  // fields after the command name: 3 = state ... 14 utime 15 stime
        if (!p) continue;
        unsigned long ut = 0, st = 0;
        if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            ticks = (long)(ut + st);
    }
    closedir(d);
    return ticks;
}

int main(int argc, char **argv) {
    hook = (hook_fn)dlsym(RTLD_DEFAULT, "sigmatop_bench_hook");
    setup = (void (*)(void *))dlsym(RTLD_DEFAULT, "sigmatop_bench_setup");
    ring_full = (uint64_t (*)(void))dlsym(RTLD_DEFAULT, "sigmatop_bench_ring_full");
    if (!hook || !setup || !ring_full) {
        fprintf(stderr, "needs LD_PRELOAD=libsigmatop_preload.so built with its bench entry points: cargo build --release -p sigmatop-preload --features bench\n");
        return 2;
    }
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    double seconds = argc > 2 ? atof(argv[2]) : 5;
    if (threads < 1 || threads > 256) threads = 1;
    struct worker *ws = calloc(threads, sizeof *ws);
    setup((void *)0x7e0000000000ull);  // starts the collector before the clock starts
    usleep(20000);
    long c0 = collector_ticks();
    uint64_t t0 = now_ns();
    for (int i = 0; i < threads; i++) { ws[i].id = i; pthread_create(&ws[i].t, 0, work, &ws[i]); }
    usleep((useconds_t)(seconds * 1e6));
    stop = 1;
    uint64_t calls = 0, max_burst = 0, lost = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ws[i].t, 0);
        calls += ws[i].calls;
        lost += ws[i].lost;
        if (ws[i].max_burst_ns > max_burst) max_burst = ws[i].max_burst_ns;
    }
    double wall = (now_ns() - t0) / 1e9;
    long c1 = collector_ticks();
    double cpu = (c0 >= 0 && c1 >= 0) ? (double)(c1 - c0) / sysconf(_SC_CLK_TCK) : -1;
    printf("threads=%d seconds=%.2f calls=%llu calls_per_s=%.0f max_burst_us=%.1f mean_call_ns=%.2f "
           "collector_cpu_s=%.2f collector_cpu_pct=%.1f ring_full=%llu\n",
           threads, wall, (unsigned long long)calls, calls / wall, max_burst / 1e3,
           wall * 1e9 * threads / (double)(calls ? calls : 1), cpu, cpu >= 0 ? 100 * cpu / wall : -1,
           (unsigned long long)lost);
    return 0;
}
