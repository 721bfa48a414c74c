/* The NIC thread: one per process, started when the first QP reaches RTR.
 *
 * Each loop iteration it
 * 1. reads every QP's doorbell words (the 8-byte register on its UAR page, both BlueFlame halves)
 *    and turns a new value into a producer index: the ctrl word of the last posted WQE (libmlx5:
 *    idx + its WQEBBs) or NVSHMEM's synthetic {pi << 8, qpn << 8} (ds = 0: idx is the producer
 *    index). A word names its QP, as on hardware: a QP runs on a doorbell naming it, written to
 *    a register the QP is bound to; a word naming any other QP rings nothing here and is counted
 *    (TESTNIC_LENIENT=1: the register's QP then uses its doorbell record, the old behaviour);
 * 2. transmits the newly posted WQEs of QPs in RTS (fetching them into the shadow copy, parsing,
 *    sending request packets to the peer's inbox);
 * 3. handles the response and request rings (responder.c);
 * 4. answers CQ arm requests with a completion-channel event;
 * 5. every millisecond: retransmits after a NAK, notices dead or silent peers (error CQE).
 * When nothing happened for a while it yields, then naps (TESTNIC_SPIN=1: never).
 * TESTNIC_STALL / TESTNIC_FAIL act where a WQE is taken for execution (fault.c).
 */
#include "nic.h"

#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

struct tn_nic tn_nic = {.lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP};

uint64_t tn_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tn_warn(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	fprintf(stderr, "testnic: %s\n", buf);
}

