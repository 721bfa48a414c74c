/* libibverbs: the device, contexts, queries, protection domains, memory regions, address handles
 * and completion channels of the software NIC.
 *
 * One device, mlx5_0 (a ConnectX-7 by its IDs), one RoCE v2 port, ACTIVE, with one GID:
 * ::ffff:127.0.0.1 (TESTNIC_GID=a.b.c.d gives a process another "node"). Contexts have the
 * rdma-core 44 verbs_context layout: the inline verbs (ibv_post_send, ibv_poll_cq, ...) jump
 * through the context's ops table, and the extended ones (ibv_create_qp_ex, ibv_query_device_ex,
 * ...) through the verbs_context slots below it, every slot filled (unsupported ones refuse with a
 * stderr line naming the call).
 */
#include "prov.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

static struct ibv_device dev = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "mlx5_0",
	.dev_name = "uverbs0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs0",
	.ibdev_path = "/sys/class/infiniband/mlx5_0",
};

static uint64_t node_guid(void)
{
	/* Derived from the port's GID, so every process of one "node" sees the same GUID. */
	const uint8_t *g = tn_local_gid();
	return 0x02c9030000000000ull | (uint64_t)g[12] << 24 | (uint64_t)g[13] << 16 | (uint64_t)g[14] << 8 |
	       g[15];
}

TN_API struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = calloc(2, sizeof *l);
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = &dev;
	if (num)
		*num = 1;
	return l;
}

TN_API void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

TN_API const char *ibv_get_device_name(struct ibv_device *d)
{
	return d ? d->name : NULL;
}

TN_API __be64 ibv_get_device_guid(struct ibv_device *d)
{
	(void)d;
	return htobe64(node_guid());
}

TN_API int ibv_get_device_index(struct ibv_device *d)
{
	return d == &dev ? 0 : -1;
}

uint8_t *tn_page_alloc(void)
{
	void *p = mmap(NULL, TN_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

TN_API struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	if (d != &dev) {
		errno = ENODEV;
		return NULL;
	}
	int err = tn_fabric_init();
	if (err) {
		errno = err;
		return NULL;
	}
	struct tn_ctx *ctx = calloc(1, sizeof *ctx);
	if (!ctx) {
		errno = ENOMEM;
		return NULL;
	}
	ctx->qps = calloc(QP_TABLE, sizeof *ctx->qps);
	int async[2] = {-1, -1};
	/* A blocking fd, like the kernel's: ibv_get_async_event waits (the NIC raises no events). */
	if (!ctx->qps || pipe2(async, O_CLOEXEC)) {
		free(ctx->qps);
		free(ctx);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&ctx->lock, NULL);
	struct ibv_context *c = &ctx->vctx.context;
	c->device = d;
	c->cmd_fd = async[1]; /* no kernel: the write end of the (silent) async pipe stands in */
	c->async_fd = async[0];
	c->num_comp_vectors = 1;
	pthread_mutex_init(&c->mutex, NULL);
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->vctx.sz = sizeof(struct verbs_context);
	tn_ctx_ops(ctx);
	return c;
}

TN_API int ibv_close_device(struct ibv_context *c)
{
	struct tn_ctx *ctx = to_ctx(c);
	close(c->cmd_fd);
	close(c->async_fd);
	free(ctx->qps);
	free(ctx);
	return 0;
}

static void fill_device_attr(struct ibv_device_attr *a)
{
	memset(a, 0, sizeof *a);
	snprintf(a->fw_ver, sizeof a->fw_ver, "%s", TN_FW_VER);
	a->node_guid = htobe64(node_guid());
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = ~0ull;
	a->page_size_cap = 0xfffffffffffff000ull;
	a->vendor_id = TN_VENDOR_ID;
	a->vendor_part_id = TN_VENDOR_PART;
	a->max_qp = 1 << 17;
	a->max_qp_wr = TN_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_CHANGE_PHY_PORT |
			      IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN;
	a->max_sge = TN_MAX_SGE;
	a->max_sge_rd = TN_MAX_SGE;
	a->max_cq = 1 << 24;
	a->max_cqe = TN_MAX_CQE - 1;
	a->max_mr = 1 << 24;
	a->max_pd = 1 << 24;
	a->max_qp_rd_atom = 16;
	a->max_res_rd_atom = 1 << 21;
	a->max_qp_init_rd_atom = 16;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_srq = 1 << 23;
	a->max_srq_wr = TN_MAX_QP_WR - 1;
	a->max_srq_sge = TN_MAX_SGE;
	a->max_pkeys = 128;
	a->local_ca_ack_delay = 16;
	a->phys_port_cnt = 1;
}

TN_API int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	(void)c;
	fill_device_attr(a);
	return 0;
}

