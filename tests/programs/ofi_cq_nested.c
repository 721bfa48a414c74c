/*
 * ofi_cq_nested: reads a FI_CQ_FORMAT_CONTEXT completion queue from a signal handler that runs
 * while the thread is inside another libfabric call (a blocking fi_cq_sread on a second, idle
 * queue of another domain), as a program's SIGALRM handler or progress hook may.
 *
 * Endpoint A (domain 1) sends one tagged 64-byte message to itself; its queue is CONTEXT format
 * (8-byte entries: op_context only). The main thread arms a 150 ms timer, then blocks in
 * fi_cq_sread on endpoint B's queue (domain 2, nothing ever completes there) for up to 2 s. The
 * handler reads A's queue into two 8-byte entries followed by a canary until both completions
 * (send and receive) are in, and checks that each is one of the two contexts posted and that the
 * canary is intact: a provider that wrote its own larger entries there overflowed the buffer.
 * Prints "ofi_cq_nested ok contexts=2 canary=intact" and exits 0, else says what was wrong.
 * Usage: ofi_cq_nested [provider] (default "tcp;ofi_rxm").
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#define CHECK(call)                                                                        \
	do {                                                                               \
		int rc_ = (int)(call);                                                     \
		if (rc_) {                                                                 \
			fprintf(stderr, "%s: %d (%s)\n", #call, rc_, fi_strerror(-rc_));  \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#define CANARY 0x5a5a5a5a5a5a5a5aull

static struct fid_cq *cq_a;
static struct fi_context sctx, rctx;
static struct {
	struct fi_cq_entry e[2];
	uint64_t canary[8];
} out;
static volatile int handler_ran, got, bad_ctx, bad_canary, read_err;

static void on_alarm(int sig)
{
	(void)sig;
	handler_ran = 1;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < 2) {
		ssize_t r = fi_cq_read(cq_a, &out.e[got], (size_t)(2 - got));
		if (r > 0) {
			for (ssize_t i = 0; i < r; i++) {
				void *c = out.e[got + i].op_context;
				if (c != &sctx && c != &rctx)
					bad_ctx++;
			}
			got += (int)r;
		} else if (r != -FI_EAGAIN) {
			read_err = (int)r;
			break;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			break;
	}
	for (int i = 0; i < 8; i++)
		if (out.canary[i] != CANARY)
			bad_canary++;
}

static struct fid_domain *open_domain(struct fid_fabric *fabric, struct fi_info *info)
{
	struct fid_domain *d;
	CHECK(fi_domain(fabric, info, &d, NULL));
	return d;
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp;ofi_rxm";
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->caps = FI_TAGGED;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->mode = FI_CONTEXT;
	hints->fabric_attr->prov_name = strdup(prov);
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	struct fid_fabric *fabric;
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	struct fid_domain *d1 = open_domain(fabric, info), *d2 = open_domain(fabric, info);

	/* A: CONTEXT-format queue, an AV holding its own address. */
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64};
	struct fi_av_attr aa = {.type = FI_AV_TABLE};
	struct fid_av *av;
	struct fid_ep *ep;
	CHECK(fi_cq_open(d1, &ca, &cq_a, NULL));
	CHECK(fi_av_open(d1, &aa, &av, NULL));
	CHECK(fi_endpoint(d1, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &cq_a->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_enable(ep));
	char name[256];
	size_t nlen = sizeof name;
	CHECK(fi_getname(&ep->fid, name, &nlen));
	fi_addr_t self;
	if (fi_av_insert(av, name, 1, &self, 0, NULL) != 1) {
		fprintf(stderr, "fi_av_insert of the own address failed\n");
		return 1;
	}

	/* B: a queue with a wait object, on an endpoint of another domain; nothing completes. */
	struct fi_cq_attr cb = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64, .wait_obj = FI_WAIT_UNSPEC};
	struct fid_cq *cq_b;
	struct fid_av *av_b;
	struct fid_ep *ep_b;
	CHECK(fi_cq_open(d2, &cb, &cq_b, NULL));
	CHECK(fi_av_open(d2, &aa, &av_b, NULL));
	CHECK(fi_endpoint(d2, info, &ep_b, NULL));
	CHECK(fi_ep_bind(ep_b, &cq_b->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep_b, &av_b->fid, 0));
	CHECK(fi_enable(ep_b));

	static char sbuf[64], rbuf[64];
	struct fid_mr *smr = NULL, *rmr = NULL;
	if (info->domain_attr->mr_mode & FI_MR_LOCAL) {
		CHECK(fi_mr_reg(d1, sbuf, sizeof sbuf, FI_SEND, 0, 1, 0, &smr, NULL));
		CHECK(fi_mr_reg(d1, rbuf, sizeof rbuf, FI_RECV, 0, 2, 0, &rmr, NULL));
	}
	memset(sbuf, 0x42, sizeof sbuf);
	for (int i = 0; i < 8; i++)
		out.canary[i] = CANARY;
	CHECK(fi_trecv(ep, rbuf, sizeof rbuf, rmr ? fi_mr_desc(rmr) : NULL, self, 7, 0, &rctx));
	ssize_t sr;
	/* The connection to itself is set up on demand: drive progress (a read of no entries). */
	while ((sr = fi_tsend(ep, sbuf, sizeof sbuf, smr ? fi_mr_desc(smr) : NULL, self, 7, &sctx)) == -FI_EAGAIN)
		fi_cq_read(cq_a, NULL, 0);
	CHECK(sr);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = 150000}};
	setitimer(ITIMER_REAL, &it, NULL);
	struct fi_cq_entry e;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* Block in B's sread until the handler has run (an interrupted sread may return early). */
	do {
		ssize_t r = fi_cq_sread(cq_b, &e, 1, NULL, 2000);
		if (r > 0) {
			fprintf(stderr, "queue B completed something\n");
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (!handler_ran && t.tv_sec - t0.tv_sec < 10);

	int ok = handler_ran && got == 2 && !bad_ctx && !bad_canary && !read_err && rbuf[0] == 0x42;
	if (ok)
		printf("ofi_cq_nested ok contexts=2 canary=intact\n");
	else
		printf("ofi_cq_nested FAILED handler_ran=%d completions=%d bad_contexts=%d canary_words_overwritten=%d "
		       "read_error=%d payload=0x%02x\n",
		       handler_ran, got, bad_ctx, bad_canary, read_err, (unsigned char)rbuf[0]);
	fflush(stdout);
	if (smr)
		fi_close(&smr->fid);
	if (rmr)
		fi_close(&rmr->fid);
	fi_close(&ep_b->fid);
	fi_close(&av_b->fid);
	fi_close(&cq_b->fid);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq_a->fid);
	fi_close(&d2->fid);
	fi_close(&d1->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	return ok ? 0 : 4;
}
