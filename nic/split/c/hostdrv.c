/*
 * hostdrv: a host driver in C for a split emunic device, built and run by
 * nic/split's tests. It is what a firmware or RTL co-design team writes
 * first: it speaks the setup protocol of docs/split.md, maps host memory
 * it shares with the device, and drives the rings of docs/rings.md through
 * the generated header rings/c/emunic_abi.h only:
 *
 *   - posts NOP and STATS commands and reads their statuses back from the
 *     command entries (DONE / DONE_PHASE);
 *   - registers the counter publication area and reads it under its
 *     sequence lock, finding each counter by its ID (the stat block's,
 *     the rings', the engine's, the occupancy's) at the offset the
 *     header's counts give;
 *   - posts legacy receive buffers, sends a frame through the transmit ring
 *     and checks it left on the port, injects a frame on the port and
 *     consumes its LEGACY_UPLOAD notification and the buffer's bytes;
 *   - negotiates FEAT_TX_CSUM and sends a UDP/IPv4 frame with both
 *     checksums zero and TX_CSUM: it must leave with the checksums this
 *     file computes on its own.
 *
 * With "kick-words" it also negotiates FEATURE_KICK_WORDS and rings the
 * doorbell and takes the vectors through the kick words (docs/split.md,
 * "Kick words").
 *
 * Usage: hostdrv SOCKET_PATH [kick-words]. Exit 0 with "ok" on success;
 * otherwise 1 and one line saying what failed. Little-endian Linux hosts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "emunic_abi.h"

/* The setup protocol (docs/split.md). */
#define SPLIT_MAGIC 0x434E4D45u
#define SPLIT_VERSION 2
#define MSG_HELLO 1
#define MSG_MEMORY 2
#define MSG_CONFIG 3
#define MSG_VECTORS 5
#define MSG_REG_READ 9
#define MSG_REG_WRITE 10
#define MSG_REPLY_BIT 0x8000
#define STATUS_BAD_REGISTER 8
#define FEATURE_EVENTFD 1ull
#define FEATURE_PORTFD 4ull
#define FEATURE_KICK_WORDS 16ull
#define KICK_WORD_STRIDE 64
#define KICK_WORDS_SIZE (4 * KICK_WORD_STRIDE)

