/* ofi_threads: a multi-threaded libfabric program for sigmatop's reliability tests
 * (tests/reliability/). Usage: ofi_threads PROVIDER T N (PROVIDER e.g. "tcp;ofi_rxm" or "shm").
 *
 * T threads; thread i opens its own fabric, domain, completion queues, address vector and two RDM
 * endpoints A and B (B's address inserted in A's AV and A's in B's), waits for all the others (a
 * barrier), then N times: B posts fi_recv and fi_trecv of S = (i+1)*16 bytes, A sends one
 * fi_send and one fi_tsend (tag i) of S bytes to B, and both wait for the four completions; B
 * checks the payloads. Then it closes everything and exits. So each thread makes exactly N send,
 * N recv, N tsend and N trecv calls of S bytes that succeed. A posting call that returns
 * -FI_EAGAIN is retried after progress; those calls are real calls too (sigmatop counts them as
 * errors with 0 bytes), so the program counts them and prints, at the end:
 *   threads T messages N each eagain send X recv Y tsend Z trecv W
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define CHECK(call)                                                                     \
	do {                                                                            \
		int rc_ = (int)(call);                                                  \
		if (rc_) {                                                              \
			fprintf(stderr, "ofi_threads: %s:%d %s: %d (%s)\n", __FILE__,   \
				__LINE__, #call, rc_, fi_strerror(-rc_));               \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

static const char *provider;
static long per_thread;
static pthread_barrier_t start_line;
/* -FI_EAGAIN returns, by call: send, recv, tsend, trecv. */
static atomic_long eagain[4];

struct side {
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	fi_addr_t peer;
	long pending;
};

static void poll_cq(struct side *s)
{
	struct fi_cq_tagged_entry e[8];
	ssize_t n = fi_cq_read(s->cq, e, 8);

	if (n > 0) {
		s->pending -= n;
	} else if (n != -FI_EAGAIN) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(s->cq, &err, 0);
		fprintf(stderr, "ofi_threads: cq error %zd: %s\n", n, fi_strerror(err.err));
		exit(1);
	}
}

/* Retries a posting call while it returns -FI_EAGAIN, progressing both sides meanwhile. */
#define POST(kind, a, b, call)                                                          \
	do {                                                                            \
		ssize_t r_;                                                             \
		while ((r_ = (call)) == -FI_EAGAIN) {                                   \
			atomic_fetch_add(&eagain[kind], 1);                             \
			poll_cq(a);                                                     \
			poll_cq(b);                                                     \
		}                                                                       \
		if (r_) {                                                               \
			fprintf(stderr, "ofi_threads: %s: %zd (%s)\n", #call, r_,       \
				fi_strerror((int)-r_));                                 \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

static void open_side(struct fid_domain *dom, struct fi_info *info, struct side *s)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .size = 64 };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };

	CHECK(fi_cq_open(dom, &cq_attr, &s->cq, NULL));
	CHECK(fi_av_open(dom, &av_attr, &s->av, NULL));
	CHECK(fi_endpoint(dom, info, &s->ep, NULL));
	CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(s->ep, &s->av->fid, 0));
	CHECK(fi_enable(s->ep));
	s->pending = 0;
}

static void introduce(struct side *from, struct side *to)
{
	char name[256];
	size_t len = sizeof(name);

	CHECK(fi_getname(&from->ep->fid, name, &len));
	if (fi_av_insert(to->av, name, 1, &to->peer, 0, NULL) != 1) {
		fprintf(stderr, "ofi_threads: fi_av_insert failed\n");
		exit(1);
	}
}

static void close_side(struct side *s)
{
	fi_close(&s->ep->fid);
	fi_close(&s->av->fid);
	fi_close(&s->cq->fid);
}

static void *worker(void *arg)
{
	long i = (long)arg;
	size_t size = (size_t)(i + 1) * 16;
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_mr *mr = NULL;
	struct side a, b;
	unsigned char *buf;
	void *desc = NULL;

	hints->caps = FI_MSG | FI_TAGGED;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(provider);
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fab, NULL));
	CHECK(fi_domain(fab, info, &dom, NULL));
	open_side(dom, info, &a);
	open_side(dom, info, &b);
	introduce(&b, &a);
	introduce(&a, &b);
	/* Four buffers: A's message and tagged payloads, B's two receive buffers. */
	buf = calloc(4, size);
	if (!buf)
		exit(1);
	if (info->domain_attr->mr_mode & FI_MR_LOCAL) {
		CHECK(fi_mr_reg(dom, buf, 4 * size, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
		desc = fi_mr_desc(mr);
	}
	pthread_barrier_wait(&start_line);
	for (long k = 0; k < per_thread; k++) {
		unsigned char *msg = buf, *tmsg = buf + size, *rmsg = buf + 2 * size,
			      *rtmsg = buf + 3 * size;

		for (size_t j = 0; j < size; j++) {
			msg[j] = (unsigned char)(k + j + i);
			tmsg[j] = (unsigned char)(k * 3 + j + i);
		}
		memset(rmsg, 0, 2 * size);
		POST(1, &b, &a, fi_recv(b.ep, rmsg, size, desc, FI_ADDR_UNSPEC, NULL));
		POST(3, &b, &a,
		     fi_trecv(b.ep, rtmsg, size, desc, FI_ADDR_UNSPEC, (uint64_t)i, 0, NULL));
		b.pending += 2;
		POST(0, &a, &b, fi_send(a.ep, msg, size, desc, a.peer, NULL));
		POST(2, &a, &b, fi_tsend(a.ep, tmsg, size, desc, a.peer, (uint64_t)i, NULL));
		a.pending += 2;
		while (a.pending > 0 || b.pending > 0) {
			poll_cq(&a);
			poll_cq(&b);
		}
		if (memcmp(msg, rmsg, size) || memcmp(tmsg, rtmsg, size)) {
			fprintf(stderr, "ofi_threads: thread %ld message %ld corrupted\n", i, k);
			exit(1);
		}
	}
	close_side(&a);
	close_side(&b);
	if (mr)
		fi_close(&mr->fid);
	free(buf);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t th[256];
	int t;

	if (argc < 4) {
		fprintf(stderr, "usage: ofi_threads PROVIDER THREADS MESSAGES\n");
		return 2;
	}
	provider = argv[1];
	t = atoi(argv[2]);
	per_thread = atol(argv[3]);
	if (t < 1 || t > 256)
		return 2;
	pthread_barrier_init(&start_line, NULL, (unsigned)t);
	for (long i = 0; i < t; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)i))
			return 3;
	for (int i = 0; i < t; i++)
		pthread_join(th[i], NULL);
	printf("threads %d messages %ld each eagain send %ld recv %ld tsend %ld trecv %ld\n", t,
	       per_thread, atomic_load(&eagain[0]), atomic_load(&eagain[1]),
	       atomic_load(&eagain[2]), atomic_load(&eagain[3]));
	return 0;
}
