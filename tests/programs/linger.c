/* An LD_PRELOAD shim for tests: the program's main runs as usual, then, before the program exits,
 * the process prints "linger: main returned N" on stderr and waits (up to LINGER_S seconds,
 * default 600) until it is killed. A traced program that has finished its traffic thus keeps its
 * socket and its final counters for a live reader (`sigmatop attach --json --once` needs live
 * processes), and the figures it reports are exact.
 *
 * It wraps main through __libc_start_main, the one entry every dynamically linked program of
 * glibc passes through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
                        void *);

static main_fn real_main;

static int linger_main(int argc, char **argv, char **envp)
{
    int rc = real_main(argc, argv, envp);
    const char *s = getenv("LINGER_S");
    int secs = s ? atoi(s) : 600;
    fprintf(stderr, "linger: main returned %d\n", rc);
    fflush(NULL);
    for (int i = 0; i < secs; i++)
        sleep(1);
    return rc;
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end)
{
    start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    real_main = main;
    return real(linger_main, argc, argv, init, fini, rtld_fini, stack_end);
}