static void die(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	fputs("hostdrv: ", stdout);
	vfprintf(stdout, fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	exit(1);
}

static int setup_fd;
static uint32_t seq;

static char last_msg[256]; /* the last reply's explanation */

/* request_status sends one message with fds and returns the reply's
 * status, its value in *value. */
static uint32_t request_status(uint16_t type, const void *body, uint32_t len, const int *fds, int nfds, uint64_t *value) {
	unsigned char msg[16 + 4096];
	if (len > 4096) die("body too long");
	uint32_t magic = SPLIT_MAGIC;
	uint16_t ver = SPLIT_VERSION;
	seq++;
	memcpy(msg + 0, &magic, 4);
	memcpy(msg + 4, &ver, 2);
	memcpy(msg + 6, &type, 2);
	memcpy(msg + 8, &len, 4);
	memcpy(msg + 12, &seq, 4);
	if (len) memcpy(msg + 16, body, len);
	struct iovec iov = {msg, 16 + len};
	char cbuf[CMSG_SPACE(4 * sizeof(int))];
	struct msghdr mh = {0};
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds > 0) {
		memset(cbuf, 0, sizeof cbuf);
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	if (sendmsg(setup_fd, &mh, 0) < 0) die("send %u: %s", type, strerror(errno));
	unsigned char rep[16 + 4096 + 1];
	ssize_t n = recv(setup_fd, rep, sizeof rep - 1, 0);
	if (n < 16 + 16) die("reply to %u: %zd bytes", type, n);
	uint16_t rtype;
	uint32_t rseq, status;
	memcpy(&rtype, rep + 6, 2);
	memcpy(&rseq, rep + 12, 4);
	memcpy(&status, rep + 16, 4);
	memcpy(value, rep + 24, 8);
	rep[n] = 0;
	if (rtype != (type | MSG_REPLY_BIT) || rseq != seq) die("reply %#x #%u to %u #%u", rtype, rseq, type, seq);
	snprintf(last_msg, sizeof last_msg, "%.200s", (char *)rep + 32);
	return status;
}

/* request sends one message with fds and returns the reply's value; a
 * refusal is fatal. */
static uint64_t request(uint16_t type, const void *body, uint32_t len, const int *fds, int nfds) {
	uint64_t value;
	uint32_t status = request_status(type, body, len, fds, nfds, &value);
	if (status != 0) die("request %u refused: status %u: %s", type, status, last_msg);
	return value;
}

/* The register block (docs/bar0.md), one access per REG_READ or REG_WRITE. */
static uint32_t reg_read(uint32_t off) { return (uint32_t)request(MSG_REG_READ, &off, 4, NULL, 0); }
static void reg_write(uint32_t off, uint32_t v) {
	uint32_t body[2] = {off, v};
	request(MSG_REG_WRITE, body, 8, NULL, 0);
}
static uint32_t ring_reg(uint32_t ring, uint32_t reg) { return EMUNIC_BAR0_RING_BASE + ring * EMUNIC_BAR0_RING_STRIDE + reg; }
static void ring_regs(uint32_t ring, uint64_t base, uint32_t count) {
	reg_write(ring_reg(ring, EMUNIC_RING_REG_BASE_LO), (uint32_t)base);
	reg_write(ring_reg(ring, EMUNIC_RING_REG_BASE_HI), (uint32_t)(base >> 32));
	reg_write(ring_reg(ring, EMUNIC_RING_REG_COUNT), count);
}

/* Host memory: a memfd mapped here and in the device at EMUNIC_ARENA_BASE. */
#define MEM_SIZE (1u << 20)
static unsigned char *mem;

static void *at(uint64_t addr) { return mem + (addr - EMUNIC_ARENA_BASE); }

/* A ring in host memory (docs/rings.md, "Rings in host memory"). */
struct ring {
	uint64_t base;
	uint32_t count, esize, log2;
	uint32_t local; /* producer: PI_local; consumer: CI_local */
};

static uint32_t *hdr32(struct ring *r, uint32_t off) { return (uint32_t *)at(r->base + off); }
static void *slot(struct ring *r, uint32_t i) {
	return at(r->base + EMUNIC_HEADER_SIZE + (uint64_t)(i & (r->count - 1)) * r->esize);
}
static uint32_t phase(struct ring *r, uint32_t i) { return ((i >> r->log2) & 1) ^ 1; }

static void ring_init(struct ring *r, uint64_t base, uint32_t count, uint32_t esize) {
	r->base = base;
	r->count = count;
	r->esize = esize;
	r->local = 0;
	r->log2 = 0;
	while ((1u << r->log2) < count) r->log2++;
}

static int efd[4];           /* doorbell, notify, txspace, command */
static uint64_t kick_words; /* their kick words' address, or 0 */

static uint32_t *kick_word(int i) { return at(kick_words + (uint64_t)i * KICK_WORD_STRIDE); }

/* kick rings eventfd i: with kick words, only if its reader has taken
 * every kick before this one (the word was zero). */
static void kick(int i) {
	if (kick_words && __atomic_fetch_add(kick_word(i), 1, __ATOMIC_SEQ_CST) != 0) return;
	uint64_t one = 1;
	if (write(efd[i], &one, 8) != 8) die("kick: %s", strerror(errno));
}

/* commit writes entry i's control byte (phase), after its body. */
static void commit(struct ring *r) {
	uint32_t *ctl = slot(r, r->local);
	__atomic_store_n(ctl, phase(r, r->local), __ATOMIC_RELEASE);
	r->local++;
}

/* publish stores PI and rings the doorbell if the device asked for it. */
static void publish(struct ring *r) {
	__atomic_store_n(hdr32(r, EMUNIC_OFF_PRODUCER_INDEX), r->local, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(hdr32(r, EMUNIC_OFF_CONSUMER_FLAGS), __ATOMIC_SEQ_CST) & EMUNIC_FLAG_NEED_WAKEUP) kick(0);
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* wait_vector waits (bounded) for a kick on vector eventfd i; after a
 * read it takes the vector's kick word, if any (after, never before: see
 * docs/split.md). */
static void wait_vector(int i, int ms) {
	struct pollfd p = {efd[i], POLLIN, 0};
	if (poll(&p, 1, ms) > 0) {
		uint64_t v;
		if (read(efd[i], &v, 8) != 8) die("vector read: %s", strerror(errno));
		if (kick_words && __atomic_exchange_n(kick_word(i), 0, __ATOMIC_SEQ_CST) > (1u << 20)) die("vector %d: garbage in its kick word", i);
	}
}

/* Counters by ID (docs/abi-blocks.md, "Counter IDs"): each group's place
 * follows from the header's counts, never from a struct's layout. */
static size_t stat_off(uint32_t id) { return EMUNIC_STAT_AREA_STATS_OFF + (size_t)id * 8; }
static size_t ring_off(uint32_t ring, uint32_t id) {
	return EMUNIC_STAT_AREA_STATS_OFF + EMUNIC_STAT_BLOCK_SIZE + ((size_t)ring * EMUNIC_RING_COUNTER_COUNT + id) * 8;
}
static size_t engine_off(const struct emunic_counter_area_header *h, uint32_t id) {
	(void)h;
	return ring_off(EMUNIC_STAT_AREA_RINGS, 0) + (size_t)id * 8;
}
static size_t occupancy_off(const struct emunic_counter_area_header *h, uint32_t id) {
	return engine_off(h, 0) + (size_t)h->engine_n * 8 + (size_t)id * 8;
}
static uint64_t area_word(uint64_t *words, size_t off) { return __atomic_load_n(&words[off / 8], __ATOMIC_ACQUIRE); }

/* The Internet checksum (RFC 1071), this driver's own: sum adds n bytes
 * of p as big-endian 16-bit words; fold gives the ones' complement of the
 * folded sum, 0 for data that carries a correct checksum. */
static uint32_t csum_add(uint32_t sum, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i += 2) sum += (uint32_t)p[i] << 8 | p[i + 1];
	if (n & 1) sum += (uint32_t)p[n - 1] << 8;
	return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
	return (uint16_t)~sum;
}

