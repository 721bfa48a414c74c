/*
 * ofi_cancel: posts N tagged receives of 4096 bytes on one RDM endpoint of the provider given as
 * argv[2] (default "tcp;ofi_rxm") for tags nobody sends, cancels each (fi_cancel) and reads its
 * error completion (fi_cq_readerr, err FI_ECANCELED): no message arrives, nothing fails.
 * Prints "ofi_cancel N cancelled" when every error entry said FI_ECANCELED.
 * Usage: ofi_cancel [N [provider]].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
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

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	const char *prov = argc > 2 ? argv[2] : "tcp;ofi_rxm";
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_mr *mr = NULL;
	static char buf[4096];
	static struct fi_context ctx[64];
	int cancelled = 0;

	if (n < 1 || n > 64)
		return 2;
	hints->caps = FI_TAGGED;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->mode = FI_CONTEXT;
	hints->fabric_attr->prov_name = strdup(prov);
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 128};
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_enable(ep));
	if (info->domain_attr->mr_mode & FI_MR_LOCAL)
		CHECK(fi_mr_reg(domain, buf, sizeof buf, FI_RECV, 0, 1, 0, &mr, NULL));
	for (int i = 0; i < n; i++) {
		ssize_t r;
		while ((r = fi_trecv(ep, buf, sizeof buf, mr ? fi_mr_desc(mr) : NULL, FI_ADDR_UNSPEC,
				     1000 + i, 0, &ctx[i])) == -FI_EAGAIN)
			fi_cq_read(cq, NULL, 0);
		CHECK(r);
		CHECK(fi_cancel(&ep->fid, &ctx[i]));
		struct fi_cq_tagged_entry e;
		for (;;) {
			r = fi_cq_read(cq, &e, 1);
			if (r == -FI_EAVAIL) {
				struct fi_cq_err_entry err = {0};
				if (fi_cq_readerr(cq, &err, 0) == 1 && err.err == FI_ECANCELED &&
				    err.op_context == &ctx[i])
					cancelled++;
				break;
			}
			if (r != -FI_EAGAIN) {
				fprintf(stderr, "receive %d: fi_cq_read %zd\n", i, r);
				return 3;
			}
		}
	}
	if (mr)
		fi_close(&mr->fid);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	printf("ofi_cancel %d cancelled\n", cancelled);
	return cancelled == n ? 0 : 4;
}
