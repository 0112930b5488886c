// SPDX-License-Identifier: GPL-2.0
/*
 * emunic.ko: a Linux netdev driver for the emunic device attached to a QEMU
 * guest through QEMU's ivshmem-doorbell PCI device (docs/guest.md).
 *
 * The PCI function is ivshmem's (1af4:1110): its BAR0 holds ivshmem's own
 * registers (the Doorbell register among them), its BAR2 is memory shared
 * with the device process. emunic's register block (docs/bar0.md) is the
 * first page of BAR2, the "register window"; the driver's rings, buffers
 * and the counter area follow it in BAR2, and every address the driver
 * gives the device is MemBase plus an offset in BAR2. A register write is a
 * store into the window followed by an ivshmem doorbell of vector 0; a
 * ring's doorbell is an ivshmem doorbell of vector 1 + ring. The device's
 * interrupt vectors arrive as the ivshmem device's MSI-X vectors.
 *
 * The netdev runs the legacy rings (docs/rings.md): NAPI receive from the
 * notification ring (LEGACY_UPLOAD of a posted receive buffer), transmit
 * through the transmit ring with the device filling in TCP and UDP
 * checksums (TxCsum, when it has FeatTxCsum), link state from the device's
 * status, ethtool statistics from the counter area, and a device reset on
 * stop and remove.
 * Every layout comes from the generated emunic_abi.h.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/netdevice.h>
#include <linux/etherdevice.h>
#include <linux/ethtool.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/ip.h>
#include <linux/if_vlan.h>
#include <net/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/delay.h>
#include <linux/workqueue.h>
#include <linux/u64_stats_sync.h>

#include "emunic_abi.h"
#include "emunic_ivshmem.h"

#define DRV_NAME "emunic"

static unsigned int ring_entries = 256;
module_param(ring_entries, uint, 0444);
MODULE_PARM_DESC(ring_entries, "entries of the transmit and receive rings (a power of two, 16 to 1024)");

static bool counters = true;
module_param(counters, bool, 0444);
MODULE_PARM_DESC(counters, "register the counter area (ethtool -S shows the device's counters)");

/* Every legacy buffer holds a whole frame of the device's MTU. */
#define BUF_SIZE 2048
#define CMD_ENTRIES 16
#define COUNTER_AREA_SIZE (64 * 1024)
#define NO_CONN 0xFFFFFFFFu

struct emunic_ring {
	u8 *va;      /* the ring's header in BAR2 */
	u64 dma;     /* its DMA address */
	u32 count;   /* entries, a power of two */
	u32 esize;   /* bytes per entry */
	u32 shift;   /* log2(count) */
	u32 local;   /* producer: PI_local; consumer: CI_local */
	u32 cached;  /* producer: the CI last read; consumer: the PI last read */
	int index;   /* the ring's register block, EMUNIC_BAR0_RING_* */
};

struct emunic_stats {
	u64 packets, bytes, errors, dropped;
	struct u64_stats_sync sync;
};

struct emunic {
	struct pci_dev *pdev;
	struct net_device *ndev;
	void __iomem *ivregs; /* ivshmem's BAR0 */
	u8 *bar2;             /* BAR2, the register window first */
	u64 bar2_len;
	u64 mem_base;         /* DMA address of BAR2's first byte */
	u32 mem_first;        /* bytes of the register window */
	u32 mtu;

	struct emunic_ring cmd, ntf, tx, rx;
	u8 *txbuf, *rxbuf; /* one BUF_SIZE buffer per transmit slot, per receive buffer id */
	u64 rxbuf_dma, txbuf_dma;
	u8 *counters;
	u64 counters_dma;

	/* Receive buffers whose repost found the receive ring full. */
	u32 *repost;
	u32 nrepost;

	struct napi_struct napi;
	struct emunic_stats rxs, txs;
	u64 rx_phase_errors, rx_bad_notifications, rx_too_large, tx_ring_full;
	/* CHECKSUM_PARTIAL frames sent with TxCsum, and summed here instead. */
	u64 tx_csum_offload, tx_csum_sw;
	bool tx_csum; /* FeatTxCsum negotiated: the device fills in TCP and UDP checksums */
	struct delayed_work link_work;
	struct mutex reg_lock; /* register writes: store and doorbell, then read back */
	bool running;
};

/* ------------------------------------------------------------------ registers */

static u32 reg_read(struct emunic *e, u32 off)
{
	return le32_to_cpu(READ_ONCE(*(__le32 *)(e->bar2 + off)));
}

/* ivshmem_ring rings the device's vector v through ivshmem's Doorbell register. */
static void ivshmem_ring(struct emunic *e, u32 v)
{
	/* The window and ring stores before the doorbell that announces them. */
	wmb();
	writel(EMUNIC_IVSHMEM_PEER_DEVICE << 16 | v, e->ivregs + EMUNIC_IVSHMEM_DOORBELL);
}

