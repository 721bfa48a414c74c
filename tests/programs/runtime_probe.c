/* Drives sigmatop's runtime through its benchmark hook entry (sigmatop_bench_hook: the exact body
 * every interposed call runs) in the situations a traced job puts it in: many threads that exit
 * while their rings hold events, fork, exec, signals and exits. tests/reliability.rs checks the
 * record against the counts this program prints.
 *   runtime_probe threads N_THREADS CALLS   each thread i makes CALLS calls of i+1 bytes, then exits
 *   runtime_probe fork CALLS                parent CALLS, child CALLS*2 then exec → exec'd CALLS*3
 *   runtime_probe stay CALLS                CALLS calls, then sleeps (to be killed)
 *   runtime_probe handler-exit CALLS        CALLS calls, then exit(7) from a SIGUSR1 handler
 *   runtime_probe own-handler CALLS         the program's own SIGUSR1 handler must run
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef long (*fake_fn)(void *, size_t);
typedef long (*hook_fn)(fake_fn, void *, size_t);
static hook_fn hook;
static void (*setup)(void *);
static void *const EP = (void *)0x7f0000002000;

static long real_op(void *a, size_t n) { (void)a; return (long)n; }

static void calls(long n, size_t bytes) {
    for (long i = 0; i < n; i++)
        if (hook(real_op, EP, bytes) != (long)bytes) { fprintf(stderr, "wrong result\n"); exit(9); }
}

static long per_thread;
static void *worker(void *arg) { calls(per_thread, (size_t)arg); return NULL; }

static volatile sig_atomic_t got_usr1;
static void on_usr1(int s) { (void)s; got_usr1 = 1; }
static void exit_from_handler(int s) { (void)s; exit(7); }

int main(int argc, char **argv) {
    hook = (hook_fn)dlsym(RTLD_DEFAULT, "sigmatop_bench_hook");
    setup = (void (*)(void *))dlsym(RTLD_DEFAULT, "sigmatop_bench_setup");
    if (!hook || !setup) { fprintf(stderr, "%s\n", "needs LD_PRELOAD=libsigmatop_preload.so built with its bench entry points: cargo build -p sigmatop-preload --features bench"); return 2; }
    if (argc < 3) return 2;
    setup(EP);
    if (!strcmp(argv[1], "threads")) {
        int n = atoi(argv[2]);
        per_thread = atol(argv[3]);
        pthread_t t[256];
        for (int i = 0; i < n && i < 256; i++) pthread_create(&t[i], NULL, worker, (void *)(long)(i + 1));
        for (int i = 0; i < n && i < 256; i++) pthread_join(t[i], NULL);
        printf("threads %d calls %ld\n", n, per_thread);
    } else if (!strcmp(argv[1], "fork")) {
        long c = atol(argv[2]);
        calls(c, 100);
        pid_t p = fork();
        if (p == 0) {
            calls(2 * c, 200);
            usleep(300000); /* past the child collector's start-up grace */
            char n3[32];
            snprintf(n3, sizeof n3, "%ld", 3 * c);
            execl("/proc/self/exe", argv[0], "execd", n3, (char *)NULL);
            _exit(3);
        }
        int st = 0;
        waitpid(p, &st, 0);
        printf("parent %d child %d status %d\n", getpid(), p, WEXITSTATUS(st));
        return WEXITSTATUS(st);
    } else if (!strcmp(argv[1], "execd")) {
        calls(atol(argv[2]), 300);
        printf("execd %d\n", getpid());
    } else if (!strcmp(argv[1], "stay")) {
        calls(atol(argv[2]), 64);
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    } else if (!strcmp(argv[1], "handler-exit")) {
        signal(SIGUSR1, exit_from_handler);
        calls(atol(argv[2]), 64);
        raise(SIGUSR1);
    } else if (!strcmp(argv[1], "own-handler")) {
        signal(SIGUSR1, on_usr1);
        calls(atol(argv[2]), 64);
        raise(SIGUSR1);
        printf("handler ran %d\n", (int)got_usr1);
        return got_usr1 ? 0 : 1;
    }
    return 0;
}
