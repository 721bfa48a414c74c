/* Faults injected where the NIC takes a send WQE for execution (engine.c, transmit), so that hangs
 * and errors can be tested on real programs (docs/TESTNIC.md, "Stalls and injected failures"):
 *
 *   TESTNIC_STALL=N:MS[:QPN]  the process's first N send WQEs run; the (N+1)-th and every later
 *                             one stay posted, untransmitted, for MS milliseconds (0: for good),
 *                             then run and complete normally. With QPN only that QP's WQEs count
 *                             and only that QP stops.
 *   TESTNIC_STALL_PEER=H      the stall counts and stops only QPs whose peer is on simulated host H.
 *   TESTNIC_FAIL=N[:QPN]      the process's N-th send WQE completes with "transport retry exceeded"
 *                             (syndrome 0x15, vendor syndrome 0x81, as a ConnectX reports it) and
 *                             its QP goes to error: every later and outstanding WQE of the QP, and
 *                             its posted receives, complete with WR_FLUSH_ERR.
 *
 * What counts: every WQE the NIC takes from a matching send queue for the first time, in the
 * NIC's execution order (signaled or not, every opcode, NOPs included; retransmissions after a NAK
 * are not counted again) - exactly the lines TESTNIC_LOG writes for the process. A stall holds
 * only the send side: the stalled process still receives and still answers its peers as a
 * responder (ACKs, READ and atomic responses), and while it holds a QP that QP's transport timers
 * (silent peer, dead peer) are off: nothing was transmitted, so nothing can time out.
 *
 * Start, lift and failure each print one line on stderr and write one `testnic-event` line into
 * the WQE log (flushed at once), both with the NIC's CLOCK_MONOTONIC time.
 */
#include "nic.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct tn_fault tn_stall, tn_fail;

/* A number of the variable's text at *p (decimal, or hex with 0x); 0 on success. */
static int number(const char **p, uint64_t *v)
{
	char *end;
	errno = 0;
	if (!isdigit((unsigned char)**p))
		return -1;
	unsigned long long n = strtoull(*p, &end, 0);
	if (errno || end == *p)
		return -1;
	*v = n;
	*p = end;
	return 0;
}

static void parse_stall(const char *s)
{
	const char *p = s;
	uint64_t n, ms, qpn = 0;
	if (number(&p, &n) || *p++ != ':' || number(&p, &ms) || (*p == ':' && (++p, number(&p, &qpn))) || *p ||
	    qpn > 0xffffff || ms > 86400000ull * 365) {
		tn_warn("TESTNIC_STALL=%s is not N:MS or N:MS:QPN (N work requests run, then the rest wait MS "
			"milliseconds, 0 = for good; QPN limits it to one QP): ignored",
			s);
		return;
	}
	tn_stall.n = n;
	tn_stall.ms = ms;
	tn_stall.qpn = (uint32_t)qpn;
	snprintf(tn_stall.text, sizeof tn_stall.text, "%s", s);
	tn_stall.state = TN_FAULT_ARMED;
}

static void parse_fail(const char *s)
{
	const char *p = s;
	uint64_t n, qpn = 0;
	if (number(&p, &n) || !n || (*p == ':' && (++p, number(&p, &qpn))) || *p || qpn > 0xffffff) {
		tn_warn("TESTNIC_FAIL=%s is not N or N:QPN (the N-th work request, from 1, completes with "
			"transport retry exceeded; QPN limits it to one QP): ignored",
			s);
		return;
	}
	tn_fail.n = n;
	tn_fail.qpn = (uint32_t)qpn;
	snprintf(tn_fail.text, sizeof tn_fail.text, "%s", s);
	tn_fail.state = TN_FAULT_ARMED;
}

void tn_fault_init(void)
{
	tn_stall.peer_host = tn_fail.peer_host = -1;
	const char *s = getenv("TESTNIC_STALL");
	if (s && *s)
		parse_stall(s);
	s = getenv("TESTNIC_STALL_PEER");
	if (s && *s) {
		const char *p = s;
		uint64_t h;
		if (number(&p, &h) || *p || h > 255)
			tn_warn("TESTNIC_STALL_PEER=%s is not a simulated host number 0..255 (TESTNIC_HOST of the "
				"peer): ignored",
				s);
		else if (tn_stall.state != TN_FAULT_ARMED)
			tn_warn("TESTNIC_STALL_PEER=%s without TESTNIC_STALL=N:MS: ignored", s);
		else
			tn_stall.peer_host = (int)h;
	}
	s = getenv("TESTNIC_FAIL");
	if (s && *s)
		parse_fail(s);
}

/* Whether the fault applies to QP `qp` (sending `w`, when given: a DCI's peer is in its WQE). */
static int matches(const struct tn_fault *f, const struct tn_hqp *qp, const struct tn_wqe *w)
{
	if (f->qpn && f->qpn != qp->qpn)
		return 0;
	if (f->peer_host >= 0) {
		const uint8_t *gid = (w && qp->st == TN_ST_DCI) ? w->dgid : qp->rgid;
		if ((int)tn_host_of_gid(gid) != f->peer_host)
			return 0;
	}
	return 1;
}

static void stamp(char *buf, size_t n, uint64_t ns)
{
	snprintf(buf, n, "%llu.%09llu", (unsigned long long)(ns / 1000000000ull),
		 (unsigned long long)(ns % 1000000000ull));
}