/* reg_store puts a register's new value into the window; reg_commit tells
 * the device to apply what changed, in register order. */
static void reg_store(struct emunic *e, u32 off, u32 val)
{
	WRITE_ONCE(*(__le32 *)(e->bar2 + off), cpu_to_le32(val));
}

static void reg_commit(struct emunic *e)
{
	ivshmem_ring(e, EMUNIC_IVVEC_REGISTERS);
}

static void reg_write(struct emunic *e, u32 off, u32 val)
{
	reg_store(e, off, val);
	reg_commit(e);
}

/* wait_reg polls a register until (value & mask) == want, for up to ms. */
static int wait_reg(struct emunic *e, u32 off, u32 mask, u32 want, unsigned int ms)
{
	unsigned long end = jiffies + msecs_to_jiffies(ms);

	do {
		if ((reg_read(e, off) & mask) == want)
			return 0;
		usleep_range(200, 1000);
	} while (time_before(jiffies, end));
	return (reg_read(e, off) & mask) == want ? 0 : -ETIMEDOUT;
}

static int emunic_reset(struct emunic *e)
{
	int err;

	mutex_lock(&e->reg_lock);
	reg_write(e, EMUNIC_REG_CTRL, EMUNIC_CTRL_RESET);
	/* Done when the device has zeroed the control register and stopped. */
	err = wait_reg(e, EMUNIC_REG_STATUS, EMUNIC_STATUS_ENABLED, 0, 2000);
	if (!err)
		err = wait_reg(e, EMUNIC_REG_CTRL, ~0u, 0, 2000);
	mutex_unlock(&e->reg_lock);
	if (err)
		netdev_warn(e->ndev, "reset: the device did not answer (ctrl %#x status %#x)\n",
			    reg_read(e, EMUNIC_REG_CTRL), reg_read(e, EMUNIC_REG_STATUS));
	return err;
}

/* ------------------------------------------------------------------ rings */

static u32 phase(const struct emunic_ring *r, u32 i)
{
	return ((i >> r->shift) & 1) ^ 1;
}

static __le32 *hdr_word(const struct emunic_ring *r, u32 off)
{
	return (__le32 *)(r->va + off);
}

static void *slot(const struct emunic_ring *r, u32 i)
{
	return r->va + EMUNIC_HEADER_SIZE + (size_t)(i & (r->count - 1)) * r->esize;
}

static u32 load_acquire(__le32 *w)
{
	return le32_to_cpu(smp_load_acquire(w));
}

/* commit writes entry i's control word last: phase in bit 0, the rest 0. */
static void commit(struct emunic_ring *r)
{
	__le32 *ctl = slot(r, r->local);

	smp_store_release(ctl, cpu_to_le32(phase(r, r->local)));
	r->local++;
}

/* kick rings the device's doorbell of ring r: the value into the ring's
 * Doorbell register, then the ivshmem vector that announces it. */
static void kick(struct emunic *e, struct emunic_ring *r)
{
	reg_store(e, BAR0_RING(r->index, EMUNIC_RING_REG_DOORBELL), 1);
	ivshmem_ring(e, EMUNIC_IVVEC_RING(r->index));
}

/* publish stores PI, then (after a full barrier) kicks the device if it
 * said it sleeps on this ring. */
static void publish(struct emunic *e, struct emunic_ring *r)
{
	smp_store_release(hdr_word(r, EMUNIC_OFF_PRODUCER_INDEX), cpu_to_le32(r->local));
	smp_mb();
	if (le32_to_cpu(READ_ONCE(*hdr_word(r, EMUNIC_OFF_CONSUMER_FLAGS))) & EMUNIC_FLAG_NEED_WAKEUP)
		kick(e, r);
}

/* release stores CI, then kicks the device if it waits for room. */
static void release(struct emunic *e, struct emunic_ring *r)
{
	smp_store_release(hdr_word(r, EMUNIC_OFF_CONSUMER_INDEX), cpu_to_le32(r->local));
	smp_mb();
	if (le32_to_cpu(READ_ONCE(*hdr_word(r, EMUNIC_OFF_PRODUCER_FLAGS))) & EMUNIC_FLAG_NEED_WAKEUP)
		kick(e, r);
}

static u64 dma_of(struct emunic *e, const void *p)
{
	return e->mem_base + (u64)((const u8 *)p - e->bar2);
}

static void ring_place(struct emunic *e, struct emunic_ring *r, int index, u64 *off, u32 count, u32 esize)
{
	r->va = e->bar2 + *off;
	r->dma = dma_of(e, r->va);
	r->count = count;
	r->esize = esize;
	r->shift = ilog2(count);
	r->local = 0;
	r->cached = 0;
	r->index = index;
	*off = ALIGN(*off + EMUNIC_HEADER_SIZE + (u64)count * esize, 4096);
}

