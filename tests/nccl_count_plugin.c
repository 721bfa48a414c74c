/* A small NCCL profiler plugin of ours (interface v5, as NCCL 2.28.9's profiler_v5.h declares it),
 * standing in for a user's own (NCCL Inspector, CoMMA) behind sigmatop's: it asks for the event
 * types in $COUNT_MASK (default ProxyCtrl, Coll, ProxyOp, GroupApi, CollApi), hands out handles of
 * its own (heap objects with a magic word and their type), and checks every call it gets: the
 * context is its own, every handle passed back is one it made and not yet stopped, every parent
 * is one of its handles or null, and the event's type is one it asked for. At finalize it writes
 * to $COUNT_OUT one line: "inits I finalizes F starts S stops T states U types=<type:count,...>
 * bad B". With $COUNT_FAIL_INIT set its init fails (ncclSystemError) and it writes nothing.
 * Built by tests/nccl_plugin.rs. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef int ncclResult_t;
typedef struct {
	uint64_t type;
	void *parentObj;
	int rank;
	union {
		uint64_t pad[12];
	};
} descr_t;

#define MAGIC 0x636f756e74ull /* "count" */
#define DEAD 0xdeadull

struct ev {
	uint64_t magic;
	uint64_t type;
};
struct ctx {
	uint64_t magic;
	int mask;
};

static int inits, finalizes, starts, stops, states, bad;
static int per_type[16];

static ncclResult_t c_init(void **context, uint64_t commId, int *mask, const char *name, int nNodes,
			   int nranks, int rank, void *logfn)
{
	(void)commId, (void)name, (void)nNodes, (void)nranks, (void)rank, (void)logfn;
	if (getenv("COUNT_FAIL_INIT")) /* an init that fails, as a misconfigured plugin's would */
		return 3;                /* ncclSystemError */
	struct ctx *c = calloc(1, sizeof *c);
	if (!c)
		return 1;
	c->magic = MAGIC;
	const char *m = getenv("COUNT_MASK");
	c->mask = m ? atoi(m) : (1 << 5) | (1 << 1) | (1 << 3) | (1 << 8) | (1 << 9);
	*mask = c->mask;
	*context = c;
	inits++;
	return 0;
}

static bool ours(void *h)
{
	return h && ((struct ev *)h)->magic == MAGIC;
}

static ncclResult_t c_start(void *context, void **eHandle, descr_t *d)
{
	struct ctx *c = context;
	if (!c || c->magic != MAGIC || !((uint64_t)c->mask & d->type))
		bad++;
	if (d->parentObj && !ours(d->parentObj))
		bad++;
	struct ev *e = calloc(1, sizeof *e);
	if (!e)
		return 1;
	e->magic = MAGIC;
	e->type = d->type;
	*eHandle = e;
	starts++;
	for (int i = 0; i < 16; i++)
		if (d->type == (1ull << i))
			per_type[i]++;
	return 0;
}

static ncclResult_t c_stop(void *h)
{
	if (!ours(h)) {
		bad++;
		return 0;
	}
	((struct ev *)h)->magic = DEAD; /* kept, so a second use is seen */
	stops++;
	return 0;
}

static ncclResult_t c_state(void *h, int state, void *args)
{
	(void)state, (void)args;
	if (!ours(h))
		bad++;
	states++;
	return 0;
}

static ncclResult_t c_finalize(void *context)
{
	struct ctx *c = context;
	if (!c || c->magic != MAGIC)
		bad++;
	finalizes++;
	const char *out = getenv("COUNT_OUT");
	FILE *f = out ? fopen(out, "w") : NULL;
	if (f) {
		fprintf(f, "inits %d finalizes %d starts %d stops %d states %d types=", inits, finalizes,
			starts, stops, states);
		for (int i = 0; i < 16; i++)
			if (per_type[i])
				fprintf(f, "%d:%d,", i, per_type[i]);
		fprintf(f, " bad %d\n", bad);
		fclose(f);
	}
	return 0;
}

struct {
	const char *name;
	ncclResult_t (*init)(void **, uint64_t, int *, const char *, int, int, int, void *);
	ncclResult_t (*startEvent)(void *, void **, descr_t *);
	ncclResult_t (*stopEvent)(void *);
	ncclResult_t (*recordEventState)(void *, int, void *);
	ncclResult_t (*finalize)(void *);
} ncclProfiler_v5 = {"counter", c_init, c_start, c_stop, c_state, c_finalize};
