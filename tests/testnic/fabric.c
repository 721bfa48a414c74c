/* The fabric between the processes of this machine: what a wire and a switch are to a real NIC.
 *
 * - One "device" segment per simulated host, /dev/shm/testnic-v1-<uid> for host 0 and
 *   /dev/shm/testnic-v1-<uid>-hN for TESTNIC_HOST=N: the number allocators a real device keeps
 *   (QPNs, CQNs, mkeys... are device-wide, so two processes of one host never share one, and two
 *   hosts number from the same start, so QPNs repeat across hosts as on a cluster) and the QP
 *   directory: for each QPN, the owning process (pid + inbox generation) and the GID of the
 *   port it sits behind. A packet is addressed by GID + QPN, like RoCE; the GID says the host
 *   (::ffff:10.0.N.1 is host N), whose directory resolves the QPN.
 * - One inbox per process, /dev/shm/testnic-v1-<uid>-<pid>: two bounded multi-producer rings
 *   of fixed slots (a 128-byte header + up to TN_PAYLOAD bytes), one for requests and one for
 *   responses. Responses are always consumed without producing anything, so two NICs that fill
 *   each other's request rings never deadlock.
 *
 * The rings are lock-free (a sequence number per slot: a producer claims a slot with one CAS on
 * the tail and publishes it by storing the slot's sequence; the owner consumes in order). No
 * call here makes a system call on the data path; mapping a peer's inbox happens at RTR.
 */
#include "nic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEV_MAGIC 0x544e444556763031ull /* "TNDEVv01" */
#define BOX_MAGIC 0x544e424f58763031ull /* "TNBOXv01" */
#define DIR_SLOTS 65536u
#define RING_SLOTS 256u
#define SLOT_SIZE (TN_PKT_HDR + TN_PAYLOAD)

struct dir_ent {
	uint32_t qpn;         /* 0 = free */
	int32_t pid;
	uint64_t gen;
	uint8_t gid[16];
};

struct dev_shm {
	uint64_t magic;
	uint64_t next[TN_ID_KINDS];
	struct dir_ent dir[DIR_SLOTS];
};

struct ring {
	uint64_t tail __attribute__((aligned(64)));  /* producers */
	uint64_t head __attribute__((aligned(64)));  /* the owner */
	uint64_t off __attribute__((aligned(64)));   /* slots start, from the inbox base */
};

struct box_shm {
	uint64_t magic;
	uint64_t gen;
	int32_t pid;
	struct ring ring[2];
};

struct tn_peer {
	pid_t pid;
	uint64_t gen;
	struct box_shm *box;
	struct tn_peer *next;
};

#define TN_HOSTS 256u

static struct dev_shm *dev;            /* this process's host */
static struct dev_shm *hosts[TN_HOSTS]; /* every host's segment mapped so far (dev among them) */
static unsigned local_host;            /* TESTNIC_HOST */
static struct box_shm *own;
static struct tn_peer self;          /* this process, as a peer (loopback) */
static struct tn_peer *peers;
static pthread_mutex_t fab_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t local_gid[16];
static char own_name[64];

static size_t box_size(void)
{
	size_t hdr = (sizeof(struct box_shm) + 4095) & ~(size_t)4095;
	return hdr + 2 * (size_t)RING_SLOTS * SLOT_SIZE;
}

static struct tn_pkt *slot(struct box_shm *b, int ring, uint64_t pos)
{
	uint8_t *base = (uint8_t *)b + b->ring[ring].off;
	return (struct tn_pkt *)(base + (pos & (RING_SLOTS - 1)) * SLOT_SIZE);
}

/* ---- rings ---- */

struct tn_pkt *tn_ring_reserve(struct tn_peer *p, int ring, uint64_t *pos_out)
{
	struct ring *r = &p->box->ring[ring];
	uint64_t pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
	for (;;) {
		struct tn_pkt *s = slot(p->box, ring, pos);
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		int64_t diff = (int64_t)(seq - pos);
		if (diff == 0) {
			if (__atomic_compare_exchange_n(&r->tail, &pos, pos + 1, 0, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED)) {
				*pos_out = pos;
				return s;
			}
		} else if (diff < 0) {
			return NULL; /* full */
		} else {
			pos = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
		}
	}
}

void tn_ring_commit(struct tn_peer *p, int ring, struct tn_pkt *pkt, uint64_t pos)
{
	(void)p;
	(void)ring;
	__atomic_store_n(&pkt->seq, pos + 1, __ATOMIC_RELEASE);
}

struct tn_pkt *tn_ring_peek(int ring)
{
	struct ring *r = &own->ring[ring];
	struct tn_pkt *s = slot(own, ring, r->head);
	if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != r->head + 1)
		return NULL;
	return s;
}