/* layout places the rings, the counter area and the buffers in BAR2 after
 * the register window, and zeroes them: the rings' initial state. */
static int layout(struct emunic *e)
{
	u32 n = ring_entries;
	u64 off = ALIGN(e->mem_first, 4096);

	ring_place(e, &e->cmd, EMUNIC_BAR0_RING_COMMAND, &off, CMD_ENTRIES, EMUNIC_COMMAND_ENTRY_SIZE);
	/* Every receive buffer and transmit slot may have a notification
	 * outstanding at once, and ring slots come back late (CI is
	 * released in batches): the notification ring is twice both. */
	ring_place(e, &e->ntf, EMUNIC_BAR0_RING_NOTIFY, &off, 4 * n, EMUNIC_NOTIFICATION_ENTRY_SIZE);
	ring_place(e, &e->tx, EMUNIC_BAR0_RING_TX, &off, n, EMUNIC_TX_DESC_SIZE);
	ring_place(e, &e->rx, EMUNIC_BAR0_RING_RX, &off, 2 * n, EMUNIC_RX_DESC_SIZE);
	e->counters = e->bar2 + off;
	e->counters_dma = dma_of(e, e->counters);
	off += COUNTER_AREA_SIZE;
	e->txbuf = e->bar2 + off;
	e->txbuf_dma = dma_of(e, e->txbuf);
	off += (u64)n * BUF_SIZE;
	e->rxbuf = e->bar2 + off;
	e->rxbuf_dma = dma_of(e, e->rxbuf);
	off += (u64)n * BUF_SIZE;
	if (off > e->bar2_len) {
		netdev_err(e->ndev, "BAR2 has %llu bytes; %u-entry rings need %llu\n", e->bar2_len, n, off);
		return -ENOSPC;
	}
	memset(e->bar2 + e->mem_first, 0, off - e->mem_first);
	return 0;
}

static void program_ring(struct emunic *e, struct emunic_ring *r)
{
	reg_store(e, BAR0_RING(r->index, EMUNIC_RING_REG_BASE_LO), lower_32_bits(r->dma));
	reg_store(e, BAR0_RING(r->index, EMUNIC_RING_REG_BASE_HI), upper_32_bits(r->dma));
	reg_store(e, BAR0_RING(r->index, EMUNIC_RING_REG_COUNT), r->count);
}

/* post_rx puts receive buffer id on the receive ring, or holds it until
 * the ring has room. */
static void post_rx(struct emunic *e, u32 id)
{
	struct emunic_receive_descriptor *d;

	if (e->rx.local - e->rx.cached >= e->rx.count) {
		e->rx.cached = load_acquire(hdr_word(&e->rx, EMUNIC_OFF_CONSUMER_INDEX));
		if (e->rx.local - e->rx.cached >= e->rx.count) {
			e->repost[e->nrepost++] = id;
			return;
		}
	}
	d = slot(&e->rx, e->rx.local);
	d->buf_id = id;
	d->addr = e->rxbuf_dma + (u64)id * BUF_SIZE;
	d->len = BUF_SIZE;
	d->rsvd = 0;
	d->tag = id;
	commit(&e->rx);
}

