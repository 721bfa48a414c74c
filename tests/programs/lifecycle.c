/* Process-lifecycle cases for tests/reliability.rs, each printing what it did:
 *   lifecycle dlcycle     load libfabric with dlopen(RTLD_LOCAL), resolve fi_getinfo with dlsym (as
 *                         plugins do), list providers, dlclose; twice (the second load may land at
 *                         another address)
 *   lifecycle vfork N     vfork + exec of `lifecycle child N`: the child makes N calls
 *   lifecycle daemon N    double fork + setsid: the grandchild makes N calls after its parent exits
 *   lifecycle child N     N calls through sigmatop's benchmark hook, then exit
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef long (*fake_fn)(void *, size_t);
typedef long (*hook_fn)(fake_fn, void *, size_t);
static long real_op(void *a, size_t n) { (void)a; return (long)n; }

static int calls(long n) {
    hook_fn hook = (hook_fn)dlsym(RTLD_DEFAULT, "sigmatop_bench_hook");
    void (*setup)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "sigmatop_bench_setup");
    if (!hook || !setup) {
        fprintf(stderr, "%s\n", "needs LD_PRELOAD=libsigmatop_preload.so built with its bench entry points: cargo build -p sigmatop-preload --features bench");
        return 2;
    }
    void *ep = (void *)0x7f0000003000;
    setup(ep);
    for (long i = 0; i < n; i++) hook(real_op, ep, 32);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "dlcycle")) {
        for (int round = 0; round < 2; round++) {
            void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
            if (!h) { printf("no libfabric\n"); return 3; }
            int (*getinfo)(unsigned, const char *, const char *, unsigned long, void *, void **) =
                (int (*)(unsigned, const char *, const char *, unsigned long, void *, void **))dlsym(h, "fi_getinfo");
            void (*freeinfo)(void *) = (void (*)(void *))dlsym(h, "fi_freeinfo");
            void *info = NULL;
            int r = getinfo((1u << 16) | 17u, NULL, NULL, 0, NULL, &info);
            printf("round %d fi_getinfo %d %s\n", round, r, info ? "info" : "none");
            if (info) freeinfo(info);
            dlclose(h);
        }
        return 0;
    }
    long n = argc > 2 ? atol(argv[2]) : 0;
    if (!strcmp(argv[1], "child")) return calls(n);
    if (!strcmp(argv[1], "vfork")) {
        pid_t p = vfork();
        if (p == 0) {
            execl("/proc/self/exe", argv[0], "child", argv[2], (char *)NULL);
            _exit(127);
        }
        int st = 0;
        waitpid(p, &st, 0);
        printf("vfork child %d status %d\n", p, WEXITSTATUS(st));
        return WEXITSTATUS(st);
    }
    if (!strcmp(argv[1], "daemon")) {
        pid_t p = fork();
        if (p == 0) {
            setsid();
            if (fork() == 0) {
                usleep(100000); /* the intermediate parent is gone: a real daemon */
                int r = calls(n);
                exit(r);
            }
            _exit(0);
        }
        waitpid(p, NULL, 0);
        printf("daemon started\n");
        return 0;
    }
    return 2;
}