void tn_ring_pop(int ring)
{
	struct ring *r = &own->ring[ring];
	struct tn_pkt *s = slot(own, ring, r->head);
	__atomic_store_n(&s->seq, r->head + RING_SLOTS, __ATOMIC_RELEASE);
	__atomic_store_n(&r->head, r->head + 1, __ATOMIC_RELAXED);
}

/* ---- set-up ---- */

/* Gone, or a zombie nobody reaped yet (a killed child of the test harness). */
static int pid_dead(pid_t pid)
{
	if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH))
		return 1;
	char path[64], st[256];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, st, sizeof st - 1);
	close(fd);
	if (n <= 0)
		return 0;
	st[n] = 0;
	const char *p = strrchr(st, ')'); /* the state follows the command name */
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Removes inboxes of processes that died without cleaning up (killed, crashed). */
static void sweep_stale(void)
{
	char prefix[48];
	snprintf(prefix, sizeof prefix, "testnic-v1-%u-", (unsigned)geteuid());
	DIR *d = opendir("/dev/shm");
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		long pid = strtol(e->d_name + strlen(prefix), NULL, 10);
		if (pid > 0 && pid != getpid() && pid_dead((pid_t)pid)) {
			char n[300];
			snprintf(n, sizeof n, "/%s", e->d_name);
			shm_unlink(n);
		}
	}
	closedir(d);
}

void tn_fabric_fini(void)
{
	if (own_name[0])
		shm_unlink(own_name);
	own_name[0] = 0;
}

/* Host 0's segment is /testnic-v1-<uid> (as before hosts existed); host N's /testnic-v1-<uid>-hN. */
static int map_device(unsigned host, struct dev_shm **out)
{
	char name[48];
	if (host)
		snprintf(name, sizeof name, "/testnic-v1-%u-h%u", (unsigned)geteuid(), host);
	else
		snprintf(name, sizeof name, "/testnic-v1-%u", (unsigned)geteuid());
	struct dev_shm *dev;
	int created = 1;
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 && errno == EEXIST) {
		created = 0;
		fd = shm_open(name, O_RDWR, 0600);
	}
	if (fd < 0)
		return errno;
	if (created && ftruncate(fd, sizeof(struct dev_shm))) {
		int e = errno;
		close(fd);
		shm_unlink(name);
		return e;
	}
	/* Another process may still be sizing it: wait until it has the full size. */
	for (int i = 0; !created; i++) {
		struct stat st;
		if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct dev_shm))
			break;
		if (i > 1000) {
			close(fd);
			return ETIMEDOUT;
		}
		usleep(1000);
	}
	dev = mmap(NULL, sizeof(struct dev_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (dev == MAP_FAILED) {
		dev = NULL;
		return ENOMEM;
	}
	if (created) {
		/* Numbers start where a real device's do: small values are reserved. */
		for (int k = 0; k < TN_ID_KINDS; k++)
			dev->next[k] = 0x100 + (uint64_t)k;
		dev->next[TN_ID_QPN] = 0x100;
		__atomic_store_n(&dev->magic, DEV_MAGIC, __ATOMIC_RELEASE);
	}
	for (int i = 0; __atomic_load_n(&dev->magic, __ATOMIC_ACQUIRE) != DEV_MAGIC; i++) {
		if (i > 1000) {
			tn_warn("%s is not a testnic v1 device segment: remove it (rm /dev/shm%s)", name, name);
			munmap(dev, sizeof(struct dev_shm));
			return EPROTO;
		}
		usleep(1000);
	}
	*out = dev;
	return 0;
}

/* The segment of `host` (mapped on first use; NULL when it cannot be). */
static struct dev_shm *host_dev(unsigned host)
{
	if (host >= TN_HOSTS)
		return NULL;
	struct dev_shm *d = __atomic_load_n(&hosts[host], __ATOMIC_ACQUIRE);
	if (d)
		return d;
	pthread_mutex_lock(&fab_lock);
	if (!hosts[host] && map_device(host, &d) == 0)
		__atomic_store_n(&hosts[host], d, __ATOMIC_RELEASE);
	d = hosts[host];
	pthread_mutex_unlock(&fab_lock);
	return d;
}

/* The GID of an InfiniBand port: the link-local subnet prefix fe80::/64 and the port GUID
 * 02c9:0300:0000:LLLL, LLLL = its LID (host + 1). */
static const uint8_t ib_prefix[12] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0xc9, 0x03, 0x00};

/* The host a GID belongs to: ::ffff:10.0.N.1 (RoCE) and fe80::2c9:300:0:N+1 (IB) are host N,
 * every other GID host 0. */
