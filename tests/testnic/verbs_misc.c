/* libibverbs: the remaining public entry points. Helpers that need no device (strings, rates,
 * fork control) behave as in rdma-core; calls the software NIC does not implement (multicast,
 * UD address handles from completions, MR re-registration, object import, ECE, kernel-struct
 * copies, sysfs reads) refuse with a stderr line naming the call and an error return.
 */
#include "prov.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

TN_API const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const names[] = {
		"success", "local length error", "local QP operation error", "local EE context operation error",
		"local protection error", "Work Request Flushed Error", "memory management operation error",
		"bad response error", "local access error", "remote invalid request error",
		"remote access error", "remote operation error", "transport retry counter exceeded",
		"RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
		"aborted error", "invalid EE context number", "invalid EE context state",
		"fatal error", "response timeout error", "general error", "TM error", "TM rendezvous error",
	};
	return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

TN_API const char *ibv_event_type_str(enum ibv_event_type e)
{
	static const char *const names[] = {
		"CQ error", "local work queue catastrophic error", "invalid request local work queue error",
		"local access violation work queue error", "communication established", "send queue drained",
		"path migrated", "path migration request error", "local catastrophic error", "port active",
		"port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
		"SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
		"WQ fatal",
	};
	return (unsigned)e < sizeof names / sizeof names[0] ? names[e] : "unknown";
}

TN_API const char *ibv_node_type_str(enum ibv_node_type t)
{
	switch (t) {
	case IBV_NODE_CA: return "InfiniBand channel adapter";
	case IBV_NODE_SWITCH: return "InfiniBand switch";
	case IBV_NODE_ROUTER: return "InfiniBand router";
	case IBV_NODE_RNIC: return "iWARP NIC";
	case IBV_NODE_USNIC: return "usNIC";
	case IBV_NODE_USNIC_UDP: return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED: return "unspecified";
	default: return "unknown";
	}
}

TN_API const char *ibv_port_state_str(enum ibv_port_state s)
{
	static const char *const names[] = {"no state change (NOP)", "down", "init", "armed", "active",
					    "active deferred"};
	return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

static const int rate_mult[][2] = {
	{IBV_RATE_2_5_GBPS, 1}, {IBV_RATE_5_GBPS, 2}, {IBV_RATE_10_GBPS, 4}, {IBV_RATE_20_GBPS, 8},
	{IBV_RATE_30_GBPS, 12}, {IBV_RATE_40_GBPS, 16}, {IBV_RATE_60_GBPS, 24}, {IBV_RATE_80_GBPS, 32},
	{IBV_RATE_120_GBPS, 48}, {IBV_RATE_200_GBPS, 80}, {IBV_RATE_400_GBPS, 160},
};

TN_API int ibv_rate_to_mult(enum ibv_rate r)
{
	for (size_t i = 0; i < sizeof rate_mult / sizeof rate_mult[0]; i++)
		if (rate_mult[i][0] == (int)r)
			return rate_mult[i][1];
	return -1;
}

TN_API enum ibv_rate mult_to_ibv_rate(int m)
{
	for (size_t i = 0; i < sizeof rate_mult / sizeof rate_mult[0]; i++)
		if (rate_mult[i][1] == m)
			return (enum ibv_rate)rate_mult[i][0];
	return IBV_RATE_MAX;
}

TN_API int ibv_rate_to_mbps(enum ibv_rate r)
{
	int m = ibv_rate_to_mult(r);
	return m < 0 ? -1 : m * 2500;
}

TN_API enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	return mult_to_ibv_rate(mbps / 2500);
}

/* No kernel pinning happens, so fork needs no protection. */
TN_API int ibv_fork_init(void)
{
	return 0;
}

TN_API enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

TN_API int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

TN_API int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

TN_API const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

/* The few sysfs attributes tools read (ibv_devinfo: board_id); anything else is refused. */
TN_API int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	static const char *const files[][2] = {
		{"board_id", "TESTNIC_SOFTWARE_NIC"}, {"fw_ver", TN_FW_VER}, {"hca_type", "MT4129"},
		{"hw_rev", "0"}, {"node_desc", "testnic software mlx5 NIC"},
	};
	(void)dir;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		if (strcmp(file, files[i][0]))
			continue;
		int n = snprintf(buf, size, "%s", files[i][1]);
		return n < (int)size ? n : (int)size - 1;
	}
	tn_warn("ibv_read_sysfs_file(%s): the software NIC has no such sysfs entry", file);
	errno = ENOENT;
	return -1;
}

TN_API int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0; /* no in-order guarantee is promised to the program */
}

/* ---- refused ---- */

TN_API int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return tn_refuse("ibv_attach_mcast");
}

TN_API int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp;
	(void)gid;
	(void)lid;
	return tn_refuse("ibv_detach_mcast");
}

TN_API struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
					    uint8_t port)
{
	(void)pd;
	(void)wc;
	(void)grh;
	(void)port;
	tn_refuse("ibv_create_ah_from_wc");
	return NULL;
}

TN_API int ibv_init_ah_from_wc(struct ibv_context *c, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah)
{
	(void)c;
	(void)port;
	(void)wc;
	(void)grh;
	(void)ah;
	return tn_refuse("ibv_init_ah_from_wc");
}

TN_API int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access)
{
	(void)mr;
	(void)flags;
	(void)pd;
	(void)addr;
	(void)len;
	(void)access;
	tn_refuse("ibv_rereg_mr");
	return IBV_REREG_MR_ERR_INPUT;
}

TN_API int ibv_resolve_eth_l2_from_gid(struct ibv_context *c, struct ibv_ah_attr *attr, uint8_t eth_mac[6],
				       uint16_t *vid)
{
	(void)c;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	return tn_refuse("ibv_resolve_eth_l2_from_gid");
}

TN_API int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return tn_refuse("ibv_query_ece");
}

TN_API int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return tn_refuse("ibv_set_ece");
}

TN_API struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	tn_refuse("ibv_import_device");
	return NULL;
}

TN_API struct ibv_pd *ibv_import_pd(struct ibv_context *c, uint32_t handle)
{
	(void)c;
	(void)handle;
	tn_refuse("ibv_import_pd");
	return NULL;
}

TN_API void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
	tn_refuse("ibv_unimport_pd");
}

TN_API struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t handle)
{
	(void)pd;
	(void)handle;
	tn_refuse("ibv_import_mr");
	return NULL;
}

TN_API void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
	tn_refuse("ibv_unimport_mr");
}

TN_API struct ibv_dm *ibv_import_dm(struct ibv_context *c, uint32_t handle)
{
	(void)c;
	(void)handle;
	tn_refuse("ibv_import_dm");
	return NULL;
}

TN_API void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
	tn_refuse("ibv_unimport_dm");
}

/* The kernel-struct converters of libibverbs' 1.0 ABI: no kernel here. */
TN_API void ibv_copy_qp_attr_from_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
	tn_refuse("ibv_copy_qp_attr_from_kern");
}

TN_API void ibv_copy_ah_attr_from_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
	tn_refuse("ibv_copy_ah_attr_from_kern");
}

TN_API void ibv_copy_path_rec_from_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
	tn_refuse("ibv_copy_path_rec_from_kern");
}

TN_API void ibv_copy_path_rec_to_kern(void *dst, void *src)
{
	(void)dst;
	(void)src;
	tn_refuse("ibv_copy_path_rec_to_kern");
}
