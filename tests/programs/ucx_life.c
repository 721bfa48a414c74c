/* ucx_life: a real UCP program for sigmatop's lifecycle tests (tests/reliability/). Every
 * "message" below is a real tagged message: a UCP context with two workers (a sender and a
 * receiver) and an endpoint from one to the other over the transports UCX_TLS names (shared
 * memory or tcp); the receiver posts ucp_tag_recv_nbx, the sender ucp_tag_send_nbx, both are
 * progressed to completion and the payload is checked. So N messages of S bytes are, to sigmatop,
 * exactly N tag_send and N tag_recv operations of S bytes each. Nothing else this program calls is
 * a data operation (no flush; progress calls are counted only in full mode).
 *
 * The collector starts the lazy way: on the program's first UCX call (ucp_init), as in any traced
 * program; nothing of sigmatop is called directly.
 *
 *   ucx_life threads T N      T threads; thread i opens its own context, workers and endpoint,
 *                             waits for all the others (a barrier), sends N messages of
 *                             (i+1)*32 bytes, closes everything and exits. With LIFE_GO=FILE
 *                             the barrier also waits for FILE to exist (a test connects its
 *                             readers to the live socket first). With LIFE_STOP=FILE each
 *                             thread repeats its N messages (a round) until FILE exists, and the
 *                             program prints "rounds R0,R1,..." (rounds per thread) at the end
 *   ucx_life fork N           N messages of 100 B; everything closed; fork: the child sends
 *                             2N of 200 B in a context of its own, waits 300 ms and execs
 *                             `ucx_life execd 3N`, which sends 3N of 300 B
 *   ucx_life execd N          N messages of 300 B
 *   ucx_life child N          N messages of 64 B, everything closed, exit 0
 *   ucx_life short N          N messages of 64 B, then exit at once: nothing closed, no wait
 *   ucx_life paced N MS       N messages of 64 B, one every MS milliseconds, everything closed
 *   ucx_life stay N           N messages of 64 B, prints "ready", then sleeps until killed
 *   ucx_life handler-exit N   N messages of 64 B, then exit(7) from its own SIGUSR1 handler
 *   ucx_life own-handler N    N messages of 64 B; its own SIGUSR1 handler must run
 *   ucx_life vfork N          vfork + exec of `ucx_life child N`; the parent sends nothing
 *   ucx_life daemon N         double fork + setsid; the grandchild, once its parent is gone,
 *                             sends N messages of 64 B and exits
 *   ucx_life _exit N          N messages of 64 B, then _exit(0) at once: nothing closed, no exit
 *   ucx_life _Exit N          handler, no destructor (as _exit, through _Exit)
 *   ucx_life vfork-amid N     N messages of 64 B; vfork + exec of `ucx_life child N`; vfork +
 *                             exec of a path that does not exist, the child then _exit(127)s
 *                             (as shells and Python's subprocess do); N more messages of 64 B
 *                             on the same endpoint, everything closed
 *   ucx_life segv N R         an MPI rank (OMPI_COMM_WORLD_RANK, PMI_RANK): N messages of 64 B,
 *                             everything closed; rank R then waits until every other rank of
 *                             OMPI_COMM_WORLD_SIZE has ended (each leaves LIFE_DIR/<rank>.pid
 *                             as it exits 0) and, under sigmatop, until sigmatop follows it
 *                             live, then dies of SIGSEGV (a store through NULL)
 * It prints one line saying what it did.
 *
 * Built with -DUCX_LIFE_LIBRARY -shared -fPIC it is instead a library with one entry,
 * ucx_life_messages(n, size): a whole UCX life of n messages of `size` bytes (the binding
 * tests/programs/ucx_binding.py loads with ctypes).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

struct pair {
	ucp_context_h ctx;
	ucp_worker_h tx, rx;
	ucp_ep_h ep;
};

static void die(const char *what, ucs_status_t st)
{
	fprintf(stderr, "ucx_life: %s: %s\n", what, ucs_status_string(st));
	exit(10);
}

static void pair_open(struct pair *p)
{
	ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES,
				.features = UCP_FEATURE_TAG };
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				   .thread_mode = UCS_THREAD_MODE_SINGLE };
	ucp_config_t *cfg;
	ucp_address_t *addr;
	size_t len;
	ucs_status_t st;

	if ((st = ucp_config_read(NULL, NULL, &cfg)) != UCS_OK)
		die("ucp_config_read", st);
	if ((st = ucp_init(&params, cfg, &p->ctx)) != UCS_OK)
		die("ucp_init", st);
	ucp_config_release(cfg);
	if ((st = ucp_worker_create(p->ctx, &wp, &p->tx)) != UCS_OK)
		die("ucp_worker_create", st);
	if ((st = ucp_worker_create(p->ctx, &wp, &p->rx)) != UCS_OK)
		die("ucp_worker_create", st);
	if ((st = ucp_worker_get_address(p->rx, &addr, &len)) != UCS_OK)
		die("ucp_worker_get_address", st);
	ucp_ep_params_t ep = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
			       .address = addr };
	if ((st = ucp_ep_create(p->tx, &ep, &p->ep)) != UCS_OK)
		die("ucp_ep_create", st);
	ucp_worker_release_address(p->rx, addr);
}

static void progress(struct pair *p)
{
	ucp_worker_progress(p->tx);
	ucp_worker_progress(p->rx);
}

static void send_done(void *req, ucs_status_t st, void *user)
{
	(void)req;
	*(volatile int *)user = st == UCS_OK ? 1 : -1;
}

static void recv_done(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
	(void)req;
	(void)info;
	*(volatile int *)user = st == UCS_OK ? 1 : -1;
}

/* Waits for a request made with a completion flag; NULL means it completed at once. */
static void wait_req(struct pair *p, void *req, volatile int *flag, const char *what)
{
	if (req == NULL)
		return;
	if (UCS_PTR_IS_ERR(req))
		die(what, UCS_PTR_STATUS(req));
	while (*flag == 0)
		progress(p);
	if (*flag < 0)
		die(what, UCS_ERR_IO_ERROR);
	ucp_request_free(req);
}

