/* The software mlx5 NIC's internal model, shared by every file of libibverbs.so.1 and
 * libmlx5.so.1 (docs/TESTNIC.md describes the whole).
 *
 * Two halves meet here:
 * - the "hardware" (the NIC thread, engine.c + responder.c): QP/CQ/SRQ contexts (struct tn_hqp,
 *   tn_hcq, tn_hsrq) holding what a real NIC keeps in its QPC/CQC: buffer addresses, doorbell
 *   record and doorbell register addresses, cursors. It reads WQEs from the send queue after a
 *   doorbell, talks to other processes over the fabric (fabric.c) and writes 64-byte CQEs.
 * - the "driver" (verbs_*.c for libibverbs, devx.c for mlx5 devx): creates those contexts the way
 *   libmlx5 or a devx user lays them out, and for verbs builds WQEs and polls CQEs like libmlx5.
 *
 * Threading: the control path (any application thread) creates and configures contexts under
 * tn_nic.lock and publishes them; afterwards only the NIC thread touches the fields marked
 * "NIC-owned". A context is freed only after the NIC thread has passed two loop iterations
 * (tn_nic_quiesce), so it never sees freed memory.
 */
#ifndef TESTNIC_NIC_H
#define TESTNIC_NIC_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <endian.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TN_API __attribute__((visibility("default")))

/* ---- geometry (what QUERY_HCA_CAP and libmlx5 would report) ---- */
#define TN_PAGE 4096u
#define TN_BF_OFFSET 0x800u    /* first doorbell (BlueFlame) register of a UAR page */
#define TN_LOG_BF_REG 9        /* bf_reg_size 0x200 = two alternating 0x100 halves */
#define TN_BF_HALF 0x100u
#define TN_CQ_DOORBELL 0x20u   /* CQ arm doorbell offset in a UAR page */
#define TN_WQEBB 64u
#define TN_MAX_WQEBB 16u       /* largest WQE the NIC accepts: 1 KiB (ds <= 63) */
#define TN_MAX_SGE 30u
#define TN_MAX_INLINE 512u
#define TN_MAX_QP_WR 32768u
#define TN_MAX_CQE 4194304u
#define TN_INVALID_LKEY 0x100u /* MLX5_INVALID_LKEY: ends a receive WQE's scatter list */

/* mlx5 CQE opcodes (op_own >> 4) and syndromes: mlx5dv.h */
#define TN_CQE_REQ 0
#define TN_CQE_RESP_WR_IMM 1
#define TN_CQE_RESP_SEND 2
#define TN_CQE_RESP_SEND_IMM 3
#define TN_CQE_REQ_ERR 13
#define TN_CQE_RESP_ERR 14
#define TN_CQE_INVALID 15

#define TN_SYN_LOCAL_LENGTH 0x01
#define TN_SYN_LOCAL_QP_OP 0x02
#define TN_SYN_LOCAL_PROT 0x04
#define TN_SYN_WR_FLUSH 0x05
#define TN_SYN_REMOTE_INVAL_REQ 0x12
#define TN_SYN_REMOTE_ACCESS 0x13
#define TN_SYN_REMOTE_OP 0x14
#define TN_SYN_RETRY_EXC 0x15
#define TN_SYN_RNR_RETRY_EXC 0x16

/* QP states: the values of enum ibv_qp_state */
enum { TN_RESET, TN_INIT, TN_RTR, TN_RTS, TN_SQD, TN_SQE, TN_ERR };

/* QP service types (mlx5_ifc qpc.st); a DC target is created through mlx5dv_create_qp, not a
 * QPC, and gets a value of its own. */
enum { TN_ST_RC = 0x0, TN_ST_UC = 0x1, TN_ST_UD = 0x2, TN_ST_DCI = 0x5, TN_ST_DCT = 0x100 };

/* Remote access rights kept with a QP and an MR (ibv_access_flags values). */
#define TN_ACC_LOCAL_WRITE 1
#define TN_ACC_REMOTE_WRITE 2
#define TN_ACC_REMOTE_READ 4
#define TN_ACC_REMOTE_ATOMIC 8

/* ---------------------------------------------------------------------------------------- */
/* Hardware contexts                                                                          */
/* ---------------------------------------------------------------------------------------- */