int tn_stall_holds(struct tn_hqp *qp, const struct tn_wqe *w, int fresh)
{
	struct tn_fault *f = &tn_stall;
	if (!matches(f, qp, w))
		return 0;
	if (f->state == TN_FAULT_ACTIVE)
		return 1;
	if (f->state != TN_FAULT_ARMED || !fresh || f->count < f->n)
		return 0;
	uint64_t now = tn_now_ns();
	f->since_ns = now;
	f->until_ns = f->ms ? now + f->ms * 1000000ull : 0;
	f->at_qpn = qp->qpn;
	f->at_idx = w->idx;
	__atomic_store_n(&f->state, TN_FAULT_ACTIVE, __ATOMIC_RELEASE);
	char t[32], len[32];
	stamp(t, sizeof t, now);
	if (f->ms)
		snprintf(len, sizeof len, "for %llu ms", (unsigned long long)f->ms);
	else
		snprintf(len, sizeof len, "for good");
	tn_warn("pid %d stall: QP 0x%x holds WR %llu (idx %u, %s) after %llu executed, %s (TESTNIC_STALL=%s) t=%s",
		(int)getpid(), qp->qpn, (unsigned long long)f->n + 1, w->idx, tn_opcode_name(w->opcode),
		(unsigned long long)f->n, len, f->text, t);
	tn_log_event("event=stall qpn=0x%06x idx=%u wr=%llu executed=%llu ms=%llu t_ns=%llu", qp->qpn, w->idx,
		     (unsigned long long)f->n + 1, (unsigned long long)f->count, (unsigned long long)f->ms,
		     (unsigned long long)now);
	return 1;
}

int tn_stall_holding(const struct tn_hqp *qp)
{
	return tn_stall.state == TN_FAULT_ACTIVE && matches(&tn_stall, qp, NULL);
}

void tn_stall_tick(uint64_t now)
{
	struct tn_fault *f = &tn_stall;
	if (f->state != TN_FAULT_ACTIVE || !f->until_ns || now < f->until_ns)
		return;
	__atomic_store_n(&f->state, TN_FAULT_DONE, __ATOMIC_RELEASE);
	char t[32];
	stamp(t, sizeof t, now);
	unsigned long long held = (now - f->since_ns) / 1000000ull;
	tn_warn("pid %d stall lifted: QP 0x%x resumes at WR %llu (idx %u) after %llu ms (TESTNIC_STALL=%s) t=%s",
		(int)getpid(), f->at_qpn, (unsigned long long)f->n + 1, f->at_idx, held, f->text, t);
	tn_log_event("event=lift qpn=0x%06x idx=%u wr=%llu executed=%llu stalled_ms=%llu t_ns=%llu", f->at_qpn,
		     f->at_idx, (unsigned long long)f->n + 1, (unsigned long long)f->count, held,
		     (unsigned long long)now);
}

uint8_t tn_fault_take(struct tn_hqp *qp, const struct tn_wqe *w, uint8_t synd)
{
	if (tn_stall.state == TN_FAULT_ARMED && matches(&tn_stall, qp, w))
		tn_stall.count++;
	struct tn_fault *f = &tn_fail;
	if (f->state != TN_FAULT_ARMED || !matches(f, qp, w) || ++f->count < f->n)
		return 0;
	f->state = TN_FAULT_DONE;
	f->at_qpn = qp->qpn;
	f->at_idx = w->idx;
	uint64_t now = tn_now_ns();
	char t[32];
	stamp(t, sizeof t, now);
	if (synd) {
		tn_warn("pid %d fail: QP 0x%x WR %llu (idx %u, %s) already fails with syndrome 0x%02x "
			"(TESTNIC_FAIL=%s) t=%s",
			(int)getpid(), qp->qpn, (unsigned long long)f->n, w->idx, tn_opcode_name(w->opcode), synd,
			f->text, t);
		return 0;
	}
	tn_warn("pid %d fail: QP 0x%x WR %llu (idx %u, %s) completes with transport retry exceeded (syndrome 0x%02x, "
		"vendor 0x%02x), then the QP goes to error (TESTNIC_FAIL=%s) t=%s",
		(int)getpid(), qp->qpn, (unsigned long long)f->n, w->idx, tn_opcode_name(w->opcode),
		TN_SYN_RETRY_EXC, tn_vendor_syndrome(TN_SYN_RETRY_EXC), f->text, t);
	tn_log_event("event=fail qpn=0x%06x idx=%u wr=%llu op=%s status=0x%02x t_ns=%llu", qp->qpn, w->idx,
		     (unsigned long long)f->n, tn_opcode_name(w->opcode), TN_SYN_RETRY_EXC, (unsigned long long)now);
	return TN_SYN_RETRY_EXC;
}

int tn_fault_ack_now(const struct tn_hqp *qp, const struct tn_wqe *w)
{
	/* The last WQE before a hold or an injected failure asks for its ACK, so that what ran
	 * before completes (an unsignaled WQE inside a batch would otherwise wait for the next
	 * ACK request, which the stall holds back). */
	if (tn_stall.state == TN_FAULT_ACTIVE)
		return matches(&tn_stall, qp, w);
	if (tn_stall.state == TN_FAULT_ARMED && tn_stall.count >= tn_stall.n && matches(&tn_stall, qp, w))
		return 1;
	return tn_fail.state == TN_FAULT_ARMED && tn_fail.count + 1 >= tn_fail.n && matches(&tn_fail, qp, w);
}