static unsigned host_of_gid(const uint8_t gid[16])
{
	if (!memcmp(gid, ib_prefix, 12) && !gid[12] && !gid[13]) {
		unsigned lid = (unsigned)gid[14] << 8 | gid[15];
		return lid >= 1 && lid <= TN_HOSTS ? lid - 1 : 0;
	}
	static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (memcmp(gid, v4, 12) || gid[12] != 10 || gid[13] != 0 || gid[15] != 1 || !gid[14])
		return 0;
	return gid[14];
}

unsigned tn_host_of_gid(const uint8_t gid[16])
{
	return host_of_gid(gid);
}

int tn_port_ib(void)
{
	static int ib = -1;
	if (ib < 0) {
		const char *p = getenv("TESTNIC_PORT");
		ib = p && !strcmp(p, "ib");
		if (p && *p && !ib && strcmp(p, "roce"))
			tn_warn("TESTNIC_PORT=%s is neither ib nor roce: RoCE", p);
	}
	return ib;
}

uint16_t tn_local_lid(void)
{
	if (!tn_port_ib())
		return 0;
	tn_local_gid(); /* reads TESTNIC_HOST */
	return (uint16_t)(local_host + 1);
}

int tn_gid_of_lid(uint16_t lid, uint8_t gid[16])
{
	if (!tn_port_ib() || lid < 1 || lid > TN_HOSTS)
		return -1;
	memcpy(gid, ib_prefix, 12);
	gid[12] = gid[13] = 0;
	gid[14] = (uint8_t)(lid >> 8);
	gid[15] = (uint8_t)lid;
	return 0;
}