static int emunic_enable(struct emunic *e)
{
	u32 feat = EMUNIC_FEAT_LEGACY, have, i, st;
	int err;

	err = layout(e);
	if (err)
		return err;
	mutex_lock(&e->reg_lock);
	have = reg_read(e, EMUNIC_REG_DEV_FEATURES);
	if (!(have & EMUNIC_FEAT_LEGACY)) {
		mutex_unlock(&e->reg_lock);
		netdev_err(e->ndev, "the device has no legacy rings (features %#x)\n", have);
		return -ENODEV;
	}
	if (counters && (have & EMUNIC_FEAT_COUNTERS))
		feat |= EMUNIC_FEAT_COUNTERS;
	if (have & EMUNIC_FEAT_TX_CSUM)
		feat |= EMUNIC_FEAT_TX_CSUM;
	e->tx_csum = feat & EMUNIC_FEAT_TX_CSUM;
	/* One commit for the configuration, applied in register order; the
	 * enable after it, in a commit of its own. */
	reg_store(e, EMUNIC_REG_DRV_FEATURES, feat);
	program_ring(e, &e->cmd);
	program_ring(e, &e->ntf);
	program_ring(e, &e->tx);
	program_ring(e, &e->rx);
	if (feat & EMUNIC_FEAT_COUNTERS) {
		reg_store(e, EMUNIC_REG_COUNTER_LO, lower_32_bits(e->counters_dma));
		reg_store(e, EMUNIC_REG_COUNTER_HI, upper_32_bits(e->counters_dma));
		reg_store(e, EMUNIC_REG_COUNTER_LEN, COUNTER_AREA_SIZE);
	}
	reg_commit(e);
	reg_write(e, EMUNIC_REG_CTRL, EMUNIC_CTRL_ENABLE);
	err = wait_reg(e, EMUNIC_REG_STATUS, EMUNIC_STATUS_ENABLED | EMUNIC_STATUS_FAILED, EMUNIC_STATUS_ENABLED, 2000);
	st = reg_read(e, EMUNIC_REG_STATUS);
	mutex_unlock(&e->reg_lock);
	if (err) {
		netdev_err(e->ndev, "enable failed: status %#x, error %u at %#x\n", st, reg_read(e, EMUNIC_REG_ERROR),
			   reg_read(e, EMUNIC_REG_ERROR_OFFSET));
		return -EIO;
	}
	/* Sleep on the notification ring from the start: the first
	 * notification interrupts. */
	WRITE_ONCE(*hdr_word(&e->ntf, EMUNIC_OFF_CONSUMER_FLAGS), cpu_to_le32(EMUNIC_FLAG_NEED_WAKEUP));
	e->nrepost = 0;
	for (i = 0; i < ring_entries; i++)
		post_rx(e, i);
	publish(e, &e->rx);
	return 0;
}

/* ------------------------------------------------------------------ receive */

static void rx_count(struct emunic_stats *s, u64 bytes, bool dropped)
{
	u64_stats_update_begin(&s->sync);
	if (dropped) {
		s->dropped++;
	} else {
		s->packets++;
		s->bytes += bytes;
	}
	u64_stats_update_end(&s->sync);
}

/* rx_checksum: the device drops a frame whose IPv4 header, TCP or UDP
 * checksum is wrong (unfragmented IPv4 and IPv6 TCP and UDP: receive
 * checksum offload, docs/rings.md), so such a frame needs no checking. */
static void rx_checksum(struct sk_buff *skb)
{
	const struct iphdr *ip;
	const struct ipv6hdr *ip6;

	if (skb->protocol == htons(ETH_P_IP) && pskb_may_pull(skb, sizeof(*ip))) {
		ip = ip_hdr(skb);
		if (ip->ihl >= 5 && !ip_is_fragment(ip) && (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP))
			skb->ip_summed = CHECKSUM_UNNECESSARY;
	} else if (skb->protocol == htons(ETH_P_IPV6) && pskb_may_pull(skb, sizeof(*ip6))) {
		ip6 = ipv6_hdr(skb);
		if (ip6->nexthdr == IPPROTO_TCP || ip6->nexthdr == IPPROTO_UDP)
			skb->ip_summed = CHECKSUM_UNNECESSARY;
	}
}

static void rx_frame(struct emunic *e, u32 id, u32 len)
{
	struct sk_buff *skb;

	skb = napi_alloc_skb(&e->napi, len);
	if (!skb) {
		rx_count(&e->rxs, 0, true);
		return;
	}
	skb_put_data(skb, e->rxbuf + (size_t)id * BUF_SIZE, len);
	skb->protocol = eth_type_trans(skb, e->ndev);
	skb_reset_network_header(skb);
	rx_checksum(skb);
	rx_count(&e->rxs, len, false);
	napi_gro_receive(&e->napi, skb);
}

/* notification takes one notification entry. */
static void notification(struct emunic *e, const struct emunic_notification_ring_entry *n)
{
	u32 id = n->aux;

	if (n->conn != NO_CONN || id >= ring_entries ||
	    !(n->flags & (EMUNIC_NTF_LEGACY_UPLOAD | EMUNIC_NTF_FRAME_TOO_LARGE))) {
		/* Nothing this driver asked for: no connection is delegated. */
		e->rx_bad_notifications++;
		return;
	}
	if (n->flags & EMUNIC_NTF_FRAME_TOO_LARGE) {
		e->rx_too_large++;
		rx_count(&e->rxs, 0, true);
	} else if (n->len < ETH_HLEN || n->len > BUF_SIZE) {
		e->rx_bad_notifications++;
	} else {
		rx_frame(e, id, n->len);
	}
	post_rx(e, id);
}

static bool tx_room(struct emunic *e)
{
	struct emunic_ring *r = &e->tx;

	if (r->local - r->cached < r->count)
		return true;
	r->cached = load_acquire(hdr_word(r, EMUNIC_OFF_CONSUMER_INDEX));
	return r->local - r->cached < r->count;
}