struct tn_hcq {
	uint32_t cqn;
	uint32_t log_cnt;     /* entries = 1 << log_cnt */
	uint8_t *buf;         /* 64-byte CQEs (host address, or a device address when gpu) */
	int gpu;
	volatile uint32_t *dbrec; /* [0] consumer index (BE), [1] arm doorbell record (BE) */
	int collapsed;        /* every CQE goes to entry 0 (devx cc=1) */
	int ignore_overrun;
	int ev_fd;            /* write end of the completion channel's pipe, or -1 */
	void *ev_cq;          /* the ibv_cq pointer delivered through the channel */
	/* NIC-owned */
	uint32_t pi;          /* CQEs written */
	uint32_t arm_done;    /* arm doorbell record value already answered with an event */
	uint32_t overruns;
};

struct tn_hsrq {
	uint32_t srqn;
	uint32_t pdn;
	uint8_t *buf;
	uint32_t cnt;         /* WQEs (power of two) */
	uint32_t log_stride;  /* bytes per WQE = 1 << log_stride */
	volatile uint32_t *dbrec; /* [0] WQEs posted (BE, 16 bits used) */
	/* NIC-owned */
	uint32_t head;        /* next WQE to take, following next_wqe_index links */
	uint32_t taken;       /* WQEs taken so far */
};

struct tn_peer; /* fabric.c: another process's inbox, mapped */

/* A scatter/gather entry after its key was checked: `ptr` is where the bytes are. */
struct tn_sge {
	uint64_t ptr;
	uint32_t len;
	uint32_t lkey;
	int gpu;
};

struct tn_hqp {
	uint32_t qpn;
	uint32_t st;          /* TN_ST_* */
	uint32_t pdn;
	uint32_t user_index;
	int sig_all;          /* every WQE completes with a CQE (verbs sq_sig_all) */
	volatile int state;   /* TN_RESET..TN_ERR; written by the control path */
	uint8_t *sq;          /* send queue: sq_cnt 64-byte WQEBBs */
	uint32_t sq_cnt;
	int sq_gpu;
	uint8_t *rq;          /* receive queue: rq_cnt WQEs of 1 << rq_log_stride bytes */
	uint32_t rq_cnt;
	uint32_t rq_log_stride;
	struct tn_hsrq *srq;
	volatile uint32_t *dbrec; /* [0] receive counter, [1] send counter (BE) */
	int dbrec_gpu;
	volatile uint64_t *db[2]; /* doorbell words the NIC watches (db[1] may be NULL) */
	struct tn_hcq *scq, *rcq;
	/* connection: set by modify to RTR/RTS before the state is published */
	uint8_t rgid[16];
	uint32_t rqpn;
	uint32_t sq_psn, rq_psn;
	uint32_t qp_access;   /* TN_ACC_REMOTE_* this QP accepts as a responder */
	uint64_t dc_key;      /* DCT: the access key requests must carry */
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
	struct tn_peer *peer; /* resolved at RTR; NULL when the peer was not found */
	volatile int flush_req; /* control path asks the NIC to flush (moved to ERR) */

	/* ---- NIC-owned requester state (WQEBB counters, 32-bit, compared modulo 2^16) ---- */
	uint8_t *shadow;      /* copy of each WQE as it was transmitted (sq_cnt * 64) */
	uint32_t *psn_at;     /* PSN of the WQE starting at each WQEBB */
	uint32_t *len_at;     /* bytes of the WQE starting at each WQEBB */
	uint32_t fetched;     /* WQEBBs copied into the shadow so far */
	uint32_t logged;      /* WQEBBs already written to TESTNIC_LOG */
	uint64_t db_seen[2];
	uint64_t unrung_since_ns; /* the doorbell record is ahead of every doorbell since */
	int unrung_warned;
	uint32_t pi;          /* first WQEBB not posted, from doorbells */
	uint32_t sent;        /* next WQEBB to transmit */
	uint32_t tx_off;      /* bytes of the WQE at `sent` already transmitted */
	uint32_t done;        /* next WQEBB to complete */
	uint32_t next_psn;
	uint32_t since_ack;   /* messages since the last ACK request */
	int err_pending;      /* a local error at `sent` waits for earlier WQEs to complete */
	uint8_t err_synd;
	uint8_t retries, rnr_retries;
	uint64_t resume_ns;   /* after a NAK: retransmit from `sent` at this time */
	uint64_t wait_since_ns; /* outstanding WQEs without progress since */
	uint64_t live_check_ns;
	int in_err;           /* flushed; later doorbells are flushed too */

	/* ---- NIC-owned responder state ---- */
	uint32_t exp_psn;
	int rx_in_msg;        /* inside a multi-packet message */
	int rx_has_wqe;       /* a receive WQE is held for the current message */
	uint32_t rx_wqe_idx;  /* its index (RQ or SRQ) */
	uint32_t rx_nsge;
	struct tn_sge rx_sge[TN_MAX_SGE];
	uint32_t rx_bytes;
	uint32_t rx_synd;     /* a local error found while scattering */
	uint32_t rq_ci;       /* receive WQEs consumed */
};