static int query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *a, size_t size)
{
	(void)c;
	(void)in;
	struct ibv_device_attr_ex x;
	memset(&x, 0, sizeof x);
	fill_device_attr(&x.orig_attr);
	x.max_dm_size = 0;
	x.raw_packet_caps = 0;
	x.pci_atomic_caps.fetch_add = x.pci_atomic_caps.swap = x.pci_atomic_caps.compare_swap = 0;
	memcpy(a, &x, size < sizeof x ? size : sizeof x);
	return 0;
}

static void fill_port(struct ibv_port_attr *p)
{
	memset(p, 0, sizeof *p);
	p->state = IBV_PORT_ACTIVE;
	p->max_mtu = IBV_MTU_4096;
	p->active_mtu = IBV_MTU_4096;
	p->gid_tbl_len = 1;
	p->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
	p->max_msg_sz = 1u << 30;
	p->pkey_tbl_len = 1;
	p->max_vl_num = 1;
	p->active_width = 2;  /* 4X */
	p->active_speed = 64; /* HDR: 200 Gb/s with 4X */
	p->phys_state = 5;    /* LinkUp */
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
	p->flags = IBV_QPF_GRH_REQUIRED;
	if (tn_port_ib()) {
		/* TESTNIC_PORT=ib: an InfiniBand port, LID = simulated host + 1, routed by LID (a GRH
		 * optional), subnet manager at LID 1. */
		p->port_cap_flags = IBV_PORT_CM_SUP;
		p->link_layer = IBV_LINK_LAYER_INFINIBAND;
		p->flags = 0;
		p->lid = tn_local_lid();
		p->sm_lid = 1;
	}
}

static int query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t size)
{
	(void)c;
	if (port != 1)
		return EINVAL;
	struct ibv_port_attr p;
	fill_port(&p);
	memcpy(a, &p, size < sizeof p ? size : sizeof p);
	return 0;
}

/* The exported symbol fills the older, shorter struct (programs normally use the inline one). */
TN_API int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *a)
{
	return query_port(c, port, (struct ibv_port_attr *)a, offsetof(struct ibv_port_attr, port_cap_flags2));
}

TN_API int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	(void)c;
	if (port != 1 || index != 0)
		return -1;
	memcpy(gid->raw, tn_local_gid(), 16);
	return 0;
}

TN_API int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	(void)c;
	if (port != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

TN_API int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	(void)c;
	return port == 1 && pkey == htobe16(0xffff) ? 0 : -1;
}

static void gid_entry(struct ibv_gid_entry *e)
{
	memset(e, 0, sizeof *e);
	memcpy(e->gid.raw, tn_local_gid(), 16);
	e->gid_index = 0;
	e->port_num = 1;
	e->gid_type = tn_port_ib() ? IBV_GID_TYPE_IB : IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = 1; /* lo */
}

TN_API int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
			     uint32_t flags, size_t size)
{
	(void)c;
	(void)flags;
	if (port != 1 || index != 0)
		return ENODATA;
	struct ibv_gid_entry e;
	gid_entry(&e);
	memcpy(entry, &e, size < sizeof e ? size : sizeof e);
	return 0;
}

TN_API ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries, size_t max,
				    uint32_t flags, size_t size)
{
	(void)c;
	(void)flags;
	if (!max)
		return -EINVAL;
	struct ibv_gid_entry e;
	gid_entry(&e);
	memcpy(entries, &e, size < sizeof e ? size : sizeof e);
	return 1;
}

