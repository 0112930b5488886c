#!/usr/bin/env python3
"""mpa_peer.py: a TCP listener on the host that plays an iWARP responder only as far as
the MPA exchange, to see byte for byte what an initiator (siw in the VM) sends.

    mpa_peer.py --listen 10.77.0.1:7174 [--reply none|rev1|rev2|reject] [--count N]

For each connection it prints the MPA Request (its 20-byte header in hex, then the
flags, the revision and the private data, with RFC 6581's IRD/ORD word decoded), then
answers as --reply says and, after a reply that accepts, prints each FPDU that follows
(its DDP and RDMAP header fields). It is a probe, not a peer: it never answers an FPDU.
Output lines start with REQ, REP, FPDU or END so that scripts can pick them out.
"""

import argparse
import socket
import struct
import sys

# RFC 5044 section 7.1: the 16-byte key, then flags, revision and private data length.
REQ_KEY = b"MPA ID Req Frame"
REP_KEY = b"MPA ID Rep Frame"
HDR_LEN = 20
OFF_FLAGS, OFF_REV, OFF_PDLEN = 16, 17, 18
FLAG_MARKERS, FLAG_CRC, FLAG_REJECT = 0x80, 0x40, 0x20
# Bits siw uses in the reserved part of the flags byte (siw_cm.h): "enhanced" (siw
# insists on it in a revision-2 reply) and its private GSO extension.
FLAG_SIW_ENHANCED, FLAG_SIW_GSO = 0x10, 0x08
FLAG_NAMES = ((FLAG_MARKERS, "M"), (FLAG_CRC, "C"), (FLAG_REJECT, "R"),
              (FLAG_SIW_ENHANCED, "siw-enhanced"), (FLAG_SIW_GSO, "siw-gso"))

# RFC 6581 section 7.1: the first four bytes of revision-2 private data.
IRD_P2P, IRD_ZERO_SEND_RTR = 0x8000, 0x4000
ORD_WRITE_RTR, ORD_READ_RTR = 0x8000, 0x4000
IRD_ORD_MASK = 0x3FFF

# RFC 5041/5040: the DDP control byte and the RDMAP byte after the MPA length.
DDP_TAGGED, DDP_LAST = 0x80, 0x40
RDMAP_OPCODES = {0: "RDMA Write", 1: "RDMA Read Request", 2: "RDMA Read Response",
                 3: "Send", 4: "Send with Invalidate", 5: "Send with SE",
                 6: "Send with SE and Invalidate", 7: "Terminate"}
TAGGED_HDR = 2 + 4 + 8        # control, STag, tagged offset
UNTAGGED_HDR = 2 + 4 + 4 + 4 + 4  # control, reserved for the ULP, QN, MSN, MO