static int emunic_poll(struct napi_struct *napi, int budget)
{
	struct emunic *e = container_of(napi, struct emunic, napi);
	struct emunic_ring *r = &e->ntf;
	struct emunic_notification_ring_entry n;
	int done = 0;
	u32 i, held;

	/* Awake: no interrupts for what is published while this runs. */
	WRITE_ONCE(*hdr_word(r, EMUNIC_OFF_CONSUMER_FLAGS), 0);
	/* Buffers held back when the receive ring was full go first. */
	held = e->nrepost;
	e->nrepost = 0;
	for (i = 0; i < held; i++)
		post_rx(e, e->repost[i]);
	while (done < budget) {
		if (r->local == r->cached) {
			r->cached = load_acquire(hdr_word(r, EMUNIC_OFF_PRODUCER_INDEX));
			if (r->local == r->cached)
				break;
		}
		if (r->cached - r->local > r->count) {
			/* A producer index more than a ring ahead: not trusted. */
			e->rx_phase_errors++;
			r->cached = r->local;
			break;
		}
		memcpy(&n, slot(r, r->local), sizeof(n));
		if ((le32_to_cpu(n.ctl) & EMUNIC_CTL_PHASE) != phase(r, r->local)) {
			/* Published before it was written: look again later. */
			e->rx_phase_errors++;
			break;
		}
		r->local++;
		notification(e, &n);
		done++;
	}
	release(e, r);
	publish(e, &e->rx);
	if (netif_queue_stopped(e->ndev) && e->running && tx_room(e))
		netif_wake_queue(e->ndev);
	if (done < budget && napi_complete_done(napi, done)) {
		/* Asleep: set NEED_WAKEUP, then look once more (the device
		 * stores PI before it loads the flag). */
		WRITE_ONCE(*hdr_word(r, EMUNIC_OFF_CONSUMER_FLAGS), cpu_to_le32(EMUNIC_FLAG_NEED_WAKEUP));
		smp_mb();
		if (load_acquire(hdr_word(r, EMUNIC_OFF_PRODUCER_INDEX)) != r->local || e->nrepost)
			napi_schedule(napi);
	}
	return done;
}

/* ------------------------------------------------------------------ transmit */

/* tx_csum_offloadable says whether the device can fill in the checksum of a
 * CHECKSUM_PARTIAL skb: TxCsum has no csum_start/csum_offset, so the device
 * parses the frame itself (docs/rings.md, "Transmit checksum offload") and
 * places a TCP or UDP checksum straight behind the IPv4 header, or behind an
 * IPv6 fixed header (this driver sends a frame with extension headers the
 * software way: a Routing header would change the pseudo-header). The
 * checksum the stack asks for must be that one: an encapsulation's inner
 * checksum, or anything else, is summed here. */
static bool tx_csum_offloadable(const struct sk_buff *skb)
{
	unsigned int nh = skb_network_offset(skb), l4;
	u8 proto;

	if (skb->protocol == htons(ETH_P_IP)) {
		const struct iphdr *ip = ip_hdr(skb);

		if (nh + sizeof(*ip) > skb_headlen(skb) || ip->version != 4 || ip->ihl < 5 || ip_is_fragment(ip))
			return false;
		proto = ip->protocol;
		l4 = nh + ip->ihl * 4;
	} else if (skb->protocol == htons(ETH_P_IPV6)) {
		if (nh + sizeof(struct ipv6hdr) > skb_headlen(skb))
			return false;
		proto = ipv6_hdr(skb)->nexthdr;
		l4 = nh + sizeof(struct ipv6hdr);
	} else {
		return false;
	}
	if (nh != ETH_HLEN || skb_checksum_start_offset(skb) != l4)
		return false;
	if (proto == IPPROTO_TCP)
		return skb->csum_offset == offsetof(struct tcphdr, check);
	if (proto == IPPROTO_UDP)
		return skb->csum_offset == offsetof(struct udphdr, check);
	return false;
}