/* ---------------------------------------------------------------------------------------- */
/* The NIC of this process                                                                     */
/* ---------------------------------------------------------------------------------------- */

#define TN_MAX_QPS 4096
#define TN_MAX_CQS 4096

struct tn_nic {
	pthread_mutex_t lock;
	struct tn_hqp *qps[TN_MAX_QPS];   /* what the NIC thread scans */
	volatile uint32_t nqps;
	struct tn_hqp *by_qpn[TN_MAX_QPS]; /* QPN -> QP fast path (slot qpn % TN_MAX_QPS, first come) */
	struct tn_hcq *evcqs[TN_MAX_CQS]; /* CQs with a completion channel (arm watching) */
	volatile uint32_t nevcqs;
	pthread_t thread;
	int started;
	volatile int stop;
	volatile uint64_t epoch;          /* NIC loop iterations */
	int spin;                         /* TESTNIC_SPIN=1: never sleep when idle */
	uint64_t spin_iters;              /* idle loop iterations before napping */
	uint64_t timeout_ns;              /* TESTNIC_TIMEOUT_MS: no response for this long = error */
	int lenient;                      /* TESTNIC_LENIENT=1: a doorbell naming another QP makes
					   * the register's QPs use their doorbell records */
	/* doorbells the NIC did not act on (NIC thread; printed at exit when any is non-zero) */
	uint64_t db_foreign;              /* named a QP not bound to the register written */
	uint64_t db_backwards;            /* producer index behind the last one */
	uint64_t db_beyond;               /* producer index past what the SQ holds */
	uint64_t db_unrung;               /* QPs whose doorbell record moved with no doorbell */
};
extern struct tn_nic tn_nic;

/* engine.c */
int tn_nic_start(void);                     /* starts the NIC thread once; 0 or errno */
int tn_nic_add_qp(struct tn_hqp *qp);       /* under tn_nic.lock */
void tn_nic_del_qp(struct tn_hqp *qp);      /* under tn_nic.lock; then tn_nic_quiesce */
int tn_nic_add_evcq(struct tn_hcq *cq);
void tn_nic_del_evcq(struct tn_hcq *cq);
void tn_nic_quiesce(void);                  /* waits until the NIC thread cannot hold old pointers */
struct tn_hqp *tn_nic_find_qp(uint32_t qpn);
int tn_hqp_alloc_nic_state(struct tn_hqp *qp); /* shadow SQ and PSN table */
void tn_hqp_free_nic_state(struct tn_hqp *qp);
uint64_t tn_now_ns(void);
uint8_t tn_vendor_syndrome(uint8_t synd); /* what a ConnectX puts beside the syndrome (vendor_err) */
void tn_cqe_write(struct tn_hcq *cq, uint8_t opcode, uint8_t synd, uint32_t qpn, uint16_t wqe_counter,
		  uint32_t byte_cnt, uint32_t imm, uint8_t wqe_opcode, uint32_t srqn_uidx, uint32_t rqpn, int se);

/* responder.c (the NIC thread's inbound half) */
int tn_rx_requests(int budget);             /* packets handled */
int tn_rx_responses(int budget);
void tn_qp_error(struct tn_hqp *qp, uint8_t synd); /* error CQE at `done`, then flush */
void tn_qp_flush(struct tn_hqp *qp);
void tn_complete_upto(struct tn_hqp *qp, uint16_t idx, int inclusive);
void tn_complete_local(struct tn_hqp *qp);

/* WQE parsing (engine.c) */
struct tn_wqe {
	uint8_t opcode, opmod, signaled, se;
	uint16_t idx;
	uint32_t ds, nbb;
	uint32_t imm;         /* as stored in the WQE (BE) */
	uint64_t raddr;
	uint32_t rkey;
	uint32_t len;         /* bytes the WQE moves */
	uint32_t nsge;
	struct tn_sge sge[TN_MAX_SGE];
	const uint8_t *inl;   /* inline data (inside the shadow copy) */
	uint64_t atomic[4];   /* swap/add, compare, swap mask, compare mask (host order) */
	uint32_t asize;       /* atomic operand size: 4 or 8 */
	int remote;           /* needs a response from the peer */
	uint32_t dqpn;        /* DCI: the target DCT, its GID and access key (from the WQE's AV) */
	uint8_t dgid[16];
	uint64_t dc_key;
	uint8_t buf[TN_MAX_WQEBB * TN_WQEBB]; /* the WQE, contiguous (it may wrap in the ring) */
};
/* wqe.c */
uint8_t tn_wqe_parse(const struct tn_hqp *qp, uint32_t pos, struct tn_wqe *w); /* 0 or syndrome */
void tn_wqe_ctrl(const struct tn_hqp *qp, uint32_t pos, uint8_t *opcode, uint16_t *idx, uint32_t *nbb,
		 int *signaled);
