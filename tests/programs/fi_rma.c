/*
 * fi_rma: a small libfabric RMA program for sigmatop's tests. One process opens two RDM
 * endpoints (A, the initiator, and B, the target) on one domain of the provider given as argv[1]
 * (default "tcp;ofi_rxm"), inserts each one's address in the other's AV, registers a target
 * buffer on B and then, from A:
 *   - NW fi_write of WSIZE bytes, one fi_writev (2 iovs), one fi_writemsg, one fi_inject_write,
 *   - NR fi_read of RSIZE bytes, one fi_readv (2 iovs), one fi_readmsg,
 *   - NS fi_send of SSIZE bytes (B posts NS fi_recv of SSIZE bytes first),
 *   - NT fi_tsend of SSIZE bytes with distinct tags (B posts NT fi_trecv).
 * It prints one line per successful data call:
 *   W <bytes> <offset>   remote write at target base + offset
 *   R <bytes> <offset>   remote read
 *   S <bytes>            send            V <bytes>   receive posted
 *   T <bytes> <tag>      tagged send     U <bytes> <tag>   tagged receive posted
 * and "base <addr>" (the remote address the offsets are relative to: the buffer's virtual
 * address with FI_MR_VIRT_ADDR, else 0) and a final "verify ok" when the data read back matches
 * what was written. Usage: fi_rma [provider [NW WSIZE NR RSIZE NS SSIZE NT]].
 * Built with -DFI_RMA_DLSYM it resolves fi_getinfo and fi_fabric with dlopen + dlsym (local
 * scope), the way some runtimes load libfabric.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define CHECK(call)                                                            \
	do {                                                                   \
		int rc_ = (int)(call);                                         \
		if (rc_) {                                                     \
			fprintf(stderr, "%s:%d %s: %d (%s)\n", __FILE__,       \
				__LINE__, #call, rc_, fi_strerror(-rc_));      \
			exit(1);                                               \
		}                                                              \
	} while (0)

#ifdef FI_RMA_DLSYM
#include <dlfcn.h>
typedef int (*getinfo_fn)(uint32_t, const char *, const char *, uint64_t,
			  const struct fi_info *, struct fi_info **);
typedef int (*fabric_fn)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static getinfo_fn p_getinfo;
static fabric_fn p_fabric;
#define GETINFO p_getinfo
#define FABRIC p_fabric
static void resolve(void)
{
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		exit(1);
	}
	p_getinfo = (getinfo_fn)dlsym(h, "fi_getinfo");
	p_fabric = (fabric_fn)dlsym(h, "fi_fabric");
	if (!p_getinfo || !p_fabric) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		exit(1);
	}
}
#else
#define GETINFO fi_getinfo
#define FABRIC fi_fabric
static void resolve(void)
{
}
#endif

#define REGION (1 << 20)

static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq_a, *cq_b;
static struct fid_av *av_a, *av_b;
static struct fid_ep *ep_a, *ep_b;
static struct fid_mr *mr_a, *mr_b;
static fi_addr_t b_from_a, a_from_b;
static char *local_a, *local_b, *target;
static uint64_t rkey, rbase;
static void *desc_a, *desc_b;
static size_t pending_a, pending_b;

/* Polls both CQs, counting the completions still expected on each. */
static void progress(void)
{
	struct fi_cq_tagged_entry e[8];
	ssize_t n;

	n = fi_cq_read(cq_a, e, 8);
	if (n > 0) {
		pending_a -= (size_t)n;
	} else if (n != -FI_EAGAIN) {
		struct fi_cq_err_entry err = { 0 };
		fi_cq_readerr(cq_a, &err, 0);
		fprintf(stderr, "cq A error %zd: %s\n", n, fi_strerror(err.err));
		exit(1);
	}
	n = fi_cq_read(cq_b, e, 8);
	if (n > 0) {
		pending_b -= (size_t)n;
	} else if (n != -FI_EAGAIN) {
		fprintf(stderr, "cq B error %zd\n", n);
		exit(1);
	}
}

static void drain(void)
{
	while (pending_a > 0)
		progress();
}