static netdev_tx_t emunic_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	struct emunic *e = netdev_priv(ndev);
	struct emunic_ring *r = &e->tx;
	struct emunic_transmit_descriptor *d;
	u32 s, len = skb->len;
	u16 flags = 0;
	u8 *buf;

	if (len > BUF_SIZE || len < ETH_HLEN) {
		dev_kfree_skb_any(skb);
		u64_stats_update_begin(&e->txs.sync);
		e->txs.dropped++;
		u64_stats_update_end(&e->txs.sync);
		return NETDEV_TX_OK;
	}
	if (!tx_room(e)) {
		/* Full: ask the device to interrupt when it releases slots,
		 * then look again (it stores CI before it loads the flag). */
		netif_stop_queue(ndev);
		e->tx_ring_full++;
		publish(e, r);
		WRITE_ONCE(*hdr_word(r, EMUNIC_OFF_PRODUCER_FLAGS), cpu_to_le32(EMUNIC_FLAG_NEED_WAKEUP));
		smp_mb();
		if (!tx_room(e))
			return NETDEV_TX_BUSY;
		WRITE_ONCE(*hdr_word(r, EMUNIC_OFF_PRODUCER_FLAGS), 0);
		netif_start_queue(ndev);
	}
	s = r->local & (r->count - 1);
	buf = e->txbuf + (size_t)s * BUF_SIZE;
	/* The frame is copied into BAR2 anyway. A checksum the stack left to
	 * the NIC is the device's when it can place it (TxCsum); otherwise it
	 * is computed in the same pass as the copy (as 8139too does). */
	if (skb->ip_summed == CHECKSUM_PARTIAL && e->tx_csum && tx_csum_offloadable(skb)) {
		skb_copy_bits(skb, 0, buf, len);
		flags = EMUNIC_TX_CSUM;
		e->tx_csum_offload++;
	} else if (skb->ip_summed == CHECKSUM_PARTIAL) {
		skb_copy_and_csum_dev(skb, buf);
		e->tx_csum_sw++;
	} else {
		skb_copy_bits(skb, 0, buf, len);
	}
	d = slot(r, r->local);
	d->conn = NO_CONN;
	d->addr = e->txbuf_dma + (u64)s * BUF_SIZE;
	d->len = len;
	d->flags = flags;
	d->vlan = 0;
	d->tag = s;
	commit(r);
	u64_stats_update_begin(&e->txs.sync);
	e->txs.packets++;
	e->txs.bytes += len;
	u64_stats_update_end(&e->txs.sync);
	dev_consume_skb_any(skb);
	if (!netdev_xmit_more() || netif_queue_stopped(ndev))
		publish(e, r);
	return NETDEV_TX_OK;
}

/* ------------------------------------------------------------------ interrupts */

static irqreturn_t emunic_irq_notify(int irq, void *data)
{
	struct emunic *e = data;

	napi_schedule(&e->napi);
	return IRQ_HANDLED;
}

static irqreturn_t emunic_irq_txspace(int irq, void *data)
{
	struct emunic *e = data;

	WRITE_ONCE(*hdr_word(&e->tx, EMUNIC_OFF_PRODUCER_FLAGS), 0);
	if (e->running)
		netif_wake_queue(e->ndev);
	return IRQ_HANDLED;
}

static irqreturn_t emunic_irq_command(int irq, void *data)
{
	/* No command is posted: the counter area is set up by register. */
	return IRQ_HANDLED;
}

static int emunic_request_irqs(struct emunic *e)
{
	static irq_handler_t handlers[EMUNIC_BAR0_VECTORS] = {
		[EMUNIC_BAR0_VEC_NOTIFY] = emunic_irq_notify,
		[EMUNIC_BAR0_VEC_TX_SPACE] = emunic_irq_txspace,
		[EMUNIC_BAR0_VEC_COMMAND] = emunic_irq_command,
	};
	int v, err;

	for (v = 0; v < EMUNIC_BAR0_VECTORS; v++) {
		err = request_irq(pci_irq_vector(e->pdev, v), handlers[v], 0, DRV_NAME, e);
		if (err) {
			while (--v >= 0)
				free_irq(pci_irq_vector(e->pdev, v), e);
			return err;
		}
	}
	return 0;
}

static void emunic_free_irqs(struct emunic *e)
{
	int v;

	for (v = 0; v < EMUNIC_BAR0_VECTORS; v++)
		free_irq(pci_irq_vector(e->pdev, v), e);
}

/* ------------------------------------------------------------------ link */

static void emunic_link_work(struct work_struct *w)
{
	struct emunic *e = container_of(to_delayed_work(w), struct emunic, link_work);
	bool up = reg_read(e, EMUNIC_REG_STATUS) & EMUNIC_STATUS_ENABLED;

	if (up && !netif_carrier_ok(e->ndev)) {
		netif_carrier_on(e->ndev);
	} else if (!up && netif_carrier_ok(e->ndev)) {
		netdev_warn(e->ndev, "the device stopped (status %#x): link down\n", reg_read(e, EMUNIC_REG_STATUS));
		netif_carrier_off(e->ndev);
	}
	if (e->running)
		schedule_delayed_work(&e->link_work, HZ);
}

/* ------------------------------------------------------------------ netdev */

static int emunic_open(struct net_device *ndev)
{
	struct emunic *e = netdev_priv(ndev);
	int err;

	err = emunic_reset(e);
	if (err)
		return err;
	err = emunic_request_irqs(e);
	if (err)
		return err;
	napi_enable(&e->napi);
	err = emunic_enable(e);
	if (err) {
		napi_disable(&e->napi);
		emunic_free_irqs(e);
		emunic_reset(e);
		return err;
	}
	e->running = true;
	netif_carrier_on(ndev);
	netif_start_queue(ndev);
	schedule_delayed_work(&e->link_work, HZ);
	return 0;
}

