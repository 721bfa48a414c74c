/* libefa.so.1 of the software NIC: perftest links the EFA provider's direct-verbs library next
 * to libmlx5, and the system's libefa needs rdma-core's private ibv_cmd_* calls, which the
 * software NIC's libibverbs does not have. This stand-in only lets such programs load: every
 * efadv_* call refuses (there is no EFA device). */
#include <stddef.h>

int tn_refuse(const char *call);

#define P(n) __attribute__((visibility("default"))) void *n(void) { tn_refuse(#n); return NULL; }
#define I(n) __attribute__((visibility("default"))) int n(void) { return tn_refuse(#n); }

P(efadv_create_driver_qp)
P(efadv_create_qp_ex)
I(efadv_query_device)
I(efadv_query_ah)
P(efadv_create_cq)
P(efadv_cq_from_ibv_cq_ex)
