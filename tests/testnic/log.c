/* TESTNIC_LOG: the NIC's own record of every WQE it executed, the ground truth tests compare
 * sigmatop against. TESTNIC_LOG=FILE appends to FILE (lines of several processes never mix:
 * O_APPEND writes of whole lines); TESTNIC_LOG=DIR writes DIR/testnic-<pid>.log.
 *
 * One line per WQE, written when the NIC takes it from the send queue (a WQE retransmitted
 * after a NAK is not logged twice):
 *   testnic pid=P qpn=0xQPN idx=N opcode=0xOP opmod=0xMOD op=NAME len=BYTES raddr=0xADDR
 *   rkey=0xKEY signaled=0|1 status=0xSYND rqpn=0xQPN rpid=PID
 * len is the bytes the WQE moves (data segments or inline data; 4 or 8 for atomics), status the
 * syndrome of a WQE the NIC refused (0 = accepted), rqpn and rpid the connected peer QP and its
 * process (0 when unknown; a DCI's are those of its last target). Lines are buffered in the NIC
 * thread and written when the buffer fills, when the NIC goes idle and at exit.
 *
 * TESTNIC_STALL / TESTNIC_FAIL add event lines, written at once (fault.c):
 *   testnic-event pid=P event=stall|lift|fail qpn=0xQPN idx=N wr=N ... t_ns=CLOCK_MONOTONIC
 * They start with "testnic-event", so a reader of WQE lines takes only "testnic pid=" lines.
 */
#include "nic.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tn_log_on;
static int log_fd = -1;
static char buf[1 << 16];
static size_t used;
static int pid;

void tn_log_init(void)
{
	const char *p = getenv("TESTNIC_LOG");
	if (!p || !*p || log_fd >= 0)
		return;
	char path[4096];
	struct stat st;
	if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(path, sizeof path, "%s/testnic-%d.log", p, (int)getpid());
	else
		snprintf(path, sizeof path, "%s", p);
	log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0) {
		tn_warn("TESTNIC_LOG: cannot open %s: %m", path);
		return;
	}
	pid = (int)getpid();
	tn_log_on = 1;
}

void tn_log_flush(void)
{
	size_t off = 0;
	while (off < used) {
		ssize_t n = write(log_fd, buf + off, used - off);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	used = 0;
}

void tn_log_wqe(const struct tn_hqp *qp, const struct tn_wqe *w, uint8_t status)
{
	if (!tn_log_on)
		return;
	if (sizeof buf - used < 256)
		tn_log_flush();
	int n = snprintf(buf + used, sizeof buf - used,
			 "testnic pid=%d qpn=0x%06x idx=%u opcode=0x%02x opmod=0x%02x op=%s len=%u "
			 "raddr=0x%016llx rkey=0x%08x signaled=%d status=0x%02x rqpn=0x%06x rpid=%d\n",
			 pid, qp->qpn, w->idx, w->opcode, w->opmod, tn_opcode_name(w->opcode), w->len,
			 (unsigned long long)w->raddr, w->rkey, w->signaled ? 1 : 0, status, qp->rqpn,
			 qp->peer ? (int)tn_peer_pid(qp->peer) : 0);
	if (n > 0 && (size_t)n < sizeof buf - used)
		used += (size_t)n;
}

void tn_log_event(const char *fmt, ...)
{
	if (!tn_log_on)
		return;
	if (sizeof buf - used < 512)
		tn_log_flush();
	int n = snprintf(buf + used, sizeof buf - used, "testnic-event pid=%d ", pid);
	if (n <= 0 || (size_t)n >= sizeof buf - used)
		return;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + used + n, sizeof buf - used - n, fmt, ap);
	va_end(ap);
	if (m < 0 || (size_t)(n + m + 1) >= sizeof buf - used)
		return;
	used += (size_t)(n + m);
	buf[used++] = '\n';
	tn_log_flush();
}
