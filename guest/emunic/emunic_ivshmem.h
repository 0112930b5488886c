/* SPDX-License-Identifier: GPL-2.0 */
/*
 * QEMU's ivshmem-doorbell PCI device, as emunic.ko uses it (QEMU's
 * docs/specs/ivshmem-spec.rst; docs/guest.md). These are ivshmem's, not
 * emunic's: emunic's own register block is in emunic_abi.h.
 */
#ifndef EMUNIC_IVSHMEM_H
#define EMUNIC_IVSHMEM_H

#define EMUNIC_IVSHMEM_VENDOR 0x1af4 /* Red Hat, Inc. (virtio's vendor) */
#define EMUNIC_IVSHMEM_DEVICE 0x1110 /* Inter-VM shared memory */

/* ivshmem's BAR0 registers (u32). */
#define EMUNIC_IVSHMEM_INTR_MASK 0x00
#define EMUNIC_IVSHMEM_INTR_STATUS 0x04
#define EMUNIC_IVSHMEM_IVPOSITION 0x08 /* this guest's peer ID */
#define EMUNIC_IVSHMEM_DOORBELL 0x0C   /* write: peer ID << 16 | vector */

/* The device process is ivshmem peer 0 (nic/ivshmem: DevicePeerID). */
#define EMUNIC_IVSHMEM_PEER_DEVICE 0

/* The device's ivshmem vectors, which the guest rings (docs/bar0.md, "Over
 * ivshmem"): 0 says the register window changed, 1 + n is ring n's doorbell. */
#define EMUNIC_IVVEC_REGISTERS 0
#define EMUNIC_IVVEC_RING(n) (1 + (n))

/* Ring r's register reg in emunic's register block. */
#define BAR0_RING(r, reg) (EMUNIC_BAR0_RING_BASE + (r) * EMUNIC_BAR0_RING_STRIDE + (reg))

#endif