int tn_refuse(const char *call)
{
	tn_warn("%s is not supported by the software NIC", call);
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

uint32_t tn_ilog2_up(uint32_t v)
{
	uint32_t l = 0;
	while ((1u << l) < v)
		l++;
	return l;
}

/* ---- the lists the thread scans ---- */

int tn_nic_add_qp(struct tn_hqp *qp)
{
	uint32_t n = tn_nic.nqps;
	for (uint32_t i = 0; i < n; i++)
		if (tn_nic.qps[i] == qp)
			return 0;
	if (n == TN_MAX_QPS)
		return ENOMEM;
	tn_nic.qps[n] = qp;
	__atomic_store_n(&tn_nic.nqps, n + 1, __ATOMIC_RELEASE);
	struct tn_hqp **slot = &tn_nic.by_qpn[qp->qpn % TN_MAX_QPS];
	if (!*slot)
		__atomic_store_n(slot, qp, __ATOMIC_RELEASE);
	return 0;
}

void tn_nic_del_qp(struct tn_hqp *qp)
{
	uint32_t n = tn_nic.nqps;
	struct tn_hqp **slot = &tn_nic.by_qpn[qp->qpn % TN_MAX_QPS];
	if (*slot == qp)
		__atomic_store_n(slot, NULL, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < n; i++) {
		if (tn_nic.qps[i] != qp)
			continue;
		__atomic_store_n(&tn_nic.qps[i], tn_nic.qps[n - 1], __ATOMIC_RELEASE);
		__atomic_store_n(&tn_nic.nqps, n - 1, __ATOMIC_RELEASE);
		return;
	}
}

int tn_nic_add_evcq(struct tn_hcq *cq)
{
	uint32_t n = tn_nic.nevcqs;
	if (n == TN_MAX_CQS)
		return ENOMEM;
	tn_nic.evcqs[n] = cq;
	__atomic_store_n(&tn_nic.nevcqs, n + 1, __ATOMIC_RELEASE);
	return 0;
}

void tn_nic_del_evcq(struct tn_hcq *cq)
{
	uint32_t n = tn_nic.nevcqs;
	for (uint32_t i = 0; i < n; i++) {
		if (tn_nic.evcqs[i] != cq)
			continue;
		__atomic_store_n(&tn_nic.evcqs[i], tn_nic.evcqs[n - 1], __ATOMIC_RELEASE);
		__atomic_store_n(&tn_nic.nevcqs, n - 1, __ATOMIC_RELEASE);
		return;
	}
}

void tn_nic_quiesce(void)
{
	if (!tn_nic.started || pthread_equal(pthread_self(), tn_nic.thread))
		return;
	uint64_t e = __atomic_load_n(&tn_nic.epoch, __ATOMIC_ACQUIRE);
	while (__atomic_load_n(&tn_nic.epoch, __ATOMIC_ACQUIRE) < e + 2 && !tn_nic.stop)
		sched_yield();
}

struct tn_hqp *tn_nic_find_qp(uint32_t qpn)
{
	struct tn_hqp *q = __atomic_load_n(&tn_nic.by_qpn[qpn % TN_MAX_QPS], __ATOMIC_ACQUIRE);
	if (q && q->qpn == qpn)
		return q;
	uint32_t n = __atomic_load_n(&tn_nic.nqps, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		q = __atomic_load_n(&tn_nic.qps[i], __ATOMIC_ACQUIRE);
		if (q && q->qpn == qpn)
			return q;
	}
	return NULL;
}

int tn_hqp_alloc_nic_state(struct tn_hqp *qp)
{
	if (!qp->sq_cnt)
		return 0;
	qp->shadow = calloc(qp->sq_cnt, TN_WQEBB);
	qp->psn_at = calloc(qp->sq_cnt, sizeof(uint32_t));
	qp->len_at = calloc(qp->sq_cnt, sizeof(uint32_t));
	if (!qp->shadow || !qp->psn_at || !qp->len_at) {
		tn_hqp_free_nic_state(qp);
		return ENOMEM;
	}
	return 0;
}

void tn_hqp_free_nic_state(struct tn_hqp *qp)
{
	free(qp->shadow);
	free(qp->psn_at);
	free(qp->len_at);
	qp->shadow = NULL;
	qp->psn_at = qp->len_at = NULL;
}

/* ---- doorbells ---- */

static uint32_t dbr_send(const struct tn_hqp *qp)
{
	if (!qp->dbrec)
		return qp->pi & 0xffff;
	if (qp->dbrec_gpu) {
		uint32_t v = 0;
		if (tn_copy(&v, 0, (const void *)&qp->dbrec[1], 1, 4))
			return qp->pi & 0xffff;
		return be32toh(v) & 0xffff;
	}
	return tn_be32_load(&qp->dbrec[1]) & 0xffff;
}

/* Moves the producer index to the 16-bit index `pi16` if that is ahead and plausible. */
static void advance_pi(struct tn_hqp *qp, uint32_t pi16)
{
	uint32_t d = (pi16 - qp->pi) & 0xffff;
	if (!d)
		return;
	if (d > 0x8000) {
		if (!tn_nic.db_backwards++)
			tn_warn("QP 0x%x: doorbell index 0x%x is behind the last one (0x%x): ignored (counted)",
				qp->qpn, pi16, qp->pi & 0xffff);
		return;
	}
	uint32_t npi = qp->pi + d;
	if (npi - qp->done > qp->sq_cnt) {
		tn_nic.db_beyond++;
		tn_warn("QP 0x%x: doorbell index 0x%x is %u WQEBBs past the last completion (SQ holds %u): ignored",
			qp->qpn, pi16, npi - qp->done, qp->sq_cnt);
		return;
	}
	qp->pi = npi;
}

/* Whether QP `qpn` of this process watches the doorbell word `db` (is bound to that register). */
static int bound_to(uint32_t qpn, volatile const uint64_t *db)
{
	struct tn_hqp *o = tn_nic_find_qp(qpn);
	return o && (o->db[0] == db || o->db[1] == db);
}

static int check_doorbells(struct tn_hqp *qp)
{
	int rung = 0;
	for (int k = 0; k < 2; k++) {
		if (!qp->db[k])
			continue;
		uint64_t v = tn_load64(qp->db[k]);
		if (v == qp->db_seen[k])
			continue;
		qp->db_seen[k] = v;
		rung = 1;
		uint32_t w0 = be32toh((uint32_t)v), w1 = be32toh((uint32_t)(v >> 32));
		uint32_t idx = (w0 >> 8) & 0xffff, ds = w1 & 0x3f;
		if ((w1 >> 8) != qp->qpn) {
			/* Another QP's doorbell. Hardware rings the QP it names (which, bound to this
			 * register, watches this word too and sees it itself); this QP does not run. */
			if (tn_nic.lenient)
				advance_pi(qp, dbr_send(qp));
			else if (k == 0 && !bound_to(w1 >> 8, qp->db[k]))
				tn_nic.db_foreign++;
		} else if (!ds) {
			advance_pi(qp, idx); /* GPU style: idx is the next free WQEBB */
		} else {
			advance_pi(qp, idx + (ds * 16 + TN_WQEBB - 1) / TN_WQEBB); /* CPU: last WQE's ctrl */
		}
	}
	return rung;
}

/* ---- transmit ---- */

static void fill_hdr(struct tn_pkt *p, const struct tn_hqp *qp, const struct tn_wqe *w, uint8_t type)
{
	p->type = type;
	p->flags = 0;
	p->opcode = w->opcode;
	p->opmod = w->opmod;
	p->wqe_idx = w->idx;
	p->syndrome = 0;
	p->dst_qpn = qp->rqpn;
	p->src_qpn = qp->qpn;
	memcpy(p->src_gid, tn_local_gid(), 16);
	p->dc_key = w->dc_key;
	p->psn = qp->next_psn & 0xffffff;
	p->total = w->len;
	p->raddr = w->raddr;
	p->rkey = w->rkey;
	p->imm = w->imm;
	p->len = 0;
	p->offset = 0;
}

/* Sends (the rest of) one WQE. Returns 1 when it is out, 0 when the peer's ring is full, or a
 * negative syndrome for a local error found while gathering. */
static int tx_one(struct tn_hqp *qp, const struct tn_wqe *w, int last_in_batch)
{
	uint64_t pos;
	struct tn_pkt *p;
	int ackreq = w->signaled || last_in_batch || qp->since_ack >= 15 ||
		     ((tn_stall.state | tn_fail.state) && tn_fault_ack_now(qp, w));
	switch (w->opcode) {
	case MLX5_OPCODE_RDMA_READ:
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
	case MLX5_OPCODE_ATOMIC_MASKED_CS:
	case MLX5_OPCODE_ATOMIC_MASKED_FA:
		p = tn_ring_reserve(qp->peer, TN_RING_REQ, &pos);
		if (!p)
			return 0;
		fill_hdr(p, qp, w, w->opcode == MLX5_OPCODE_RDMA_READ ? TN_P_READ_REQ : TN_P_ATOMIC_REQ);
		p->flags = TN_F_FIRST | TN_F_LAST;
		memcpy(p->atomic, w->atomic, sizeof p->atomic);
		p->asize = w->asize;
		tn_ring_commit(qp->peer, TN_RING_REQ, p, pos);
		qp->since_ack = 0;
		return 1;
	default:
		break;
	}
	int send = w->opcode == MLX5_OPCODE_SEND || w->opcode == MLX5_OPCODE_SEND_IMM ||
		   w->opcode == MLX5_OPCODE_SEND_INVAL;
	do {
		uint32_t off = qp->tx_off, n = w->len - off;
		if (n > TN_PAYLOAD)
			n = TN_PAYLOAD;
		p = tn_ring_reserve(qp->peer, TN_RING_REQ, &pos);
		if (!p)
			return 0;
		fill_hdr(p, qp, w, send ? TN_P_SEND : TN_P_WRITE);
		p->len = n;
		p->offset = off;
		uint8_t s = tn_gather(w, off, p->payload, n);
		if (s) {
			/* Nothing valid to send: turn the slot into a zero-length packet the peer drops. */
			p->type = 0;
			tn_ring_commit(qp->peer, TN_RING_REQ, p, pos);
			return -(int)s;
		}
		if (off == 0)
			p->flags |= TN_F_FIRST;
		if (off + n == w->len) {
			p->flags |= TN_F_LAST;
			if (ackreq)
				p->flags |= TN_F_ACKREQ;
			if (w->opcode == MLX5_OPCODE_SEND_IMM || w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM)
				p->flags |= TN_F_IMM;
			if (w->se)
				p->flags |= TN_F_SE;
		}
		tn_ring_commit(qp->peer, TN_RING_REQ, p, pos);
		qp->tx_off = off + n;
	} while (qp->tx_off < w->len);
	qp->since_ack = ackreq ? 0 : qp->since_ack + 1;
	return 1;
}

/* A DCI talks to one DC target at a time, like hardware: a WQE for another target waits until
 * every WQE before it completed, then the DCI "connects" to the new one. 1 when connected. */
static int dc_connect(struct tn_hqp *qp, const struct tn_wqe *w)
{
	if (qp->peer && qp->rqpn == w->dqpn && !memcmp(qp->rgid, w->dgid, 16))
		return 1;
	if (qp->done != qp->sent)
		return 0;
	qp->rqpn = w->dqpn;
	memcpy(qp->rgid, w->dgid, 16);
	qp->peer = tn_peer_resolve(w->dgid, w->dqpn);
	return 1;
}

static int transmit(struct tn_hqp *qp, uint64_t now)
{
	int work = 0;
	if (qp->resume_ns) {
		if (now < qp->resume_ns)
			return 0;
		qp->resume_ns = 0;
	}
	if (qp->err_pending)
		return 0;
	if (tn_sq_fetch(qp, qp->pi)) {
		qp->err_pending = 1;
		qp->err_synd = TN_SYN_LOCAL_PROT;
		tn_complete_local(qp);
		return 1;
	}
	struct tn_wqe w;
	uint32_t mask = qp->sq_cnt - 1;
	while (qp->sent != qp->pi) {
		uint8_t s = tn_wqe_parse(qp, qp->sent, &w);
		int fresh = qp->logged == qp->sent; /* taken for the first time (no retransmission) */
		/* TESTNIC_STALL: a WQE none of which is out yet waits while the stall holds its QP. */
		if (qp->tx_off == 0 && (tn_stall.state == TN_FAULT_ARMED || tn_stall.state == TN_FAULT_ACTIVE) &&
		    tn_stall_holds(qp, &w, fresh))
			break;
		if (fresh) {
			if (tn_stall.state == TN_FAULT_ARMED || tn_fail.state == TN_FAULT_ARMED) {
				uint8_t f = tn_fault_take(qp, &w, s); /* TESTNIC_FAIL: retry exceeded */
				if (f)
					s = f;
			}
			tn_log_wqe(qp, &w, s);
			qp->logged += w.nbb;
		}
		if (s) {
			qp->err_pending = 1;
			qp->err_synd = s;
			break;
		}
		if (qp->tx_off == 0) {
			qp->psn_at[qp->sent & mask] = qp->next_psn;
			qp->len_at[qp->sent & mask] = w.len;
		}
		if (w.remote && qp->st == TN_ST_DCI && !dc_connect(qp, &w))
			break; /* still draining the previous target */
		if (w.remote) {
			if (!qp->peer) {
				qp->err_pending = 1;
				qp->err_synd = TN_SYN_RETRY_EXC;
				break;
			}
			int r = tx_one(qp, &w, qp->sent + w.nbb == qp->pi);
			if (r == 0)
				break; /* the peer's ring is full: try again next time */
			if (r < 0) {
				qp->err_pending = 1;
				qp->err_synd = (uint8_t)-r;
				break;
			}
			qp->next_psn++;
			if (!qp->wait_since_ns)
				qp->wait_since_ns = tn_now_ns();
		}
		qp->tx_off = 0;
		qp->sent += w.nbb;
		work = 1;
	}
	tn_complete_local(qp);
	return work || qp->err_pending;
}

/* ---- completion channels ---- */

static void check_arm(struct tn_hcq *cq)
{
	uint32_t arm = tn_be32_load(&cq->dbrec[1]);
	if (arm == cq->arm_done || cq->ev_fd < 0)
		return;
	/* Armed with consumer index ci: an event is due once a CQE exists at or beyond it. */
	uint32_t ci = arm & 0xffffff;
	if (((cq->pi - ci) & 0xffffff) == 0 || ((cq->pi - ci) & 0xffffff) > (1u << 23))
		return;
	cq->arm_done = arm;
	void *p = cq->ev_cq;
	if (write(cq->ev_fd, &p, sizeof p) != sizeof p)
		tn_warn("CQ 0x%x: completion event lost (%s)", cq->cqn, strerror(errno));
}

/* ---- timers ---- */

static uint64_t retry_wait_ns(const struct tn_hqp *qp)
{
	/* 4.096 us << timeout, between 1 ms and 500 ms */
	uint64_t ns = 4096ull << (qp->timeout < 32 ? qp->timeout : 31);
	if (ns < 1000000)
		ns = 1000000;
	if (ns > 500000000)
		ns = 500000000;
	return ns;
}

/* A doorbell record ahead of every doorbell for 1 s: WQEs posted without a doorbell that reached
 * the NIC. They do not run (as on hardware); said once per QP, counted. */
static void check_unrung(struct tn_hqp *qp, uint64_t now)
{
	if (tn_nic.lenient || !qp->dbrec || qp->dbrec_gpu || !qp->sq_cnt || qp->state != TN_RTS)
		return;
	uint32_t rec = tn_be32_load(&qp->dbrec[1]) & 0xffff;
	uint32_t d = (rec - qp->pi) & 0xffff;
	if (!d || d > qp->sq_cnt) {
		qp->unrung_since_ns = 0;
		return;
	}
	if (!qp->unrung_since_ns) {
		qp->unrung_since_ns = now;
		return;
	}
	if (now - qp->unrung_since_ns < 1000000000ull || qp->unrung_warned)
		return;
	qp->unrung_warned = 1;
	tn_nic.db_unrung++;
	tn_warn("QP 0x%x: doorbell record at 0x%x but no doorbell naming the QP rang past 0x%x for 1 s: those "
		"WQEs do not run (a lost doorbell; TESTNIC_LENIENT=1 runs them from the record)",
		qp->qpn, rec, qp->pi & 0xffff);
}

static void timers(struct tn_hqp *qp, uint64_t now)
{
	check_unrung(qp, now);
	if (tn_stall.state == TN_FAULT_ACTIVE && tn_stall_holding(qp)) {
		/* TESTNIC_STALL holds this QP: it transmits nothing, so nothing times out; the wait
		 * starts again when the stall lifts. */
		qp->wait_since_ns = 0;
		return;
	}
	/* Waiting = posted WQEs not completed, outside an RNR/retry pause (a peer ring that stays
	 * full counts as waiting too). */
	if (qp->done == qp->pi || qp->resume_ns) {
		if (qp->done == qp->pi)
			qp->wait_since_ns = 0;
		return;
	}
	if (!qp->wait_since_ns) {
		qp->wait_since_ns = now;
		return;
	}
	if (now - qp->wait_since_ns > tn_nic.timeout_ns) {
		tn_warn("QP 0x%x: no response from QP 0x%x (pid %d) for %llu ms: transport retry exceeded",
			qp->qpn, qp->rqpn, (int)tn_peer_pid(qp->peer),
			(unsigned long long)((now - qp->wait_since_ns) / 1000000));
		tn_qp_error(qp, TN_SYN_RETRY_EXC);
		return;
	}
	if (now - qp->live_check_ns < 100000000ull)
		return;
	qp->live_check_ns = now;
	if (now - qp->wait_since_ns > retry_wait_ns(qp) && !tn_peer_alive(qp->peer)) {
		tn_warn("QP 0x%x: peer process %d of QP 0x%x is gone: transport retry exceeded", qp->qpn,
			(int)tn_peer_pid(qp->peer), qp->rqpn);
		tn_qp_error(qp, TN_SYN_RETRY_EXC);
	}
}

/* ---- the loop ---- */

static int service_qp(struct tn_hqp *qp, uint64_t now)
{
	int work = check_doorbells(qp);
	if (qp->flush_req) {
		qp->flush_req = 0;
		if (!qp->in_err)
			tn_qp_flush(qp);
	}
	if (qp->in_err) {
		if (qp->done != qp->pi || (qp->rq_cnt && !qp->srq && qp->dbrec && !qp->dbrec_gpu &&
					   (tn_be32_load(&qp->dbrec[0]) & 0xffff) != (qp->rq_ci & 0xffff)))
			tn_qp_flush(qp);
		return work;
	}
	if (qp->state == TN_RTS && qp->sent != qp->pi)
		work |= transmit(qp, now);
	return work;
}

static void *nic_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "testnic");
	prctl(PR_SET_TIMERSLACK, 1000UL);
	uint64_t idle = 0, last_timer = 0, ticks = 0;
	while (!tn_nic.stop) {
		int work = 0;
		uint64_t now = 0;
		if (tn_stall.state == TN_FAULT_ACTIVE) {
			now = tn_now_ns();
			tn_stall_tick(now); /* lifts it when due */
		}
		uint32_t n = __atomic_load_n(&tn_nic.nqps, __ATOMIC_ACQUIRE);
		for (uint32_t i = 0; i < n; i++) {
			struct tn_hqp *qp = __atomic_load_n(&tn_nic.qps[i], __ATOMIC_ACQUIRE);
			if (!qp || qp->state < TN_RTR)
				continue;
			if (qp->resume_ns && !now)
				now = tn_now_ns();
			work |= service_qp(qp, now);
		}
		work |= tn_rx_responses(64);
		work |= tn_rx_requests(64);
		uint32_t ne = __atomic_load_n(&tn_nic.nevcqs, __ATOMIC_ACQUIRE);
		for (uint32_t i = 0; i < ne; i++)
			check_arm(__atomic_load_n(&tn_nic.evcqs[i], __ATOMIC_ACQUIRE));
		__atomic_store_n(&tn_nic.epoch, tn_nic.epoch + 1, __ATOMIC_RELEASE);
		if (work)
			idle = 0;
		else
			idle++;
		if ((++ticks & 1023) == 0 || idle < 2) {
			now = tn_now_ns();
			if (now - last_timer > 1000000) {
				last_timer = now;
				for (uint32_t i = 0; i < n; i++) {
					struct tn_hqp *qp = __atomic_load_n(&tn_nic.qps[i], __ATOMIC_ACQUIRE);
					if (qp && qp->state >= TN_RTR && !qp->in_err)
						timers(qp, now);
				}
			}
		}
		if (work)
			continue;
		if (tn_nic.spin || idle < tn_nic.spin_iters) {
			__builtin_ia32_pause();
		} else {
			if (idle == tn_nic.spin_iters)
				tn_log_flush();
			struct timespec ts = {0, 10000};
			nanosleep(&ts, NULL);
		}
	}
	tn_log_flush();
	return NULL;
}