/* n tagged messages of `size` bytes from tx to rx, each checked. */
static void pair_send_paced(struct pair *p, long n, size_t size, uint64_t tag, long gap_ms)
{
	unsigned char *s = malloc(size), *r = malloc(size);

	if (!s || !r)
		exit(11);
	for (long i = 0; i < n; i++) {
		volatile int sd = 0, rd = 0;
		ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
							   UCP_OP_ATTR_FIELD_USER_DATA,
					   .cb.recv = recv_done,
					   .user_data = (void *)&rd };
		ucp_request_param_t sp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
							   UCP_OP_ATTR_FIELD_USER_DATA,
					   .cb.send = send_done,
					   .user_data = (void *)&sd };
		void *rr, *sr;

		for (size_t b = 0; b < size; b++)
			s[b] = (unsigned char)(i * 31 + b + tag);
		memset(r, 0, size);
		rr = ucp_tag_recv_nbx(p->rx, r, size, tag, (ucp_tag_t)-1, &rp);
		sr = ucp_tag_send_nbx(p->ep, s, size, tag, &sp);
		wait_req(p, sr, &sd, "ucp_tag_send_nbx");
		if (UCS_PTR_IS_ERR(rr))
			die("ucp_tag_recv_nbx", UCS_PTR_STATUS(rr));
		/* A receive posted before its send always returns a request. */
		wait_req(p, rr, &rd, "ucp_tag_recv_nbx");
		if (memcmp(s, r, size)) {
			fprintf(stderr, "ucx_life: message %ld corrupted\n", i);
			exit(12);
		}
		if (gap_ms > 0)
			usleep((useconds_t)gap_ms * 1000);
	}
	free(s);
	free(r);
}

static void pair_send(struct pair *p, long n, size_t size, uint64_t tag)
{
	pair_send_paced(p, n, size, tag, 0);
}

static void pair_close(struct pair *p)
{
	ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				   .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *req = ucp_ep_close_nbx(p->ep, &cp);

	if (UCS_PTR_IS_PTR(req)) {
		while (ucp_request_check_status(req) == UCS_INPROGRESS)
			progress(p);
		ucp_request_free(req);
	}
	ucp_worker_destroy(p->tx);
	ucp_worker_destroy(p->rx);
	ucp_cleanup(p->ctx);
}

/* A whole UCX life: open, n messages, close. */
static void life(long n, size_t size)
{
	struct pair p;

	pair_open(&p);
	pair_send(&p, n, size, size);
	pair_close(&p);
}

#ifdef UCX_LIFE_LIBRARY
int ucx_life_messages(long n, long size)
{
	life(n, (size_t)size);
	return 0;
}
#else

static long per_thread;
static pthread_barrier_t start_line;
static const char *stop_file;
static long rounds[256];

static void *worker(void *arg)
{
	long i = (long)arg;
	struct pair p;

	pair_open(&p);
	pthread_barrier_wait(&start_line);
	do {
		pair_send(&p, per_thread, (size_t)(i + 1) * 32, (uint64_t)i);
		rounds[i]++;
	} while (stop_file && access(stop_file, F_OK) != 0);
	pair_close(&p);
	return NULL;
}