def read_exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError(f"the peer closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def flag_text(flags):
    return " ".join(name for bit, name in FLAG_NAMES if flags & bit) or "-"


def describe_rr(label, hdr, pdata):
    flags, rev = hdr[OFF_FLAGS], hdr[OFF_REV]
    print(f"{label} header {hdr.hex(' ')}")
    print(f"{label} key={hdr[:16].decode('ascii', 'replace')!r} flags=0x{flags:02x} "
          f"({flag_text(flags)}) revision={rev} private-data={len(pdata)} bytes")
    rest = pdata
    if rev == 2 and len(pdata) >= 4:
        ird, ord_ = struct.unpack(">HH", pdata[:4])
        modes = [name for bit, word, name in ((IRD_P2P, ird, "P2P"),
                                              (IRD_ZERO_SEND_RTR, ird, "send-RTR"),
                                              (ORD_WRITE_RTR, ord_, "write-RTR"),
                                              (ORD_READ_RTR, ord_, "read-RTR")) if word & bit]
        print(f"{label} ird/ord {pdata[:4].hex(' ')}: IRD={ird & IRD_ORD_MASK} "
              f"ORD={ord_ & IRD_ORD_MASK} {' '.join(modes) or 'no peer-to-peer'}")
        rest = pdata[4:]
    if rest:
        print(f"{label} application data {rest.hex(' ')}")


def reply_for(mode, req_hdr, req_pdata):
    """The reply --reply asks for, echoing what a well-behaved responder would."""
    flags = req_hdr[OFF_FLAGS] & FLAG_CRC  # take CRC if asked, markers never
    if mode == "rev1":
        return REP_KEY + bytes([flags, 1]) + struct.pack(">H", 0)
    if mode == "reject":
        rev = req_hdr[OFF_REV]
        return REP_KEY + bytes([FLAG_REJECT, rev]) + struct.pack(">H", 0)
    # rev2: siw's initiator wants the enhanced bit back and IRD/ORD of 1 each way;
    # in peer-to-peer mode, the mode the initiator offered first (a Write RTR).
    ird, ord_ = 1, 1
    if len(req_pdata) >= 4:
        req_ird, req_ord = struct.unpack(">HH", req_pdata[:4])
        if req_ird & IRD_P2P:
            ird |= IRD_P2P
            ord_ |= ORD_WRITE_RTR if req_ord & ORD_WRITE_RTR else (req_ord & ORD_READ_RTR)
    pdata = struct.pack(">HH", ird, ord_)
    return REP_KEY + bytes([flags | FLAG_SIW_ENHANCED, 2]) + struct.pack(">H", len(pdata)) + pdata


def dump_fpdus(conn, crc):
    while True:
        try:
            (ulpdu_len,) = struct.unpack(">H", read_exactly(conn, 2))
            body = read_exactly(conn, ulpdu_len)
            pad = -(2 + ulpdu_len) % 4
            tail = read_exactly(conn, pad + 4)
        except (EOFError, OSError) as e:
            print(f"END {e}")
            return
        ctl, rdmap = body[0], body[1]
        op = rdmap & 0x0F
        name = RDMAP_OPCODES.get(op, f"opcode {op}")
        if ctl & DDP_TAGGED:
            stag, to = struct.unpack(">IQ", body[2:TAGGED_HDR])
            where, payload = f"STag=0x{stag:08x} TO={to}", body[TAGGED_HDR:]
        else:
            qn, msn, mo = struct.unpack(">III", body[6:UNTAGGED_HDR])
            where, payload = f"QN={qn} MSN={msn} MO={mo}", body[UNTAGGED_HDR:]
        crc_field = tail[pad:].hex()
        print(f"FPDU {name} {where} last={int(bool(ctl & DDP_LAST))} "
              f"payload={len(payload)} crc={crc_field if crc else 'unused (' + crc_field + ')'}")
        if payload:
            print(f"FPDU payload {payload[:64].hex(' ')}{' ...' if len(payload) > 64 else ''}")


def serve_one(conn, mode):
    hdr = read_exactly(conn, HDR_LEN)
    if hdr[:16] != REQ_KEY:
        print(f"REQ not an MPA Request: {hdr.hex(' ')}")
        return
    (pdlen,) = struct.unpack(">H", hdr[OFF_PDLEN:OFF_PDLEN + 2])
    pdata = read_exactly(conn, pdlen)
    describe_rr("REQ", hdr, pdata)
    if mode == "none":
        # Say nothing: the initiator's MPA timer decides what happens.
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        print("END the initiator closed")
        return
    rep = reply_for(mode, hdr, pdata)
    conn.sendall(rep)
    describe_rr("REP", rep[:HDR_LEN], rep[HDR_LEN:])
    if mode in ("rev1", "rev2"):
        dump_fpdus(conn, bool(hdr[OFF_FLAGS] & FLAG_CRC))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="0.0.0.0:7174", help="ADDR:PORT (rping's port is 7174)")
    ap.add_argument("--reply", choices=("none", "rev1", "rev2", "reject"), default="rev2")
    ap.add_argument("--count", type=int, default=1, help="connections to take before exiting")
    args = ap.parse_args()
    host, _, port = args.listen.rpartition(":")
    with socket.create_server((host, int(port)), reuse_port=False) as srv:
        print(f"listening on {host}:{port}", flush=True)
        for _ in range(args.count):
            conn, peer = srv.accept()
            with conn:
                print(f"connection from {peer[0]}:{peer[1]}")
                try:
                    serve_one(conn, args.reply)
                except EOFError as e:
                    print(f"END {e}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