static void nic_stop_thread(void);

/* At exit (or when the library is unloaded): stop the thread, flush the log, remove the inbox. */
__attribute__((destructor)) static void nic_stop(void)
{
	nic_stop_thread();
	tn_fabric_fini();
}

static void nic_stop_thread(void)
{
	if (!tn_nic.started)
		return;
	tn_nic.stop = 1;
	pthread_join(tn_nic.thread, NULL);
	tn_nic.started = 0;
	if (tn_nic.db_foreign || tn_nic.db_backwards || tn_nic.db_beyond || tn_nic.db_unrung)
		tn_warn("pid %d doorbells not acted on: foreign=%llu backwards=%llu beyond_sq=%llu unrung_qps=%llu",
			(int)getpid(), (unsigned long long)tn_nic.db_foreign,
			(unsigned long long)tn_nic.db_backwards, (unsigned long long)tn_nic.db_beyond,
			(unsigned long long)tn_nic.db_unrung);
}

int tn_nic_start(void)
{
	pthread_mutex_lock(&tn_nic.lock);
	int err = 0;
	if (!tn_nic.started) {
		const char *s = getenv("TESTNIC_SPIN");
		tn_nic.spin = s && *s == '1';
		/* Idle: spin (with pause) this many loop iterations, then nap 10 us at a time. With few
		 * CPUs the spinning would starve the very threads the NIC waits for. */
		tn_nic.spin_iters = sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? 1000000 : 300;
		s = getenv("TESTNIC_TIMEOUT_MS");
		long ms = s ? strtol(s, NULL, 10) : 0;
		tn_nic.timeout_ns = (uint64_t)(ms > 0 ? ms : 10000) * 1000000ull;
		s = getenv("TESTNIC_LENIENT");
		tn_nic.lenient = s && *s == '1';
		tn_log_init();
		tn_fault_init();
		err = pthread_create(&tn_nic.thread, NULL, nic_main, NULL);
		if (!err) {
			tn_nic.started = 1;
		} else {
			tn_warn("cannot start the NIC thread: %s", strerror(err));
		}
	}
	pthread_mutex_unlock(&tn_nic.lock);
	return err;
}
