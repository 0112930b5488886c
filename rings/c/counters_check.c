/*
 * counters_check: reads a counter publication area (docs/abi-blocks.md,
 * "Counter publication area") from the file named by its argument, as a C
 * driver reads it from host memory, and prints every counter it finds by
 * ID through the generated header emunic_abi.h only: each group's place
 * from the header's counts, each counter at its ID's offset, and a few by
 * their named IDs. TestCountersFromC writes the area and checks the lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emunic_abi.h"

static unsigned char area[1 << 16];

static uint64_t word(size_t off) {
	uint64_t v;
	memcpy(&v, area + off, 8); /* little-endian hosts, as the area */
	return v;
}

int main(int argc, char **argv) {
	if (argc != 2) return 2;
	FILE *f = fopen(argv[1], "rb");
	if (!f) return 2;
	size_t n = fread(area, 1, sizeof area, f);
	fclose(f);
	struct emunic_counter_area_header h;
	if (n < sizeof h) return 2;
	memcpy(&h, area, sizeof h);
	if (h.ring_n != EMUNIC_RING_COUNTER_COUNT) return 3;

	size_t rings = EMUNIC_STAT_AREA_STATS_OFF + EMUNIC_STAT_BLOCK_SIZE;
	size_t engine = rings + (size_t)EMUNIC_STAT_AREA_RINGS * h.ring_n * 8;
	size_t occ = engine + (size_t)h.engine_n * 8;
	size_t qps = occ + (size_t)h.occ_n * 8;
	size_t qprec = EMUNIC_QP_RECORD_HEADER + (size_t)h.qpn * 8;
	if (qps + h.num_qps * qprec > n) return 4;

	for (uint32_t r = 0; r < EMUNIC_STAT_AREA_RINGS; r++)
		for (uint32_t id = 0; id < h.ring_n; id++)
			printf("ring %u %u %llu\n", r, id, (unsigned long long)word(rings + ((size_t)r * h.ring_n + id) * 8));
	for (uint32_t id = 0; id < h.engine_n; id++) printf("engine %u %llu\n", id, (unsigned long long)word(engine + id * 8));
	for (uint32_t id = 0; id < h.occ_n; id++) printf("occupancy %u %llu\n", id, (unsigned long long)word(occ + id * 8));
	for (uint32_t i = 0; i < h.num_qps; i++) {
		size_t rec = qps + i * qprec;
		uint32_t idx;
		memcpy(&idx, area + rec, 4);
		for (uint32_t id = 0; id < h.qpn; id++)
			printf("qp %u %u %llu\n", idx, id, (unsigned long long)word(rec + EMUNIC_QP_RECORD_HEADER + id * 8));
	}
	/* A few by name: the IDs a driver writes in its code. */
	printf("named tx_entries %llu\n",
	       (unsigned long long)word(rings + ((size_t)EMUNIC_AREA_RING_TX * h.ring_n + EMUNIC_RING_CTR_ENTRIES) * 8));
	printf("named tx_bytes %llu\n", (unsigned long long)word(engine + EMUNIC_ENG_TX_BYTES * 8));
	printf("named sack_recoveries %llu\n", (unsigned long long)word(engine + EMUNIC_ENG_SACK_RECOVERIES * 8));
	printf("named ooo_pages_used %llu\n", (unsigned long long)word(occ + EMUNIC_OCC_OOO_PAGES_USED * 8));
	printf("named rtrs_recv %llu\n", (unsigned long long)word(qps + EMUNIC_QP_RECORD_HEADER + EMUNIC_QP_CTR_RTRS_RECV * 8));
	return 0;
}