static struct ring cmd, ntf, tx, rx;
enum { VEC_NOTIFY = 1, VEC_TX = 2, VEC_CMD = 3 };

/* command posts one command and waits for its DONE; returns the entry. */
static struct emunic_command_ring_entry command(uint16_t op, uint16_t flags, uint64_t addr, uint32_t len) {
	uint32_t i = cmd.local;
	struct emunic_command_ring_entry *e = slot(&cmd, i);
	memset((char *)e + 4, 0, sizeof *e - 4);
	e->opcode = op;
	e->flags = flags;
	e->conn = 0xFFFFFFFFu;
	e->tag = 0xC0DE0000u + i;
	e->addr = addr;
	e->len = len;
	commit(&cmd);
	publish(&cmd);
	for (double end = now() + 5; now() < end;) {
		uint32_t ctl = __atomic_load_n(&e->ctl, __ATOMIC_ACQUIRE);
		uint32_t donephase = (ctl & EMUNIC_CTL_DONE_PHASE) ? 1 : 0;
		if ((ctl & EMUNIC_CTL_DONE) && donephase == phase(&cmd, i)) return *e;
		wait_vector(VEC_CMD, 1);
	}
	die("command %u: no DONE in 5 s", op);
	return *e;
}

/* next_notification returns the next notification entry (bounded wait). */
static struct emunic_notification_ring_entry next_notification(void) {
	for (double end = now() + 5; now() < end;) {
		uint32_t pi = __atomic_load_n(hdr32(&ntf, EMUNIC_OFF_PRODUCER_INDEX), __ATOMIC_ACQUIRE);
		if (pi != ntf.local) {
			if (pi - ntf.local > ntf.count) die("notification ring: PI %u is more than a ring ahead of CI %u", pi, ntf.local);
			struct emunic_notification_ring_entry *e = slot(&ntf, ntf.local);
			uint32_t ctl = __atomic_load_n(&e->ctl, __ATOMIC_ACQUIRE);
			if ((ctl & EMUNIC_CTL_PHASE) != phase(&ntf, ntf.local)) die("notification %u: phase error", ntf.local);
			struct emunic_notification_ring_entry n = *e;
			ntf.local++;
			__atomic_store_n(hdr32(&ntf, EMUNIC_OFF_CONSUMER_INDEX), ntf.local, __ATOMIC_SEQ_CST);
			if (__atomic_load_n(hdr32(&ntf, EMUNIC_OFF_PRODUCER_FLAGS), __ATOMIC_SEQ_CST) & EMUNIC_FLAG_NEED_WAKEUP) kick(0);
			return n;
		}
		wait_vector(VEC_NOTIFY, 1);
	}
	die("no notification in 5 s");
	struct emunic_notification_ring_entry z = {0};
	return z;
}