static int emunic_stop(struct net_device *ndev)
{
	struct emunic *e = netdev_priv(ndev);

	e->running = false;
	cancel_delayed_work_sync(&e->link_work);
	netif_stop_queue(ndev);
	netif_carrier_off(ndev);
	napi_disable(&e->napi);
	emunic_free_irqs(e);
	emunic_reset(e);
	return 0;
}

static void emunic_get_stats64(struct net_device *ndev, struct rtnl_link_stats64 *s)
{
	struct emunic *e = netdev_priv(ndev);
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&e->rxs.sync);
		s->rx_packets = e->rxs.packets;
		s->rx_bytes = e->rxs.bytes;
		s->rx_dropped = e->rxs.dropped;
	} while (u64_stats_fetch_retry(&e->rxs.sync, start));
	do {
		start = u64_stats_fetch_begin(&e->txs.sync);
		s->tx_packets = e->txs.packets;
		s->tx_bytes = e->txs.bytes;
		s->tx_dropped = e->txs.dropped;
	} while (u64_stats_fetch_retry(&e->txs.sync, start));
	s->rx_length_errors = e->rx_too_large;
}

static const struct net_device_ops emunic_netdev_ops = {
	.ndo_open = emunic_open,
	.ndo_stop = emunic_stop,
	.ndo_start_xmit = emunic_xmit,
	.ndo_get_stats64 = emunic_get_stats64,
	.ndo_validate_addr = eth_validate_addr,
};

#include "emunic_ethtool.c"

/* ------------------------------------------------------------------ PCI */