/* Retries a posting call while it returns -FI_EAGAIN, progressing meanwhile. */
#define POST(call)                                                             \
	do {                                                                   \
		ssize_t r_;                                                    \
		while ((r_ = (call)) == -FI_EAGAIN)                            \
			progress();                                            \
		if (r_) {                                                      \
			fprintf(stderr, "%s: %zd (%s)\n", #call, r_,           \
				fi_strerror((int)-r_));                        \
			exit(1);                                               \
		}                                                              \
	} while (0)

static void open_ep(struct fi_info *info, struct fid_cq **cq, struct fid_av **av,
		    struct fid_ep **ep)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .size = 256 };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };

	CHECK(fi_cq_open(domain, &cq_attr, cq, NULL));
	CHECK(fi_av_open(domain, &av_attr, av, NULL));
	CHECK(fi_endpoint(domain, info, ep, NULL));
	CHECK(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(*ep, &(*av)->fid, 0));
	CHECK(fi_enable(*ep));
}

static void insert(struct fid_ep *from_ep, struct fid_av *into, fi_addr_t *out)
{
	char name[256];
	size_t len = sizeof(name);

	CHECK(fi_getname(&from_ep->fid, name, &len));
	if (fi_av_insert(into, name, 1, out, 0, NULL) != 1) {
		fprintf(stderr, "fi_av_insert failed\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "tcp;ofi_rxm";
	size_t nw = argc > 2 ? strtoul(argv[2], NULL, 0) : 16;
	size_t wsize = argc > 3 ? strtoul(argv[3], NULL, 0) : 4096;
	size_t nr = argc > 4 ? strtoul(argv[4], NULL, 0) : 9;
	size_t rsize = argc > 5 ? strtoul(argv[5], NULL, 0) : 1000;
	size_t ns = argc > 6 ? strtoul(argv[6], NULL, 0) : 5;
	size_t ssize = argc > 7 ? strtoul(argv[7], NULL, 0) : 300;
	size_t nt = argc > 8 ? strtoul(argv[8], NULL, 0) : 3;
	struct fi_info *hints, *info;
	size_t i, off;
	uint64_t mr_mode;

	if (wsize * (nw + 4) > REGION / 2 || rsize * (nr + 3) > REGION / 2 ||
	    ssize > 4096) {
		fprintf(stderr, "sizes too large\n");
		return 2;
	}
	hints = fi_allocinfo();
	hints->caps = FI_MSG | FI_RMA | FI_TAGGED;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	resolve();
	CHECK(GETINFO(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	mr_mode = info->domain_attr->mr_mode;

	CHECK(FABRIC(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	open_ep(info, &cq_a, &av_a, &ep_a);
	open_ep(info, &cq_b, &av_b, &ep_b);
	insert(ep_b, av_a, &b_from_a);
	insert(ep_a, av_b, &a_from_b);

	local_a = calloc(1, REGION);
	local_b = calloc(1, REGION);
	target = calloc(1, REGION);
	CHECK(fi_mr_reg(domain, local_a, REGION, FI_READ | FI_WRITE | FI_SEND | FI_RECV,
			0, 1, 0, &mr_a, NULL));
	CHECK(fi_mr_reg(domain, target, REGION, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 2,
			0, &mr_b, NULL));
	{
		struct fid_mr *mr_lb;
		CHECK(fi_mr_reg(domain, local_b, REGION, FI_SEND | FI_RECV, 0, 3, 0,
				&mr_lb, NULL));
		desc_b = fi_mr_desc(mr_lb);
	}
	desc_a = fi_mr_desc(mr_a);
	rkey = fi_mr_key(mr_b);
	rbase = (mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)target : 0;
	printf("provider %s\n", info->fabric_attr->prov_name);
	printf("base %" PRIu64 "\n", rbase);

	/* Receives first, so the sends find them. */
	for (i = 0; i < ns; i++) {
		POST(fi_recv(ep_b, local_b + i * ssize, ssize, desc_b, FI_ADDR_UNSPEC, NULL));
		pending_b++;
		printf("V %zu\n", ssize);
	}
	for (i = 0; i < nt; i++) {
		uint64_t tag = 0x5100 + i;
		POST(fi_trecv(ep_b, local_b + 64 * 1024 + i * ssize, ssize, desc_b,
			      FI_ADDR_UNSPEC, tag, 0, NULL));
		pending_b++;
		printf("U %zu %" PRIu64 "\n", ssize, tag);
	}

	/* Writes: a pattern per byte, at consecutive offsets. */
	for (i = 0; i < REGION / 2; i++)
		local_a[i] = (char)(i * 7 + 3);
	off = 0;
	for (i = 0; i < nw; i++, off += wsize) {
		POST(fi_write(ep_a, local_a + off, wsize, desc_a, b_from_a, rbase + off,
			      rkey, NULL));
		pending_a++;
		printf("W %zu %zu\n", wsize, off);
	}
	{
		struct iovec iov[2] = { { local_a + off, wsize / 2 },
					{ local_a + off + wsize / 2, wsize - wsize / 2 } };
		void *d[2] = { desc_a, desc_a };
		POST(fi_writev(ep_a, iov, d, 2, b_from_a, rbase + off, rkey, NULL));
		pending_a++;
		printf("W %zu %zu\n", wsize, off);
		off += wsize;
	}
	{
		struct iovec iov = { local_a + off, wsize };
		struct fi_rma_iov riov = { rbase + off, wsize, rkey };
		struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc_a, .iov_count = 1,
					  .addr = b_from_a, .rma_iov = &riov,
					  .rma_iov_count = 1 };
		POST(fi_writemsg(ep_a, &msg, FI_COMPLETION));
		pending_a++;
		printf("W %zu %zu\n", wsize, off);
		off += wsize;
	}
	if (info->tx_attr->inject_size >= 8) {
		POST(fi_inject_write(ep_a, local_a + off, 8, b_from_a, rbase + off, rkey));
		printf("W %d %zu\n", 8, off);
		off += 8;
	}
	drain();

	/* Reads of what was written, into the upper half of A's buffer. */
	{
		size_t woff = off, roff = 0;
		char *dst = local_a + REGION / 2;

		for (i = 0; i < nr; i++, roff += rsize) {
			POST(fi_read(ep_a, dst + roff, rsize, desc_a, b_from_a, rbase + roff,
				     rkey, NULL));
			pending_a++;
			printf("R %zu %zu\n", rsize, roff);
		}
		{
			struct iovec iov[2] = { { dst + roff, rsize / 2 },
						{ dst + roff + rsize / 2, rsize - rsize / 2 } };
			void *d[2] = { desc_a, desc_a };
			POST(fi_readv(ep_a, iov, d, 2, b_from_a, rbase + roff, rkey, NULL));
			pending_a++;
			printf("R %zu %zu\n", rsize, roff);
			roff += rsize;
		}
		{
			struct iovec iov = { dst + roff, rsize };
			struct fi_rma_iov riov = { rbase + roff, rsize, rkey };
			struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc_a,
						  .iov_count = 1, .addr = b_from_a,
						  .rma_iov = &riov, .rma_iov_count = 1 };
			POST(fi_readmsg(ep_a, &msg, FI_COMPLETION));
			pending_a++;
			printf("R %zu %zu\n", rsize, roff);
			roff += rsize;
		}
		drain();
		if (roff > woff)
			roff = woff;
		if (memcmp(dst, local_a, roff) || memcmp(target, local_a, woff)) {
			printf("verify FAILED\n");
			return 1;
		}
	}

	/* Sends and tagged sends, A to B. */
	for (i = 0; i < ns; i++) {
		POST(fi_send(ep_a, local_a + i * ssize, ssize, desc_a, b_from_a, NULL));
		pending_a++;
		printf("S %zu\n", ssize);
	}
	for (i = 0; i < nt; i++) {
		uint64_t tag = 0x5100 + i;
		POST(fi_tsend(ep_a, local_a + i * ssize, ssize, desc_a, b_from_a, tag, NULL));
		pending_a++;
		printf("T %zu %" PRIu64 "\n", ssize, tag);
	}
	drain();
	while (pending_b > 0)
		progress();
	printf("verify ok\n");

	fi_close(&ep_a->fid);
	fi_close(&ep_b->fid);
	fi_close(&mr_a->fid);
	fi_close(&mr_b->fid);
	fi_close(&av_a->fid);
	fi_close(&av_b->fid);
	fi_close(&cq_a->fid);
	fi_close(&cq_b->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
