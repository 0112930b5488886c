// SPDX-License-Identifier: GPL-2.0
/*
 * emunic.ko's ethtool operations, included by emunic.c: the device's
 * counters from the counter area it publishes into BAR2 (docs/abi-blocks.md,
 * "Counter publication area"), each found by its counter ID in
 * emunic_abi.h, then the driver's own.
 */

/* The stat block's counters by ID, under ethtool's names. */
#define EMUNIC_DEV_STATS(X)                                                                               \
	X(RX_FRAMES, "dev_rx_frames") X(RX_BYTES, "dev_rx_bytes") X(TX_FRAMES, "dev_tx_frames")             \
	X(TX_BYTES, "dev_tx_bytes") X(RX_DROP_SHORT, "dev_rx_drop_short")                                  \
	X(RX_DROP_BAD_CHECKSUM, "dev_rx_drop_bad_checksum") X(RX_DROP_ETHER_TYPE, "dev_rx_drop_ether_type") \
	X(RX_DROP_OVERSIZE, "dev_rx_drop_oversize") X(RX_DROP_NO_BUFFER, "dev_rx_drop_no_buffer")          \
	X(RX_DROP_NOT_FOR_US, "dev_rx_drop_not_for_us") X(RX_DROP_FIFO, "dev_rx_drop_fifo")                \
	X(TX_DROP_BAD_DESC, "dev_tx_drop_bad_desc") X(TX_DROP_PORT_ERROR, "dev_tx_drop_port_error")        \
	X(DMA_ERRORS, "dev_dma_errors") X(RING_PHASE_ERRORS, "dev_ring_phase_errors")                      \
	X(NOTIFY_POSTED, "dev_notify_posted") X(NOTIFY_DROP_RING_FULL, "dev_notify_drop_ring_full")        \
	X(INTERRUPTS, "dev_interrupts") X(INTERRUPTS_COALESCED, "dev_interrupts_coalesced")                \
	X(DOORBELLS, "dev_doorbells") X(PARKS, "dev_parks")                                                \
	X(TX_CSUM, "dev_tx_csum") X(TX_DROP_CSUM, "dev_tx_drop_csum")

#define DEV_STAT_ID(id, name) EMUNIC_STAT_##id,
#define DEV_STAT_NAME(id, name) name,
static const u32 emunic_dev_stat_ids[] = { EMUNIC_DEV_STATS(DEV_STAT_ID) };
static const char *const emunic_dev_stat_names[] = { EMUNIC_DEV_STATS(DEV_STAT_NAME) };

static const char *const emunic_drv_stat_names[] = {
	"drv_rx_phase_errors", "drv_rx_bad_notifications", "drv_rx_frame_too_large", "drv_tx_ring_full",
	"drv_counter_area_torn", "drv_tx_csum_offload", "drv_tx_csum_sw",
};

#define EMUNIC_NDEV_STATS ARRAY_SIZE(emunic_dev_stat_ids)
#define EMUNIC_NDRV_STATS ARRAY_SIZE(emunic_drv_stat_names)

static void emunic_get_drvinfo(struct net_device *ndev, struct ethtool_drvinfo *info)
{
	struct emunic *e = netdev_priv(ndev);
	u32 ver = reg_read(e, EMUNIC_REG_VERSION);

	strscpy(info->driver, DRV_NAME, sizeof(info->driver));
	snprintf(info->fw_version, sizeof(info->fw_version), "regs %u.%u", ver >> 16, ver & 0xFFFF);
	strscpy(info->bus_info, pci_name(e->pdev), sizeof(info->bus_info));
}

static int emunic_get_sset_count(struct net_device *ndev, int sset)
{
	return sset == ETH_SS_STATS ? EMUNIC_NDEV_STATS + EMUNIC_NDRV_STATS : -EOPNOTSUPP;
}

static void emunic_get_strings(struct net_device *ndev, u32 sset, u8 *data)
{
	size_t i;

	if (sset != ETH_SS_STATS)
		return;
	for (i = 0; i < EMUNIC_NDEV_STATS; i++)
		ethtool_puts(&data, emunic_dev_stat_names[i]);
	for (i = 0; i < EMUNIC_NDRV_STATS; i++)
		ethtool_puts(&data, emunic_drv_stat_names[i]);
}

/* emunic_get_ethtool_stats copies the stat block out of the counter area
 * under its sequence word (odd while the device rewrites it; the same
 * before and after a consistent copy). A device that never lets go is
 * reported as torn, with the last copy. */
static void emunic_get_ethtool_stats(struct net_device *ndev, struct ethtool_stats *stats, u64 *data)
{
	struct emunic *e = netdev_priv(ndev);
	const u64 *gen = (const u64 *)(e->counters + EMUNIC_SA_OFF_GEN);
	const u64 *block = (const u64 *)(e->counters + EMUNIC_STAT_AREA_STATS_OFF);
	u64 seq, torn = 1;
	size_t i;
	int tries;

	if (!e->running || !(reg_read(e, EMUNIC_REG_DRV_FEATURES) & EMUNIC_FEAT_COUNTERS)) {
		memset(data, 0, EMUNIC_NDEV_STATS * sizeof(u64));
		torn = 0;
		goto driver;
	}
	for (tries = 0; tries < 1000 && torn; tries++) {
		seq = le64_to_cpu(smp_load_acquire(gen));
		if (seq & 1) {
			cpu_relax();
			continue;
		}
		for (i = 0; i < EMUNIC_NDEV_STATS; i++)
			data[i] = le64_to_cpu(READ_ONCE(block[emunic_dev_stat_ids[i]]));
		smp_rmb();
		torn = le64_to_cpu(READ_ONCE(*gen)) != seq;
	}
driver:
	data += EMUNIC_NDEV_STATS;
	data[0] = e->rx_phase_errors;
	data[1] = e->rx_bad_notifications;
	data[2] = e->rx_too_large;
	data[3] = e->tx_ring_full;
	data[4] = torn;
	data[5] = e->tx_csum_offload;
	data[6] = e->tx_csum_sw;
}

static const struct ethtool_ops emunic_ethtool_ops = {
	.get_drvinfo = emunic_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_sset_count = emunic_get_sset_count,
	.get_strings = emunic_get_strings,
	.get_ethtool_stats = emunic_get_ethtool_stats,
};