int tn_sq_fetch(struct tn_hqp *qp, uint32_t upto); /* copies posted WQEBBs into the shadow */
const char *tn_opcode_name(uint8_t opcode);
uint8_t tn_gather(const struct tn_wqe *w, uint32_t off, uint8_t *dst, uint32_t n);
uint8_t tn_scatter(const struct tn_sge *sge, uint32_t nsge, uint32_t off, const uint8_t *src, uint32_t n);

/* mem.c: memory regions and the NIC's memory access */
struct tn_mr {
	uint32_t key;
	uint32_t pdn;
	uint32_t access;
	uint64_t iova;        /* the address WQEs use */
	uint8_t *addr;        /* where the bytes are (host address or CUDA device address) */
	uint64_t len;
	int gpu;
	int dmabuf_fd;
};
uint32_t tn_mr_key_alloc(void);
int tn_mr_insert(struct tn_mr *mr);
void tn_mr_remove(struct tn_mr *mr);
struct tn_mr *tn_mr_find(uint32_t key);
/* 0, or the syndrome for a bad key, range or access right */
uint8_t tn_mr_check(const struct tn_mr *mr, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t need,
		    uint8_t synd);
void *tn_mr_ptr(const struct tn_mr *mr, uint64_t addr);
int tn_mem_is_gpu(const void *p);
int tn_copy(void *dst, int dst_gpu, const void *src, int src_gpu, size_t n);
int tn_cuda_available(void);

/* log.c: TESTNIC_LOG ground truth, one line per WQE the NIC executed */
void tn_log_init(void);
void tn_log_wqe(const struct tn_hqp *qp, const struct tn_wqe *w, uint8_t status);
void tn_log_flush(void);
/* One "testnic-event pid=P ..." line (a stall, its lift, an injected failure), flushed at once. */
void tn_log_event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int tn_log_on;

/* fabric.c */
int tn_fabric_init(void);
void tn_fabric_fini(void);                  /* removes this process's inbox */
const uint8_t *tn_local_gid(void);
int tn_port_ib(void);                       /* TESTNIC_PORT=ib: an InfiniBand port (LID routing) */
uint16_t tn_local_lid(void);                /* IB: simulated host + 1; RoCE: 0 */
int tn_gid_of_lid(uint16_t lid, uint8_t gid[16]); /* IB: the GID of the port with that LID; 0 or -1 */
uint32_t tn_id_alloc(int kind);             /* host-wide numbers: QPN, CQN, SRQN, PDN, UAR page, mkey */
enum { TN_ID_QPN, TN_ID_CQN, TN_ID_SRQN, TN_ID_PDN, TN_ID_UAR, TN_ID_MKEY, TN_ID_UMEM, TN_ID_KINDS };
int tn_qpn_publish(uint32_t qpn);           /* records this process as the QPN's owner */
void tn_qpn_retire(uint32_t qpn);
unsigned tn_host_of_gid(const uint8_t gid[16]); /* the simulated host behind a GID (0: host 0) */
struct tn_peer *tn_peer_resolve(const uint8_t gid[16], uint32_t qpn); /* NULL if unknown */
int tn_peer_alive(struct tn_peer *p);
pid_t tn_peer_pid(const struct tn_peer *p);

/* packets */
enum {
	TN_P_WRITE = 1, TN_P_SEND, TN_P_READ_REQ, TN_P_ATOMIC_REQ,        /* requests */
	TN_P_ACK, TN_P_NAK, TN_P_READ_RESP, TN_P_ATOMIC_RESP,             /* responses */
};
#define TN_F_FIRST 1
#define TN_F_LAST 2
#define TN_F_IMM 4
#define TN_F_SE 8
#define TN_F_ACKREQ 16
/* NAK kinds (in the syndrome field): retryable ones, then syndromes that end the QP */
#define TN_NAK_RNR 0x100
#define TN_NAK_RETRY 0x200

