/* lifecycle dlcycle: for tests/reliability/. Loads libfabric with dlopen(RTLD_LOCAL), resolves
 * fi_getinfo with dlsym (as plugins do), lists providers, dlcloses it; twice (the second load may
 * land at another address). Prints one line per round.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "dlcycle"))
		return 2;
	for (int round = 0; round < 2; round++) {
		void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			printf("no libfabric\n");
			return 3;
		}
		int (*getinfo)(unsigned, const char *, const char *, unsigned long, void *,
			       void **) = (int (*)(unsigned, const char *, const char *,
						   unsigned long, void *, void **))dlsym(h, "fi_getinfo");
		void (*freeinfo)(void *) = (void (*)(void *))dlsym(h, "fi_freeinfo");
		void *info = NULL;
		int r = getinfo((1u << 16) | 17u, NULL, NULL, 0, NULL, &info);
		printf("round %d fi_getinfo %d %s\n", round, r, info ? "info" : "none");
		if (info)
			freeinfo(info);
		dlclose(h);
	}
	return 0;
}