static volatile sig_atomic_t got_usr1;
static void on_usr1(int s)
{
	(void)s;
	got_usr1 = 1;
}
static void exit_from_handler(int s)
{
	(void)s;
	exit(7);
}

static int env_int(const char *a, const char *b)
{
	const char *v = getenv(a);

	if (!v)
		v = getenv(b);
	return v ? atoi(v) : -1;
}

/* Process `pid` has ended: gone, or a zombie its parent has not reaped yet. */
static int ended(long pid)
{
	char path[64], buf[512];
	FILE *f;
	char *p;

	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return 1;
	p = fgets(buf, sizeof buf, f);
	fclose(f);
	if (!p || !(p = strrchr(buf, ')')))
		return 1;
	return p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* True once sigmatop follows this process live: its socket (<dir>/<host>-<pid>.sock) is listed
 * twice in /proc/net/unix, the listener and an accepted connection. A rank that crashed before
 * that would never be seen: it writes no final state. */
static int followed_live(void)
{
	char suffix[64], line[4096];
	int n = 0;
	FILE *f = fopen("/proc/net/unix", "r");

	if (!f)
		return 0;
	snprintf(suffix, sizeof suffix, "-%ld.sock", (long)getpid());
	while (fgets(line, sizeof line, f)) {
		size_t l = strcspn(line, "\n"), k = strlen(suffix);

		line[l] = 0;
		if (l >= k && !strcmp(line + l - k, suffix))
			n++;
	}
	fclose(f);
	return n >= 2;
}

static int segv_rank(long n, int crasher)
{
	int rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK");
	int size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
	const char *dir = getenv("LIFE_DIR");
	char path[4096];

	if (rank < 0 || size < 1 || !dir)
		return 2;
	life(n, 64);
	if (rank != crasher) {
		FILE *f;

		snprintf(path, sizeof path, "%s/%d.pid", dir, rank);
		f = fopen(path, "w");
		if (!f)
			return 3;
		fprintf(f, "%ld\n", (long)getpid());
		fclose(f);
		printf("segv rank %d sent %ld, exits\n", rank, n);
		return 0;
	}
	for (int r = 0; r < size; r++) {
		long pid = 0;

		if (r == rank)
			continue;
		snprintf(path, sizeof path, "%s/%d.pid", dir, r);
		/* At most 120 s: a rank that never ends fails the run (exit 4). */
		for (int w = 0;; w++) {
			FILE *f = fopen(path, "r");

			if (f) {
				if (fscanf(f, "%ld", &pid) != 1)
					pid = 0;
				fclose(f);
			}
			if (pid > 0 && ended(pid))
				break;
			if (w > 120000)
				return 4;
			usleep(1000);
		}
	}
	/* Under sigmatop (SIGMATOP_SOCKET_DIR set), at most 60 s for it to follow this rank. */
	for (int w = 0; getenv("SIGMATOP_SOCKET_DIR") && !followed_live(); w++) {
		if (w > 60000)
			return 6;
		usleep(1000);
	}
	/* Then two of the collector's 250 ms snapshots, so that the last one sigmatop has carries
	 * the sends (what a crash leaves is the last snapshot). */
	if (getenv("SIGMATOP_SOCKET_DIR"))
		usleep(600000);
	printf("segv rank %d sent %ld, crashes\n", rank, n);
	*(volatile int *)0 = 1;
	return 5;
}

int main(int argc, char **argv)
{
	long n;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: ucx_life MODE N ...\n");
		return 2;
	}
	n = atol(argv[2]);
	if (!strcmp(argv[1], "threads")) {
		int t = atoi(argv[2]);
		pthread_t th[256];

		if (argc < 4 || t < 1 || t > 256)
			return 2;
		const char *go = getenv("LIFE_GO");

		stop_file = getenv("LIFE_STOP");

		per_thread = atol(argv[3]);
		pthread_barrier_init(&start_line, NULL, (unsigned)t + (go ? 1 : 0));
		for (long i = 0; i < t; i++)
			if (pthread_create(&th[i], NULL, worker, (void *)i))
				return 3;
		if (go) {
			for (int w = 0; access(go, F_OK) != 0; w++) {
				if (w > 60000)
					return 4;
				usleep(1000);
			}
			pthread_barrier_wait(&start_line);
		}
		for (int i = 0; i < t; i++)
			pthread_join(th[i], NULL);
		printf("threads %d messages %ld each", t, per_thread);
		if (stop_file)
			for (int i = 0; i < t; i++)
				printf("%s%ld", i ? "," : " rounds ", rounds[i]);
		printf("\n");
	} else if (!strcmp(argv[1], "fork")) {
		pid_t c;
		int st = 0;

		life(n, 100);
		c = fork();
		if (c == 0) {
			char arg[32];

			life(2 * n, 200);
			usleep(300000); /* past the child collector's start-up grace (50 ms) */
			snprintf(arg, sizeof arg, "%ld", 3 * n);
			execl("/proc/self/exe", argv[0], "execd", arg, (char *)NULL);
			_exit(3);
		}
		waitpid(c, &st, 0);
		printf("parent %d child %d status %d\n", getpid(), c, WEXITSTATUS(st));
		return WEXITSTATUS(st);
	} else if (!strcmp(argv[1], "execd")) {
		life(n, 300);
		printf("execd %d\n", getpid());
	} else if (!strcmp(argv[1], "child")) {
		life(n, 64);
		printf("child %d sent %ld\n", getpid(), n);
	} else if (!strcmp(argv[1], "short")) {
		struct pair p;

		pair_open(&p);
		pair_send(&p, n, 64, 64);
		printf("short %d sent %ld\n", getpid(), n);
		return 0;
	} else if (!strcmp(argv[1], "paced")) {
		struct pair p;

		if (argc < 4)
			return 2;
		pair_open(&p);
		pair_send_paced(&p, n, 64, 64, atol(argv[3]));
		pair_close(&p);
		printf("paced %d sent %ld\n", getpid(), n);
	} else if (!strcmp(argv[1], "stay")) {
		struct pair p;

		pair_open(&p);
		pair_send(&p, n, 64, 64);
		printf("ready\n");
		for (;;)
			pause();
	} else if (!strcmp(argv[1], "handler-exit")) {
		struct pair p;

		signal(SIGUSR1, exit_from_handler);
		pair_open(&p);
		pair_send(&p, n, 64, 64);
		raise(SIGUSR1);
		return 1;
	} else if (!strcmp(argv[1], "own-handler")) {
		signal(SIGUSR1, on_usr1);
		life(n, 64);
		raise(SIGUSR1);
		printf("handler ran %d\n", (int)got_usr1);
		return got_usr1 ? 0 : 1;
	} else if (!strcmp(argv[1], "vfork")) {
		int st = 0;
		pid_t c = vfork();

		if (c == 0) {
			execl("/proc/self/exe", argv[0], "child", argv[2], (char *)NULL);
			_exit(127);
		}
		waitpid(c, &st, 0);
		printf("vfork child %d status %d\n", c, WEXITSTATUS(st));
		return WEXITSTATUS(st);
	} else if (!strcmp(argv[1], "daemon")) {
		pid_t c = fork();

		if (c == 0) {
			setsid();
			if (fork() == 0) {
				usleep(100000); /* the intermediate parent is gone: a real daemon */
				life(n, 64);
				exit(0);
			}
			_exit(0);
		}
		waitpid(c, NULL, 0);
		printf("daemon started\n");
	} else if (!strcmp(argv[1], "_exit") || !strcmp(argv[1], "_Exit")) {
		struct pair p;

		pair_open(&p);
		pair_send(&p, n, 64, 64);
		printf("%s %d sent %ld\n", argv[1], getpid(), n);
		if (!strcmp(argv[1], "_exit"))
			_exit(0);
		_Exit(0);
	} else if (!strcmp(argv[1], "vfork-amid")) {
		struct pair p;
		int st1 = 0, st2 = 0;
		pid_t c1, c2;

		pair_open(&p);
		pair_send(&p, n, 64, 64);
		c1 = vfork();
		if (c1 == 0) {
			execl("/proc/self/exe", argv[0], "child", argv[2], (char *)NULL);
			_exit(126);
		}
		waitpid(c1, &st1, 0);
		c2 = vfork();
		if (c2 == 0) {
			execl("/nonexistent/ucx_life", argv[0], (char *)NULL);
			_exit(127);
		}
		waitpid(c2, &st2, 0);
		pair_send(&p, n, 64, 64);
		pair_close(&p);
		printf("vfork-amid %d child %d status %d failed %d status %d\n", getpid(), c1,
		       WEXITSTATUS(st1), c2, WEXITSTATUS(st2));
		return WEXITSTATUS(st1) == 0 && WEXITSTATUS(st2) == 127 ? 0 : 1;
	} else if (!strcmp(argv[1], "segv")) {
		return segv_rank(n, argc > 3 ? atoi(argv[3]) : -1);
	} else {
		return 2;
	}
	return 0;
}
#endif /* UCX_LIFE_LIBRARY */