struct tn_pkt {
	uint64_t seq;         /* ring slot sequence: owned by the ring */
	uint8_t type, flags, opcode, opmod;
	uint16_t wqe_idx;     /* the requester's WQE, echoed in responses */
	uint16_t syndrome;    /* NAK */
	uint32_t dst_qpn, src_qpn;
	uint32_t psn;
	uint32_t len;         /* payload bytes in this packet */
	uint32_t total;       /* bytes of the whole message */
	uint32_t offset;      /* offset of this payload in the message */
	uint64_t raddr;       /* remote address of the message */
	uint32_t rkey;
	uint32_t imm;
	uint64_t atomic[4];
	uint64_t dc_key;      /* DC: the access key of the WQE's address vector */
	uint32_t asize;
	uint8_t src_gid[16];  /* the requester's port, for a DC target's answer */
	uint8_t pad[12];
	uint8_t payload[];
};
#define TN_PKT_HDR 128u
_Static_assert(offsetof(struct tn_pkt, payload) == TN_PKT_HDR, "packet header is 128 bytes");
#define TN_PAYLOAD 8192u

enum { TN_RING_REQ, TN_RING_RESP };
/* Producer side: a free slot of the peer's ring (NULL when full), then commit it. */
struct tn_pkt *tn_ring_reserve(struct tn_peer *p, int ring, uint64_t *pos);
void tn_ring_commit(struct tn_peer *p, int ring, struct tn_pkt *pkt, uint64_t pos);
/* Consumer side: this process's rings. */
struct tn_pkt *tn_ring_peek(int ring);
void tn_ring_pop(int ring);

/* Process-wide numbered objects the devx commands refer to (CQN, SRQN, umem id, UAR page). */
enum { TN_OBJ_CQ, TN_OBJ_SRQ, TN_OBJ_UMEM, TN_OBJ_UAR, TN_OBJ_KINDS };
int tn_obj_put(int kind, uint32_t id, void *p);
void *tn_obj_get(int kind, uint32_t id);
void tn_obj_del(int kind, uint32_t id);
/* Whether pred(obj, arg) holds for any live object of `kind`. */
int tn_obj_any(int kind, int (*pred)(const void *obj, const void *arg), const void *arg);

/* fault.c: TESTNIC_STALL, TESTNIC_STALL_PEER and TESTNIC_FAIL (docs/TESTNIC.md, "Stalls and
 * injected failures"). NIC thread only, after tn_fault_init (tn_nic_start). */
enum { TN_FAULT_OFF, TN_FAULT_ARMED, TN_FAULT_ACTIVE, TN_FAULT_DONE };
struct tn_fault {
	volatile int state;   /* TN_FAULT_*; a failure goes ARMED -> DONE, a stall ARMED -> ACTIVE -> DONE */
	uint64_t n;           /* stall: WQEs that run first; fail: the WQE that fails (from 1) */
	uint64_t ms;          /* stall: how long it holds (0 = for good) */
	uint32_t qpn;         /* only this QP (0: every QP of the process) */
	int peer_host;        /* only QPs whose peer is on this simulated host (-1: any) */
	uint64_t count;       /* matching WQEs taken so far */
	uint64_t since_ns, until_ns;
	uint32_t at_qpn;      /* the QP and WQE that met it */
	uint16_t at_idx;
	char text[64];        /* the variable's value, for the lines */
};
extern struct tn_fault tn_stall, tn_fail;
void tn_fault_init(void);
/* Before WQE `w` at qp->sent is transmitted (none of it sent yet): 1 when the stall holds it (and
 * starts the stall when `w` is the (N+1)-th; `fresh`: taken for the first time, no retransmission). */
int tn_stall_holds(struct tn_hqp *qp, const struct tn_wqe *w, int fresh);
int tn_stall_holding(const struct tn_hqp *qp); /* the stall holds this QP now (its timers are off) */
void tn_stall_tick(uint64_t now);           /* lifts the stall when its time is up */
/* Counts a WQE taken for the first time; the syndrome TESTNIC_FAIL gives it (0: none). */
uint8_t tn_fault_take(struct tn_hqp *qp, const struct tn_wqe *w, uint8_t synd);
int tn_fault_ack_now(const struct tn_hqp *qp, const struct tn_wqe *w); /* last WQE before a fault */

/* util */
void tn_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int tn_refuse(const char *call); /* prints "testnic: CALL is not supported", returns EOPNOTSUPP */
uint32_t tn_ilog2_up(uint32_t v);

static inline uint64_t tn_load64(volatile const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline uint32_t tn_be32_load(volatile const uint32_t *p)
{
	return be32toh(__atomic_load_n(p, __ATOMIC_ACQUIRE));
}

#endif