/* rdma-core's private ibv_query_gid_type (ibv_devinfo): 1 = RoCE v2 */
TN_API int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, int *type)
{
	(void)c;
	if (port != 1 || index != 0)
		return -1;
	*type = tn_port_ib() ? 0 : 1; /* 0: IB / RoCE v1 */
	return 0;
}

/* ---- protection domains ---- */

uint32_t tn_pdn(struct ibv_pd *pd)
{
	return ((struct tn_vpd *)pd)->pdn;
}

TN_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
	struct tn_vpd *p = calloc(1, sizeof *p);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->pd.context = c;
	p->pdn = tn_id_alloc(TN_ID_PDN);
	p->pd.handle = p->pdn;
	return &p->pd;
}

TN_API int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

/* A parent domain: a PD with the parent's number (no thread domain or custom allocators here). */
static struct ibv_pd *alloc_parent_domain(struct ibv_context *c, struct ibv_parent_domain_init_attr *attr)
{
	if (!attr || !attr->pd || attr->td || attr->comp_mask) {
		tn_refuse("ibv_alloc_parent_domain with a thread domain or custom allocators");
		return NULL;
	}
	struct tn_vpd *p = calloc(1, sizeof *p);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->pd.context = c;
	p->pdn = tn_pdn(attr->pd);
	p->pd.handle = p->pdn;
	return &p->pd;
}

/* ---- memory regions ---- */

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access, int fd,
			  int gpu)
{
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	if (access & IBV_ACCESS_ON_DEMAND) {
		tn_refuse("ibv_reg_mr with IBV_ACCESS_ON_DEMAND (ODP)");
		return NULL;
	}
	struct tn_vmr *m = calloc(1, sizeof *m);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->hw.key = tn_mr_key_alloc();
	m->hw.pdn = tn_pdn(pd);
	m->hw.access = access & 0xf;
	m->hw.iova = iova;
	m->hw.addr = addr;
	m->hw.len = len;
	m->hw.gpu = gpu;
	m->hw.dmabuf_fd = fd;
	if (!m->hw.key || tn_mr_insert(&m->hw)) {
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = fd >= 0 ? (void *)(uintptr_t)iova : addr;
	m->mr.length = len;
	m->mr.handle = m->hw.key;
	m->mr.lkey = m->mr.rkey = m->hw.key;
	return &m->mr;
}

TN_API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	return reg(pd, addr, len, iova, access, -1, tn_mem_is_gpu(addr));
}

TN_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, (uint64_t)(uintptr_t)addr, (unsigned)access);
}

TN_API struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, len, iova, (unsigned)access);
}

/* A dma-buf: CUDA's (cuMemGetHandleForAddressRange) is reached through iova, the device address it
 * was exported from; any other dma-buf is mapped. An fd that is no open file fails with EBADF, as
 * the kernel's uverbs answers: NCCL probes with fd -1 and takes EBADF for "dma-buf supported"
 * (EOPNOTSUPP / EPROTONOSUPPORT for "not"; net_ib.cc ibDmaBufSupportInitOnce), which is what lets
 * its GPU Direct RDMA path (NIC reading and writing GPU memory) run on this NIC. */
TN_API struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
					int access)
{
	if (fd < 0 || fcntl(fd, F_GETFD) < 0) {
		errno = EBADF;
		return NULL;
	}
	if (tn_mem_is_gpu((void *)(uintptr_t)iova))
		return reg(pd, (void *)(uintptr_t)iova, len, iova, (unsigned)access, fd, 1);
	uint8_t *p = mmap(NULL, offset + len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		tn_warn("ibv_reg_dmabuf_mr: fd %d is neither a CUDA allocation at iova 0x%llx nor mappable: %m", fd,
			(unsigned long long)iova);
		errno = EOPNOTSUPP;
		return NULL;
	}
	return reg(pd, p + offset, len, iova, (unsigned)access, fd, 0);
}

TN_API int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct tn_vmr *m = (struct tn_vmr *)mr;
	tn_mr_remove(&m->hw);
	free(m);
	return 0;
}

/* ---- address handles (RC needs none; DC/UD users read the AV through mlx5dv_init_obj) ---- */