int main(int argc, char **argv) {
	int use_words = argc == 3 && strcmp(argv[2], "kick-words") == 0;
	if (argc != 2 && !use_words) die("usage: hostdrv SOCKET_PATH [kick-words]");
	setup_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strncpy(sa.sun_path, argv[1], sizeof sa.sun_path - 1);
	if (connect(setup_fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("connect %s: %s", argv[1], strerror(errno));

	uint64_t want = FEATURE_EVENTFD | FEATURE_PORTFD | (use_words ? FEATURE_KICK_WORDS : 0);
	if (request(MSG_HELLO, &want, 8, NULL, 0) != want) die("features not granted");

	int mfd = memfd_create("hostdrv-memory", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0 || ftruncate(mfd, MEM_SIZE) < 0) die("memfd: %s", strerror(errno));
	/* The device refuses memory it could lose pages of: seal it. */
	if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) die("seal: %s", strerror(errno));
	mem = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (mem == MAP_FAILED) die("mmap: %s", strerror(errno));
	uint64_t size = MEM_SIZE;
	request(MSG_MEMORY, &size, 8, &mfd, 1);

	int port[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, port) < 0) die("socketpair: %s", strerror(errno));
	const char *cfg = "{\"MAC\":[2,0,0,0,0,7],\"MTU\":1500}";
	uint64_t mtu = request(MSG_CONFIG, cfg, strlen(cfg), &port[1], 1);
	close(port[1]);
	if (mtu != 1500) die("MTU %llu", (unsigned long long)mtu);

	/* The rings and buffers, laid out by hand as a driver does. */
	uint64_t b = EMUNIC_ARENA_BASE;
	ring_init(&cmd, b + 0x1000, 16, EMUNIC_COMMAND_ENTRY_SIZE);
	ring_init(&ntf, b + 0x3000, 64, EMUNIC_NOTIFICATION_ENTRY_SIZE);
	ring_init(&tx, b + 0x6000, 16, EMUNIC_TX_DESC_SIZE);
	ring_init(&rx, b + 0x7000, 16, EMUNIC_RX_DESC_SIZE);
	for (int i = 0; i < 4; i++) {
		efd[i] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (efd[i] < 0) die("eventfd: %s", strerror(errno));
	}
	struct {
		uint32_t mode, poll_us; /* eventfd mode */
		uint64_t kick_words;    /* FEATURE_KICK_WORDS: their address (the memfd's pages start zeroed) */
	} vecs = {0, 0, use_words ? b + 0x8000 : 0};
	request(MSG_VECTORS, &vecs, use_words ? 16 : 8, efd, 4);
	kick_words = vecs.kick_words;

	/* Bring-up through the register block: identify, reset, features,
	 * the rings and the counter area, enable, status. */
	uint32_t id = reg_read(EMUNIC_REG_ID), ver = reg_read(EMUNIC_REG_VERSION);
	if (id != (EMUNIC_BAR0_VENDOR_ID | EMUNIC_BAR0_DEVICE_ID << 16) || ver >> 16 != EMUNIC_BAR0_VERSION_MAJOR) die("ID %#x version %#x", id, ver);
	if (reg_read(EMUNIC_REG_MAC_LO) != 0x00000002u || reg_read(EMUNIC_REG_MAC_HI) != 0x0700u || reg_read(EMUNIC_REG_MTU) != 1500) die("MAC or MTU registers");
	if (reg_read(EMUNIC_REG_MEM_BASE_LO) != (uint32_t)b || reg_read(EMUNIC_REG_MEM_SIZE_LO) != MEM_SIZE) die("memory registers");
	reg_write(EMUNIC_REG_CTRL, EMUNIC_CTRL_RESET);
	uint32_t feat = reg_read(EMUNIC_REG_DEV_FEATURES);
	if (!(feat & EMUNIC_FEAT_COUNTERS)) die("no counter area feature: %#x", feat);
	if (!(feat & EMUNIC_FEAT_TX_CSUM)) die("no transmit checksum feature: %#x", feat);
	reg_write(EMUNIC_REG_DRV_FEATURES, EMUNIC_FEAT_LEGACY | EMUNIC_FEAT_COUNTERS | EMUNIC_FEAT_TX_CSUM);
	ring_regs(EMUNIC_BAR0_RING_COMMAND, cmd.base, cmd.count);
	ring_regs(EMUNIC_BAR0_RING_NOTIFY, ntf.base, ntf.count);
	ring_regs(EMUNIC_BAR0_RING_TX, tx.base, tx.count);
	ring_regs(EMUNIC_BAR0_RING_RX, rx.base, rx.count);
	uint64_t area = b + 0x30000;
	uint32_t arealen = 0x10000;
	reg_write(EMUNIC_REG_COUNTER_LO, (uint32_t)area);
	reg_write(EMUNIC_REG_COUNTER_HI, (uint32_t)(area >> 32));
	reg_write(EMUNIC_REG_COUNTER_LEN, arealen);
	reg_write(EMUNIC_REG_CTRL, EMUNIC_CTRL_ENABLE);
	if (!(reg_read(EMUNIC_REG_STATUS) & EMUNIC_STATUS_ENABLED)) die("not enabled: status %#x error %u", reg_read(EMUNIC_REG_STATUS), reg_read(EMUNIC_REG_ERROR));
	/* A bad write is refused with its code and counted; the device runs on. */
	uint32_t bad[2] = {ring_reg(EMUNIC_BAR0_RING_TX, EMUNIC_RING_REG_BASE_LO), 0x1000};
	uint64_t code;
	if (request_status(MSG_REG_WRITE, bad, 8, NULL, 0, &code) != STATUS_BAD_REGISTER || code != EMUNIC_ERR_WRONG_STATE)
		die("a ring base written while enabled: code %llu, want WRONG_STATE", (unsigned long long)code);
	if (reg_read(EMUNIC_BAR0_COUNTER_BASE + 4 * EMUNIC_REG_CTR_WRONG_STATE) == 0) die("the refused write was not counted");

	/* Commands: NOP, then STATS into a buffer, then the counter area. */
	struct emunic_command_ring_entry r = command(EMUNIC_OP_NOP, 0, 0, 0);
	if (r.status != EMUNIC_STATUS_OK || r.tag != 0xC0DE0000u) die("NOP: status %u tag %#llx", r.status, (unsigned long long)r.tag);
	uint64_t statbuf = b + 0x20000;
	r = command(EMUNIC_OP_STATS, 0, statbuf, EMUNIC_STAT_BLOCK_SIZE);
	if (r.status != EMUNIC_STATUS_OK || r.result != EMUNIC_STAT_BLOCK_SIZE) die("STATS: status %u result %llu", r.status, (unsigned long long)r.result);
	r = command(EMUNIC_OP_STATS, 0, statbuf, 0);
	if (r.status != EMUNIC_STATUS_BAD_PARAM) die("STATS with Len 0: status %u, want BAD_PARAM", r.status);

	/* Legacy receive buffers: 8 of 2 KiB. */
	uint64_t rxbuf = b + 0x40000;
	for (uint32_t i = 0; i < 8; i++) {
		struct emunic_receive_descriptor *d = slot(&rx, rx.local);
		d->buf_id = 100 + i;
		d->addr = rxbuf + i * 2048;
		d->len = 2048;
		d->rsvd = 0;
		d->tag = i;
		commit(&rx);
	}
	publish(&rx);

	/* A frame out: an ARP request from the device's MAC, through the
	 * transmit ring; it must leave on the port as written. */
	unsigned char frame[60] = {0};
	memset(frame, 0xFF, 6);
	unsigned char mac[6] = {2, 0, 0, 0, 0, 7};
	memcpy(frame + 6, mac, 6);
	frame[12] = 0x08, frame[13] = 0x06;
	unsigned char arp[28] = {0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 7, 10, 0, 0, 7, 0, 0, 0, 0, 0, 0, 10, 0, 0, 9};
	memcpy(frame + 14, arp, 28);
	uint64_t txbuf = b + 0x60000;
	memcpy(at(txbuf), frame, sizeof frame);
	struct emunic_transmit_descriptor *t = slot(&tx, tx.local);
	t->conn = 0xFFFFFFFFu;
	t->addr = txbuf;
	t->len = sizeof frame;
	t->flags = 0;
	t->tag = 7;
	commit(&tx);
	publish(&tx);
	unsigned char got[2048];
	struct pollfd pp = {port[0], POLLIN, 0};
	if (poll(&pp, 1, 5000) <= 0) die("no frame on the port in 5 s");
	ssize_t n = recv(port[0], got, sizeof got, 0);
	if (n != (ssize_t)sizeof frame || memcmp(got, frame, sizeof frame) != 0) die("the port got %zd bytes, not the frame sent", n);

	/* Transmit checksum offload: a UDP/IPv4 frame with both checksums
	 * zero and TX_CSUM leaves with them filled in; the host's buffer is
	 * left as written. */
	unsigned char udp[14 + 20 + 8 + 6] = {0};
	unsigned char to[6] = {2, 0, 0, 0, 0, 9};
	memcpy(udp, to, 6);
	memcpy(udp + 6, mac, 6);
	udp[12] = 0x08, udp[13] = 0x00;
	unsigned char ip4[20] = {0x45, 0, 0, 34, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 7, 10, 0, 0, 9};
	memcpy(udp + 14, ip4, 20);
	unsigned char l4[14] = {0x30, 0x39, 0x00, 0x35, 0, 14, 0, 0, 'e', 'm', 'u', 'n', 'i', 'c'};
	memcpy(udp + 34, l4, 14);
	uint64_t csumbuf = txbuf + 2048;
	memcpy(at(csumbuf), udp, sizeof udp);
	t = slot(&tx, tx.local);
	t->conn = 0xFFFFFFFFu;
	t->addr = csumbuf;
	t->len = sizeof udp;
	t->flags = EMUNIC_TX_CSUM;
	t->tag = 8;
	commit(&tx);
	publish(&tx);
	if (poll(&pp, 1, 5000) <= 0) die("no checksummed frame on the port in 5 s");
	n = recv(port[0], got, sizeof got, 0);
	if (n != (ssize_t)sizeof udp) die("the port got %zd bytes, not the %zu of the UDP frame", n, sizeof udp);
	uint32_t ipsum = csum_add(0, got + 14, 20);
	uint32_t pseudo = csum_add(0, got + 26, 8) + 17 + 14; /* addresses, protocol, UDP length */
	uint32_t udpsum = csum_add(pseudo, got + 34, 14);
	if (csum_fold(ipsum) != 0 || csum_fold(udpsum) != 0 || (got[40] == 0 && got[41] == 0))
		die("checksums the device filled in: IPv4 %02x%02x UDP %02x%02x do not verify", got[24], got[25], got[40], got[41]);
	if (memcmp(got, udp, 24) != 0 || memcmp(got + 26, udp + 26, 14) != 0 || memcmp(got + 42, udp + 42, 6) != 0)
		die("the device changed more than the checksums");
	if (memcmp(at(csumbuf), udp, sizeof udp) != 0) die("the device wrote the host's transmit buffer");

	/* A frame in: an ARP reply to the device's MAC, on the port; it must
	 * come back as a LEGACY_UPLOAD into the first receive buffer. */
	unsigned char in[60] = {0};
	memcpy(in, mac, 6);
	unsigned char peer[6] = {2, 0, 0, 0, 0, 9};
	memcpy(in + 6, peer, 6);
	in[12] = 0x08, in[13] = 0x06;
	unsigned char arp2[28] = {0, 1, 8, 0, 6, 4, 0, 2, 2, 0, 0, 0, 0, 9, 10, 0, 0, 9, 2, 0, 0, 0, 0, 7, 10, 0, 0, 7};
	memcpy(in + 14, arp2, 28);
	if (send(port[0], in, sizeof in, 0) != (ssize_t)sizeof in) die("port send: %s", strerror(errno));
	struct emunic_notification_ring_entry nt = next_notification();
	if (!(nt.flags & EMUNIC_NTF_LEGACY_UPLOAD) || nt.aux != 100 || nt.len != sizeof in || nt.conn != 0xFFFFFFFFu)
		die("notification flags %#x aux %u len %u conn %#x, want LEGACY_UPLOAD of buffer 100", nt.flags, nt.aux, nt.len, nt.conn);
	if (memcmp(at(rxbuf), in, sizeof in) != 0) die("buffer 100 does not hold the frame received");

	/* The counter area: a consistent copy under the sequence lock shows
	 * the frames counted, each counter found by its ID. */
	uint64_t *words = at(area);
	struct emunic_counter_area_header h;
	uint64_t rxf, txf, csum, cmds, txe, ntfe, rxe, engtx, engrx, conns;
	for (double end = now() + 5;; wait_vector(VEC_NOTIFY, 1)) {
		if (now() > end) die("the counter area never showed the frames");
		uint64_t g1 = __atomic_load_n(&words[0], __ATOMIC_ACQUIRE);
		if (g1 & 1) continue;
		for (size_t i = 0; i < sizeof h / 8; i++) ((uint64_t *)&h)[i] = __atomic_load_n(&words[i], __ATOMIC_ACQUIRE);
		rxf = area_word(words, stat_off(EMUNIC_STAT_RX_FRAMES));
		txf = area_word(words, stat_off(EMUNIC_STAT_TX_FRAMES));
		cmds = area_word(words, ring_off(EMUNIC_AREA_RING_COMMAND, EMUNIC_RING_CTR_ENTRIES));
		ntfe = area_word(words, ring_off(EMUNIC_AREA_RING_NOTIFY, EMUNIC_RING_CTR_ENTRIES));
		txe = area_word(words, ring_off(EMUNIC_AREA_RING_TX, EMUNIC_RING_CTR_ENTRIES));
		rxe = area_word(words, ring_off(EMUNIC_AREA_RING_RX, EMUNIC_RING_CTR_ENTRIES));
		engtx = area_word(words, engine_off(&h, EMUNIC_ENG_TX_SEGMENTS));
		engrx = area_word(words, engine_off(&h, EMUNIC_ENG_RX_SEGMENTS));
		conns = area_word(words, occupancy_off(&h, EMUNIC_OCC_CONNS));
		if (__atomic_load_n(&words[0], __ATOMIC_ACQUIRE) != g1) continue;
		csum = area_word(words, stat_off(EMUNIC_STAT_TX_CSUM));
		if (rxf >= 1 && txf >= 2 && csum == 1 && cmds == 3 && txe == 2 && ntfe >= 1 && rxe >= 1) break;
	}
	if (h.ring_n != EMUNIC_RING_COUNTER_COUNT || h.engine_n != EMUNIC_ENGINE_COUNTER_COUNT || h.occ_n != EMUNIC_OCCUPANCY_WORDS ||
	    h.qpn != EMUNIC_QP_COUNTER_COUNT || h.num_qps != 0)
		die("counter area header: ring_n %u engine_n %u occ_n %u qpn %u num_qps %u", h.ring_n, h.engine_n, h.occ_n, h.qpn, h.num_qps);
	/* Nothing was delegated: the engine sent and took nothing. */
	if (engtx != 0 || engrx != 0 || conns != 0)
		die("engine counters by ID: tx_segments %llu rx_segments %llu, conns %llu; want 0", (unsigned long long)engtx,
		    (unsigned long long)engrx, (unsigned long long)conns);
	/* Reset on remove: the device stops, its registers return to zero. */
	reg_write(EMUNIC_REG_CTRL, EMUNIC_CTRL_RESET);
	if (reg_read(EMUNIC_REG_STATUS) & EMUNIC_STATUS_ENABLED || reg_read(ring_reg(EMUNIC_BAR0_RING_TX, EMUNIC_RING_REG_COUNT)) != 0)
		die("still enabled after reset");
	printf("ok\n");
	return 0;
}
