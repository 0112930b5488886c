/*
 * abi_check: a C program built against emunic_abi.h by the rings tests. It
 * fills blocks through the header's structs and constants and writes their
 * bytes to stdout; the Go test decodes them with the Go decoders and
 * compares every field, so the header and the Go layout agree on the bytes,
 * not just on offsets. Little-endian hosts only (as the ABI's byte order).
 */
#include <stdio.h>
#include <string.h>

#include "emunic_abi.h"

static void emit(const void *p, size_t n) {
	if (fwrite(p, 1, n, stdout) != n) {
		perror("abi_check: write");
	}
}

int main(void) {
	struct emunic_command_ring_entry c;
	memset(&c, 0, sizeof c);
	c.opcode = EMUNIC_OP_OFFLOAD;
	c.flags = 0x0102;
	c.conn = 0x03040506;
	c.status = EMUNIC_STATUS_BAD_STATE;
	c.result = 0x1112131415161718ULL;
	c.tag = 0x2122232425262728ULL;
	c.addr = EMUNIC_ARENA_BASE + 0x40;
	c.len = EMUNIC_CONN_STATE_SIZE;
	c.arg0 = 0x31323334;
	c.arg1 = 0x41424344;
	c.arg2 = 0x51525354;
	c.arg3 = 0x6162636465666768ULL;
	emit(&c, sizeof c);

	struct emunic_notification_ring_entry n;
	memset(&n, 0, sizeof n);
	n.flags = EMUNIC_NTF_ACK_THRESHOLD | EMUNIC_NTF_DUP_ACK;
	n.conn = 7;
	n.seq = 0x01020304;
	n.ack = 0x05060708;
	n.ack_count = 9;
	n.len = 1460;
	n.aux = 11;
	emit(&n, sizeof n);

	struct emunic_send_queue_entry s;
	memset(&s, 0, sizeof s);
	s.opcode = EMUNIC_WR_RDMA_WRITE;
	s.flags = EMUNIC_WR_SIGNALED;
	s.num_sge = 1;
	s.wr_id = 0xA1A2A3A4A5A6A7A8ULL;
	s.remote_addr = 0x1000;
	s.r_key = 0x00123456;
	struct emunic_scatter_gather_element g;
	memset(&g, 0, sizeof g);
	g.addr = EMUNIC_ARENA_BASE + 0x2000;
	g.length = 4096;
	g.l_key = 0x00654321;
	memcpy(s.sgl, &g, sizeof g);
	emit(&s, sizeof s);

	/* The connection info block is the device's to write and a C host's to
	 * read: the same bytes through the header's struct. */
	struct emunic_connection_info_block ci;
	memset(&ci, 0, sizeof ci);
	ci.version = EMUNIC_CONN_INFO_VERSION;
	ci.state = EMUNIC_STATE_ESTABLISHED;
	ci.snd_scale = 7;
	ci.rcv_scale = 9;
	ci.snd_una = 0x01020304;
	ci.snd_nxt = 0x01020404;
	ci.rcv_nxt = 0x05060708;
	ci.snd_wnd = 65535;
	ci.rcv_wnd = 131072;
	ci.mss = 1448;
	ci.cwnd = 28960;
	ci.ssthresh = 14480;
	ci.srtt = 250;
	ci.rtt_var = 60;
	ci.min_rtt = 180;
	ci.rto = 200000;
	ci.ooo_bytes = 2896;
	ci.retrans = 0x1112131415161718ULL;
	ci.fast_recoveries = 2;
	ci.rtos = 3;
	ci.tlps = 4;
	ci.segs_in = 0x2122232425262728ULL;
	ci.segs_out = 0x3132333435363738ULL;
	ci.bytes_acked = 0x4142434445464748ULL;
	ci.bytes_received = 0x5152535455565758ULL;
	emit(&ci, sizeof ci);
	return 0;
}