TN_API struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct tn_vah *a = calloc(1, sizeof *a);
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->attr = *attr;
	a->av.stat_rate_sl = attr->sl & 0xf;
	a->av.rlid = htobe16(attr->dlid);
	if (attr->is_global) {
		a->av.grh_gid_fl = htobe32(1u << 30 | (attr->grh.flow_label & 0xfffff));
		a->av.hop_limit = attr->grh.hop_limit;
		a->av.tclass = attr->grh.traffic_class;
		memcpy(a->av.rgid, attr->grh.dgid.raw, 16);
	}
	return &a->ah;
}

TN_API int ibv_destroy_ah(struct ibv_ah *ah)
{
	free(ah);
	return 0;
}

/* ---- completion channels ---- */

TN_API struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
	struct tn_vchan *ch = calloc(1, sizeof *ch);
	int fds[2];
	if (!ch || pipe2(fds, O_CLOEXEC)) {
		free(ch);
		errno = ENOMEM;
		return NULL;
	}
	/* The NIC thread must never block on a full pipe. */
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	ch->ch.context = c;
	ch->ch.fd = fds[0];
	ch->wfd = fds[1];
	return &ch->ch;
}

TN_API int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct tn_vchan *ch = (struct tn_vchan *)channel;
	if (ch->ch.refcnt) {
		errno = EBUSY;
		return EBUSY;
	}
	close(ch->ch.fd);
	close(ch->wfd);
	free(ch);
	return 0;
}

TN_API int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	void *p;
	ssize_t n;
	do {
		n = read(channel->fd, &p, sizeof p);
	} while (n < 0 && errno == EINTR);
	if (n != sizeof p)
		return -1;
	struct tn_vcq *v = p;
	*cq = (struct ibv_cq *)&v->cq;
	*cq_context = v->cq.cq_context;
	__atomic_add_fetch(&v->arm_sn, 1, __ATOMIC_RELAXED); /* what libmlx5's cq_event does */
	__atomic_add_fetch(&v->events, 1, __ATOMIC_RELAXED);
	return 0;
}

TN_API void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- async events: the NIC raises none; the fd never becomes readable ---- */

TN_API int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *event)
{
	(void)event;
	char b;
	ssize_t n;
	do {
		n = read(c->async_fd, &b, 1); /* never written: blocks, or EAGAIN if made non-blocking */
	} while (n < 0 && errno == EINTR);
	if (n >= 0)
		errno = ENODATA;
	return -1;
}

TN_API void ibv_ack_async_event(struct ibv_async_event *event)
{
	(void)event;
}

/* ---- the verbs_context slots ---- */