static int map_own_box(void)
{
	snprintf(own_name, sizeof own_name, "/testnic-v1-%u-%d", (unsigned)geteuid(), (int)getpid());
	int fd = shm_open(own_name, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return errno;
	size_t sz = box_size();
	if (ftruncate(fd, (off_t)sz)) {
		int e = errno;
		close(fd);
		return e;
	}
	own = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (own == MAP_FAILED) {
		own = NULL;
		return ENOMEM;
	}
	uint64_t gen = 0;
	if (getrandom(&gen, sizeof gen, 0) != sizeof gen)
		gen = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	own->gen = gen | 1;
	own->pid = getpid();
	size_t hdr = (sizeof(struct box_shm) + 4095) & ~(size_t)4095;
	for (int r = 0; r < 2; r++) {
		own->ring[r].off = hdr + (uint64_t)r * RING_SLOTS * SLOT_SIZE;
		own->ring[r].head = own->ring[r].tail = 0;
		for (uint64_t i = 0; i < RING_SLOTS; i++)
			slot(own, r, i)->seq = i;
	}
	__atomic_store_n(&own->magic, BOX_MAGIC, __ATOMIC_RELEASE);
	self.pid = getpid();
	self.gen = own->gen;
	self.box = own;
	return 0;
}

static void parse_gid(void)
{
	/* TESTNIC_HOST=N (1..255): a host of its own, GID ::ffff:10.0.N.1. Otherwise host 0:
	 * ::ffff:127.0.0.1 unless TESTNIC_GID names another IPv4 address (a second "node" that
	 * shares host 0's numbers). */
	uint8_t ip[4] = {127, 0, 0, 1};
	const char *h = getenv("TESTNIC_HOST");
	local_host = 0;
	if (h && *h) {
		char *end = NULL;
		long n = strtol(h, &end, 10);
		if (end && !*end && n >= 0 && n < (long)TN_HOSTS)
			local_host = (unsigned)n;
		else
			tn_warn("TESTNIC_HOST=%s is not a host number 0..%u: using host 0", h, TN_HOSTS - 1);
	}
	const char *s = getenv("TESTNIC_GID");
	unsigned a, b, c, d;
	if (local_host) {
		if (s && *s)
			tn_warn("TESTNIC_GID=%s ignored: TESTNIC_HOST=%u has GID ::ffff:10.0.%u.1", s, local_host,
				local_host);
		ip[0] = 10;
		ip[1] = 0;
		ip[2] = (uint8_t)local_host;
		ip[3] = 1;
	} else if (s && sscanf(s, "%u.%u.%u.%u", &a, &b, &c, &d) == 4 && a < 256 && b < 256 && c < 256 && d < 256) {
		ip[0] = (uint8_t)a;
		ip[1] = (uint8_t)b;
		ip[2] = (uint8_t)c;
		ip[3] = (uint8_t)d;
	} else if (s && *s) {
		tn_warn("TESTNIC_GID=%s is not an IPv4 address: using 127.0.0.1", s);
	}
	memset(local_gid, 0, sizeof local_gid);
	local_gid[10] = local_gid[11] = 0xff;
	memcpy(local_gid + 12, ip, 4);
	if (tn_port_ib())
		tn_gid_of_lid((uint16_t)(local_host + 1), local_gid);
}

static pthread_once_t fab_once = PTHREAD_ONCE_INIT;
static int fab_err;

static void fabric_init_once(void)
{
	parse_gid();
	sweep_stale();
	fab_err = map_device(local_host, &dev);
	if (!fab_err)
		__atomic_store_n(&hosts[local_host], dev, __ATOMIC_RELEASE);
	if (!fab_err)
		fab_err = map_own_box();
	if (fab_err)
		tn_warn("cannot set up the fabric in /dev/shm: %s", strerror(fab_err));
}

int tn_fabric_init(void)
{
	pthread_once(&fab_once, fabric_init_once);
	return fab_err;
}

const uint8_t *tn_local_gid(void)
{
	if (!local_gid[0] && !local_gid[10])
		parse_gid();
	return local_gid;
}

/* ---- numbers and the QP directory ---- */

uint32_t tn_id_alloc(int kind)
{
	if (tn_fabric_init())
		return 0;
	uint64_t v = __atomic_fetch_add(&dev->next[kind], kind == TN_ID_QPN ? 1 : TN_ID_KINDS,
					__ATOMIC_RELAXED);
	uint32_t id = (uint32_t)(v & 0xffffff);
	if (id < 0x100)
		id += 0x100;
	return id;
}

int tn_qpn_publish(uint32_t qpn)
{
	struct dir_ent *e = &dev->dir[qpn & (DIR_SLOTS - 1)];
	uint32_t cur = __atomic_load_n(&e->qpn, __ATOMIC_ACQUIRE);
	/* A slot still held by a live process means its QPN wrapped onto ours: refuse it. */
	if (cur && cur != qpn && !pid_dead(e->pid))
		return EBUSY;
	e->pid = getpid();
	e->gen = own->gen;
	memcpy(e->gid, local_gid, 16);
	__atomic_store_n(&e->qpn, qpn, __ATOMIC_RELEASE);
	return 0;
}

void tn_qpn_retire(uint32_t qpn)
{
	if (!dev)
		return;
	struct dir_ent *e = &dev->dir[qpn & (DIR_SLOTS - 1)];
	if (__atomic_load_n(&e->qpn, __ATOMIC_ACQUIRE) == qpn && e->pid == getpid())
		__atomic_store_n(&e->qpn, 0, __ATOMIC_RELEASE);
}

static struct tn_peer *map_peer(pid_t pid, uint64_t gen)
{
	char name[64];
	snprintf(name, sizeof name, "/testnic-v1-%u-%d", (unsigned)geteuid(), (int)pid);
	int fd = shm_open(name, O_RDWR, 0600);
	if (fd < 0)
		return NULL;
	struct box_shm *b = mmap(NULL, box_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (b == MAP_FAILED)
		return NULL;
	if (__atomic_load_n(&b->magic, __ATOMIC_ACQUIRE) != BOX_MAGIC || b->gen != gen) {
		munmap(b, box_size());
		return NULL;
	}
	struct tn_peer *p = calloc(1, sizeof *p);
	if (!p) {
		munmap(b, box_size());
		return NULL;
	}
	p->pid = pid;
	p->gen = gen;
	p->box = b;
	return p;
}

struct tn_peer *tn_peer_resolve(const uint8_t gid[16], uint32_t qpn)
{
	if (tn_fabric_init())
		return NULL;
	/* The directory of the host behind the GID: QPNs repeat across hosts. */
	struct dev_shm *hd = host_dev(host_of_gid(gid));
	if (!hd)
		return NULL;
	struct dir_ent *e = &hd->dir[qpn & (DIR_SLOTS - 1)];
	if (__atomic_load_n(&e->qpn, __ATOMIC_ACQUIRE) != qpn || memcmp(e->gid, gid, 16))
		return NULL;
	pid_t pid = e->pid;
	uint64_t gen = e->gen;
	if (pid == getpid() && gen == own->gen)
		return &self;
	pthread_mutex_lock(&fab_lock);
	struct tn_peer *p;
	for (p = peers; p; p = p->next)
		if (p->pid == pid && p->gen == gen)
			break;
	if (!p) {
		p = map_peer(pid, gen);
		if (p) {
			p->next = peers;
			peers = p;
		}
	}
	pthread_mutex_unlock(&fab_lock);
	return p;
}

int tn_peer_alive(struct tn_peer *p)
{
	return p && !pid_dead(p->pid);
}

pid_t tn_peer_pid(const struct tn_peer *p)
{
	return p ? p->pid : 0;
}