static int emunic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct net_device *ndev;
	struct emunic *e;
	u32 idreg, ver, lo, hi;
	u8 mac[ETH_ALEN];
	int err, nvec;

	err = pcim_enable_device(pdev);
	if (err)
		return err;
	/* MSI-X messages are memory writes by the function: without bus
	 * mastering QEMU drops them. */
	pci_set_master(pdev);
	err = pcim_iomap_regions(pdev, BIT(0), DRV_NAME);
	if (err)
		return err;
	err = pcim_request_region(pdev, 2, DRV_NAME);
	if (err)
		return err;
	ndev = devm_alloc_etherdev(&pdev->dev, sizeof(*e));
	if (!ndev)
		return -ENOMEM;
	SET_NETDEV_DEV(ndev, &pdev->dev);
	e = netdev_priv(ndev);
	e->pdev = pdev;
	e->ndev = ndev;
	mutex_init(&e->reg_lock);
	u64_stats_init(&e->rxs.sync);
	u64_stats_init(&e->txs.sync);
	INIT_DELAYED_WORK(&e->link_work, emunic_link_work);
	e->ivregs = pcim_iomap_table(pdev)[0];
	e->bar2_len = pci_resource_len(pdev, 2);
	/* BAR2 is memory both sides use as memory: map it cacheable. */
	e->bar2 = devm_memremap(&pdev->dev, pci_resource_start(pdev, 2), e->bar2_len, MEMREMAP_WB);
	if (IS_ERR(e->bar2))
		return PTR_ERR(e->bar2);
	if (e->bar2_len < EMUNIC_BAR0_BYTES)
		return dev_err_probe(&pdev->dev, -ENODEV, "BAR2 is %llu bytes: no register window\n", e->bar2_len);

	idreg = reg_read(e, EMUNIC_REG_ID);
	ver = reg_read(e, EMUNIC_REG_VERSION);
	if ((idreg & 0xFFFF) != EMUNIC_BAR0_VENDOR_ID || idreg >> 16 != EMUNIC_BAR0_DEVICE_ID)
		return dev_err_probe(&pdev->dev, -ENODEV,
				     "BAR2's register window has ID %#x: not an emunic device (is 'emunic device --ivshmem' the server?)\n",
				     idreg);
	if (ver >> 16 != EMUNIC_BAR0_VERSION_MAJOR)
		return dev_err_probe(&pdev->dev, -ENODEV, "register map version %u.%u, this driver knows %u\n", ver >> 16,
				     ver & 0xFFFF, EMUNIC_BAR0_VERSION_MAJOR);
	if (!(reg_read(e, EMUNIC_REG_STATUS) & EMUNIC_STATUS_MEMORY))
		return dev_err_probe(&pdev->dev, -ENODEV, "the device has no shared memory attached\n");
	lo = reg_read(e, EMUNIC_REG_MEM_BASE_LO);
	hi = reg_read(e, EMUNIC_REG_MEM_BASE_HI);
	e->mem_base = (u64)hi << 32 | lo;
	e->mem_first = reg_read(e, EMUNIC_REG_MEM_FIRST);
	if (e->mem_first < EMUNIC_BAR0_BYTES || e->mem_first >= e->bar2_len)
		return dev_err_probe(&pdev->dev, -ENODEV, "the device reserves %u bytes of BAR2\n", e->mem_first);
	if (!is_power_of_2(ring_entries) || ring_entries < 16 || ring_entries > 1024)
		return dev_err_probe(&pdev->dev, -EINVAL, "ring_entries=%u\n", ring_entries);
	e->repost = devm_kcalloc(&pdev->dev, ring_entries, sizeof(u32), GFP_KERNEL);
	if (!e->repost)
		return -ENOMEM;

	nvec = pci_alloc_irq_vectors(pdev, EMUNIC_BAR0_VECTORS, EMUNIC_BAR0_VECTORS, PCI_IRQ_MSIX);
	if (nvec < 0)
		return dev_err_probe(&pdev->dev, nvec, "MSI-X: QEMU's ivshmem-doorbell needs vectors=%d or more\n",
				     EMUNIC_BAR0_VECTORS);

	lo = reg_read(e, EMUNIC_REG_MAC_LO);
	hi = reg_read(e, EMUNIC_REG_MAC_HI);
	mac[0] = lo, mac[1] = lo >> 8, mac[2] = lo >> 16, mac[3] = lo >> 24, mac[4] = hi, mac[5] = hi >> 8;
	if (is_valid_ether_addr(mac))
		eth_hw_addr_set(ndev, mac);
	else
		eth_hw_addr_random(ndev);
	e->mtu = reg_read(e, EMUNIC_REG_MTU);
	ndev->min_mtu = ETH_MIN_MTU;
	ndev->max_mtu = min_t(u32, e->mtu ? e->mtu : ETH_DATA_LEN, BUF_SIZE - ETH_HLEN - VLAN_HLEN);
	ndev->mtu = ndev->max_mtu;
	strscpy(ndev->name, "emunic%d", IFNAMSIZ);
	ndev->netdev_ops = &emunic_netdev_ops;
	ndev->ethtool_ops = &emunic_ethtool_ops;
	/* Scatter-gather and transmit checksums: the copy into BAR2 gathers
	 * the fragments (emunic_xmit). A device with FeatTxCsum fills in TCP
	 * and UDP checksums over IPv4 and IPv6, the checksums IP_CSUM and
	 * IPV6_CSUM promise; without it, the copy sums whatever the stack
	 * leaves (HW_CSUM). */
	if (reg_read(e, EMUNIC_REG_DEV_FEATURES) & EMUNIC_FEAT_TX_CSUM)
		ndev->features = NETIF_F_SG | NETIF_F_IP_CSUM | NETIF_F_IPV6_CSUM | NETIF_F_RXCSUM;
	else
		ndev->features = NETIF_F_SG | NETIF_F_HW_CSUM | NETIF_F_RXCSUM;
	ndev->hw_features = ndev->features;
	netif_napi_add(ndev, &e->napi, emunic_poll);
	pci_set_drvdata(pdev, e);
	netif_carrier_off(ndev);

	/* Whatever a driver before this one left running stops here. */
	emunic_reset(e);
	err = register_netdev(ndev);
	if (err) {
		netif_napi_del(&e->napi);
		pci_free_irq_vectors(pdev);
		return err;
	}
	netdev_info(ndev, "emunic %u.%u on ivshmem peer %u: %llu bytes of BAR2, MemBase %#llx, MTU %u, %pM\n", ver >> 16,
		    ver & 0xFFFF, readl(e->ivregs + EMUNIC_IVSHMEM_IVPOSITION), e->bar2_len, e->mem_base, e->mtu,
		    ndev->dev_addr);
	return 0;
}

static void emunic_remove(struct pci_dev *pdev)
{
	struct emunic *e = pci_get_drvdata(pdev);

	unregister_netdev(e->ndev);
	netif_napi_del(&e->napi);
	/* The device forgets the rings before this driver's memory of them goes. */
	emunic_reset(e);
	pci_free_irq_vectors(pdev);
}

static const struct pci_device_id emunic_ids[] = {
	{ PCI_DEVICE(EMUNIC_IVSHMEM_VENDOR, EMUNIC_IVSHMEM_DEVICE) },
	{}
};
MODULE_DEVICE_TABLE(pci, emunic_ids);

static struct pci_driver emunic_driver = {
	.name = DRV_NAME,
	.id_table = emunic_ids,
	.probe = emunic_probe,
	.remove = emunic_remove,
};
module_pci_driver(emunic_driver);

MODULE_DESCRIPTION("emunic: the emulated NIC's legacy rings as a netdev, over QEMU's ivshmem-doorbell");
MODULE_LICENSE("GPL");