#define REFUSE_PTR(name)                                                                                   \
	static void *refuse_##name(void)                                                                   \
	{                                                                                                  \
		tn_refuse(#name);                                                                          \
		return NULL;                                                                               \
	}
#define REFUSE_INT(name)                                                                                   \
	static long refuse_##name(void)                                                                    \
	{                                                                                                  \
		return tn_refuse(#name);                                                                   \
	}
#define SLOT(field, fn) (ctx->vctx.field = (__typeof__(ctx->vctx.field))(void (*)(void))(fn))

REFUSE_INT(ibv_advise_mr)
REFUSE_PTR(ibv_alloc_null_mr)
REFUSE_INT(ibv_read_counters)
REFUSE_INT(ibv_attach_counters_point_flow)
REFUSE_PTR(ibv_create_counters)
REFUSE_INT(ibv_destroy_counters)
REFUSE_PTR(ibv_reg_dm_mr)
REFUSE_PTR(ibv_alloc_dm)
REFUSE_INT(ibv_free_dm)
REFUSE_INT(ibv_modify_flow_action_esp)
REFUSE_INT(ibv_destroy_flow_action)
REFUSE_PTR(ibv_create_flow_action_esp)
REFUSE_INT(ibv_modify_qp_rate_limit)
REFUSE_INT(ibv_dealloc_td)
REFUSE_PTR(ibv_alloc_td)
REFUSE_INT(ibv_modify_cq)
REFUSE_INT(ibv_post_srq_ops)
REFUSE_INT(ibv_destroy_rwq_ind_table)
REFUSE_PTR(ibv_create_rwq_ind_table)
REFUSE_INT(ibv_destroy_wq)
REFUSE_INT(ibv_modify_wq)
REFUSE_PTR(ibv_create_wq)
REFUSE_INT(ibv_query_rt_values_ex)
REFUSE_PTR(ibv_create_cq_ex)
REFUSE_INT(ibv_destroy_flow)
REFUSE_PTR(ibv_create_flow)
REFUSE_PTR(ibv_open_qp)
REFUSE_INT(ibv_get_srq_num)
REFUSE_PTR(ibv_create_srq_ex)
REFUSE_PTR(ibv_open_xrcd)
REFUSE_INT(ibv_close_xrcd)
REFUSE_PTR(ibv_alloc_mw)
REFUSE_INT(ibv_bind_mw)
REFUSE_INT(ibv_dealloc_mw)

void tn_ctx_ops(struct tn_ctx *ctx)
{
	struct ibv_context_ops *o = &ctx->vctx.context.ops;
	o->poll_cq = tn_poll_cq;
	o->req_notify_cq = tn_req_notify_cq;
	o->post_srq_recv = tn_post_srq_recv;
	o->post_send = tn_post_send;
	o->post_recv = tn_post_recv;
	o->alloc_mw = (__typeof__(o->alloc_mw))(void (*)(void))refuse_ibv_alloc_mw;
	o->bind_mw = (__typeof__(o->bind_mw))(void (*)(void))refuse_ibv_bind_mw;
	o->dealloc_mw = (__typeof__(o->dealloc_mw))(void (*)(void))refuse_ibv_dealloc_mw;
	ctx->vctx.query_port = query_port;
	ctx->vctx.query_device_ex = query_device_ex;
	ctx->vctx.create_qp_ex = tn_create_qp_ex;
	SLOT(advise_mr, refuse_ibv_advise_mr);
	SLOT(alloc_null_mr, refuse_ibv_alloc_null_mr);
	SLOT(read_counters, refuse_ibv_read_counters);
	SLOT(attach_counters_point_flow, refuse_ibv_attach_counters_point_flow);
	SLOT(create_counters, refuse_ibv_create_counters);
	SLOT(destroy_counters, refuse_ibv_destroy_counters);
	SLOT(reg_dm_mr, refuse_ibv_reg_dm_mr);
	SLOT(alloc_dm, refuse_ibv_alloc_dm);
	SLOT(free_dm, refuse_ibv_free_dm);
	SLOT(modify_flow_action_esp, refuse_ibv_modify_flow_action_esp);
	SLOT(destroy_flow_action, refuse_ibv_destroy_flow_action);
	SLOT(create_flow_action_esp, refuse_ibv_create_flow_action_esp);
	SLOT(modify_qp_rate_limit, refuse_ibv_modify_qp_rate_limit);
	ctx->vctx.alloc_parent_domain = alloc_parent_domain;
	SLOT(dealloc_td, refuse_ibv_dealloc_td);
	SLOT(alloc_td, refuse_ibv_alloc_td);
	SLOT(modify_cq, refuse_ibv_modify_cq);
	SLOT(post_srq_ops, refuse_ibv_post_srq_ops);
	SLOT(destroy_rwq_ind_table, refuse_ibv_destroy_rwq_ind_table);
	SLOT(create_rwq_ind_table, refuse_ibv_create_rwq_ind_table);
	SLOT(destroy_wq, refuse_ibv_destroy_wq);
	SLOT(modify_wq, refuse_ibv_modify_wq);
	SLOT(create_wq, refuse_ibv_create_wq);
	SLOT(query_rt_values, refuse_ibv_query_rt_values_ex);
	SLOT(create_cq_ex, refuse_ibv_create_cq_ex);
	SLOT(ibv_destroy_flow, refuse_ibv_destroy_flow);
	SLOT(ibv_create_flow, refuse_ibv_create_flow);
	SLOT(open_qp, refuse_ibv_open_qp);
	SLOT(get_srq_num, refuse_ibv_get_srq_num);
	SLOT(create_srq_ex, refuse_ibv_create_srq_ex);
	SLOT(open_xrcd, refuse_ibv_open_xrcd);
	SLOT(close_xrcd, refuse_ibv_close_xrcd);
}
