/* Forks while other threads keep defining endpoints and taking every other lock of the preload's
 * (sigmatop_bench_hold_locks: the doorbell state, the devx, verbs, libfabric and CUDA tables, the
 * registry, the warnings): every child takes all of them, waiting as long as it takes, defines one
 * endpoint of its own and exits. A child that inherited a lock held by another thread at the
 * moment of fork() waits forever: the parent reports it as hung.
 *
 * Usage: fork_locks FORKS   (run under the preload built with its `bench` feature)
 * Prints: locks=L forks=N hung=H (L: how many locks the preload holds across a fork); exits 1 when a child hung or the entry points are missing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void (*setup_fn)(void *);
typedef unsigned (*hold_fn)(unsigned spin, unsigned blocking);
static setup_fn setup;
static hold_fn hold;
static volatile int stop;

#define DEFINERS 4

static void *definer(void *arg)
{
    unsigned long base = 0x100000UL + (unsigned long)(size_t)arg * 0x1000000UL;
    /* Distinct handles, all threads together fewer than the endpoint map holds (a full map
     * would make every child print its warning). */
    /* Each round holds every lock for a moment and then leaves them free for ~50 us, as a
     * program's threads take them now and then: a fork lands while one is held often enough,
     * and the forking thread is not starved of them (four threads holding all of them all the
     * time kept it waiting past its 100 ms on a loaded machine). */
    struct timespec pause = {0, 20000};
    for (unsigned long i = 0; i < 7000 && !stop; i++) {
        setup((void *)(base + i * 64));
        hold(200, 0);
        nanosleep(&pause, NULL);
    }
    /* The endpoints are defined: go on taking the other locks until the forks are done. */
    while (!stop) {
        hold(200, 0);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int forks = argc > 1 ? atoi(argv[1]) : 200;
    setup = (setup_fn)dlsym(RTLD_DEFAULT, "sigmatop_bench_setup");
    hold = (hold_fn)dlsym(RTLD_DEFAULT, "sigmatop_bench_hold_locks");
    if (!setup || !hold) {
        fprintf(stderr, "fork_locks: sigmatop_bench_setup or sigmatop_bench_hold_locks not found"
                        " (preload with `bench`?)\n");
        return 1;
    }
    unsigned locks = hold(0, 1);
    pthread_t t[DEFINERS];
    for (long i = 0; i < DEFINERS; i++)
        pthread_create(&t[i], NULL, definer, (void *)i);
    int hung = 0, done = 0;
    for (int k = 0; k < forks; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            hold(0, 1);
            setup((void *)(0x900000000UL + (unsigned long)k * 64));
            _exit(0);
        }
        if (pid < 0) {
            perror("fork");
            break;
        }
        int status = 0, exited = 0;
        for (int ms = 0; ms < 10000; ms += 5) {
            if (waitpid(pid, &status, WNOHANG) == pid) {
                exited = 1;
                break;
            }
            struct timespec d = {0, 5000000};
            nanosleep(&d, NULL);
        }
        if (!exited) {
            hung++;
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        done++;
    }
    stop = 1;
    for (int i = 0; i < DEFINERS; i++)
        pthread_join(t[i], NULL);
    printf("locks=%u forks=%d hung=%d\n", locks, done, hung);
    return hung ? 1 : 0;
}
