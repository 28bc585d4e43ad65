#!/usr/bin/env python3
"""Writes RoCEv2 and InfiniBand pcap traces of RDMA attacks mixed with benign traffic.

Scenarios (see docs/acl.md for the policies that stop them):

  atomic-exhaustion    floods of FETCH_ADD / COMPARE_SWAP at the lock QP
  connect-exhaustion   floods of CM REQs from strangers and spoofed sources
  fraudulent-disconnect  DREQs for a live connection sent by a third party, or
                       "from" the real peer but off a UD QP (DETH SrcQP != 1)
  mr-injection         RDMA WRITEs into a connected QP's memory region from elsewhere
  mr-unauthorised      RDMA READs of the protected region by a client without rights
  malformed            truncated / inconsistent packets

Each trace comes with a .labels file: one line per packet, "<index> <benign|attack> <scenario>
<description>". The output is deterministic (fixed timestamps, no randomness), so the traces
committed next to the tests can be regenerated and compared byte for byte.

Usage: gen.py OUTDIR      (writes attacks.pcap/.labels and ib.pcap/.labels)
Needs scapy (Debian: python3-scapy; PyPI: scapy).
"""

import os
import struct
import sys

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import PcapWriter

ROCE_PORT = 4791
SERVER = "10.0.0.10"
CLIENT_A = "10.0.1.1"     # owns QP 0x100 on the server; may use the lock QP
CLIENT_B = "10.0.1.2"     # owns QP 0x101; may read the public region only
ATTACKER = "10.0.66.6"
QP_A, QP_B, QP_LOCK = 0x100, 0x101, 0x200
CLIENT_QP_A, CLIENT_QP_B = 0x500, 0x501
PUBLIC_VA = 0x7F0000000000
SECRET_VA = 0x7F0000100000
LOCK_VA = 0x7F0000200000
GSI_QKEY = 0x80010000

# Opcodes (InfiniBand Architecture Specification vol. 1, table 38).
SEND_ONLY, RDMA_WRITE_ONLY, RDMA_READ_REQUEST = 0x04, 0x0A, 0x0C
RDMA_READ_RESPONSE_ONLY, ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE = 0x10, 0x11, 0x12
COMPARE_SWAP, FETCH_ADD, UD_SEND_ONLY = 0x13, 0x14, 0x64

# CM attribute IDs.
REQ, REJ, REP, RTU, DREQ, DREP = 0x10, 0x12, 0x13, 0x14, 0x15, 0x16


def reth(va, rkey, length):
    return struct.pack("!QII", va, rkey, length)


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def aeth(syndrome=0, msn=0):
    return struct.pack("!I", (syndrome << 24) | (msn & 0xFFFFFF))


def deth(src_qp, qkey=GSI_QKEY):
    return struct.pack("!II", qkey, src_qp & 0xFFFFFF)


def cm_mad(attr, local_comm, remote_comm=0, qpn=0):
    """A 256-byte CM MAD (base version 1, class 0x07, class version 2, method Send)."""
    hdr = struct.pack("!BBBBHHQHHI", 1, 0x07, 2, 0x03, 0, 0, local_comm, attr, 0, 0)
    data = bytearray(232)
    struct.pack_into("!I", data, 0, local_comm)
    if attr != REQ:
        struct.pack_into("!I", data, 4, remote_comm)
    qpn_bytes = struct.pack("!I", qpn & 0xFFFFFF)[1:]
    offset = {REQ: 32, REP: 12, DREQ: 8}.get(attr)
    if offset is not None:
        data[offset:offset + 3] = qpn_bytes
    return hdr + bytes(data)


class Trace:
    def __init__(self):
        self.packets = []
        self.labels = []

    def add(self, pkt, kind, scenario, what):
        self.packets.append(pkt)
        self.labels.append(f"{len(self.labels)} {kind} {scenario} {what}")

    def write(self, path, linktype):
        writer = PcapWriter(path, linktype=linktype, sync=True)
        writer.write_header(None)
        for i, p in enumerate(self.packets):
            data = bytes(p)
            writer.write_packet(data, sec=1_700_000_000, usec=i, caplen=len(data), wirelen=len(data))
        writer.close()
        with open(os.path.splitext(path)[0] + ".labels", "w") as f:
            f.write("\n".join(self.labels) + "\n")


def roce(src, dst, opcode, dqpn, ext=b"", payload=b"", psn=0, sport=49152):
    return (Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
            / IP(src=src, dst=dst, flags="DF", ttl=64)
            / UDP(sport=sport, dport=ROCE_PORT, chksum=0)
            / BTH(opcode=opcode, dqpn=dqpn, psn=psn)
            / Raw(ext + payload))


def cm(src, dst, attr, local_comm, remote_comm=0, qpn=0, src_qp=1):
    return roce(src, dst, UD_SEND_ONLY, 1, deth(src_qp), cm_mad(attr, local_comm, remote_comm, qpn))


def attacks():
    t = Trace()
    # Benign: A and B connect (REQ, REP, RTU); comm IDs are chosen by each side.
    t.add(cm(CLIENT_A, SERVER, REQ, 0xA001, qpn=CLIENT_QP_A), "benign", "cm", "A REQ")
    t.add(cm(SERVER, CLIENT_A, REP, 0x5001, 0xA001, qpn=QP_A), "benign", "cm", "server REP to A")
    t.add(cm(CLIENT_A, SERVER, RTU, 0xA001, 0x5001), "benign", "cm", "A RTU")
    t.add(cm(CLIENT_B, SERVER, REQ, 0xB001, qpn=CLIENT_QP_B), "benign", "cm", "B REQ")
    t.add(cm(SERVER, CLIENT_B, REP, 0x5002, 0xB001, qpn=QP_B), "benign", "cm", "server REP to B")
    t.add(cm(CLIENT_B, SERVER, RTU, 0xB001, 0x5002), "benign", "cm", "B RTU")

    # Benign data path.
    for i in range(6):
        t.add(roce(CLIENT_A, SERVER, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA + i * 64, 0x1234, 64), b"\xab" * 64, psn=i),
              "benign", "data", "A writes its region")
        t.add(roce(SERVER, CLIENT_A, ACKNOWLEDGE, CLIENT_QP_A, aeth(0, i), psn=i), "benign", "data", "server ACK")
    for i in range(4):
        t.add(roce(CLIENT_B, SERVER, RDMA_READ_REQUEST, QP_B, reth(PUBLIC_VA + i * 4096, 0x1234, 4096), psn=i),
              "benign", "data", "B reads the public region")
        t.add(roce(SERVER, CLIENT_B, RDMA_READ_RESPONSE_ONLY, CLIENT_QP_B, aeth(0, i), b"\x00" * 32, psn=i),
              "benign", "data", "read response")
    t.add(roce(CLIENT_A, SERVER, RDMA_READ_REQUEST, QP_A, reth(SECRET_VA, 0x1234, 256), psn=7),
          "benign", "data", "A (authorised) reads the protected region")
    for i in range(3):
        t.add(roce(CLIENT_A, SERVER, COMPARE_SWAP, QP_LOCK, atomic_eth(LOCK_VA, 0x77, 1, 0), psn=10 + i),
              "benign", "data", "A takes the lock")
        t.add(roce(SERVER, CLIENT_A, ATOMIC_ACKNOWLEDGE, CLIENT_QP_A, aeth(0, i) + struct.pack("!Q", 0), psn=10 + i),
              "benign", "data", "atomic ACK")
    t.add(roce(CLIENT_B, SERVER, SEND_ONLY, QP_B, payload=b"hello", psn=9), "benign", "data", "B sends")

    # Atomic-verb exhaustion: FAA/CAS floods from B (no lock rights) and from a stranger.
    for i in range(12):
        src = CLIENT_B if i % 2 else ATTACKER
        op = FETCH_ADD if i % 3 else COMPARE_SWAP
        t.add(roce(src, SERVER, op, QP_LOCK, atomic_eth(LOCK_VA, 0x77, 1, 0), psn=100 + i),
              "attack", "atomic-exhaustion", f"atomic flood from {src}")
    t.add(roce(CLIENT_A, SERVER, FETCH_ADD, QP_A, atomic_eth(PUBLIC_VA, 0x1234, 1, 0), psn=99),
          "attack", "atomic-exhaustion", "A aims atomics at its data QP")

    # QP connect exhaustion: REQ floods from a stranger and from spoofed sources.
    for i in range(16):
        src = ATTACKER if i % 2 else f"10.0.77.{i + 1}"
        t.add(cm(src, SERVER, REQ, 0xE000 + i, qpn=0x900 + i), "attack", "connect-exhaustion", f"REQ from {src}")
    t.add(roce(CLIENT_A, SERVER, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA, 0x1234, 8), b"\x01" * 8, psn=20),
          "benign", "data", "A keeps working during the flood")

    # Fraudulent disconnect: a third party tears down A's connection with guessed IDs ...
    t.add(cm(ATTACKER, SERVER, DREQ, 0xA001, 0x5001, qpn=QP_A), "attack", "fraudulent-disconnect",
          "DREQ from a third party")
    t.add(cm(ATTACKER, CLIENT_A, DREQ, 0x5001, 0xA001, qpn=CLIENT_QP_A), "attack", "fraudulent-disconnect",
          "DREQ to A posing as the server")
    # ... or spoofs A's address but can only send from a UD QP, not QP1.
    t.add(cm(CLIENT_A, SERVER, DREQ, 0xA001, 0x5001, qpn=QP_A, src_qp=0x4242), "attack", "fraudulent-disconnect",
          "DREQ spoofing A from a UD QP")
    t.add(cm(CLIENT_A, SERVER, DREP, 0xA001, 0x5001, src_qp=0x4242), "attack", "fraudulent-disconnect",
          "forged DREP")
    t.add(cm(ATTACKER, SERVER, RTU, 0xA001, 0x5001), "attack", "fraudulent-disconnect", "RTU for someone else's connection")

    # Packet injection into a memory region: WRITEs into A's QP from elsewhere.
    for i in range(6):
        src = ATTACKER if i % 2 else CLIENT_B
        t.add(roce(src, SERVER, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA, 0x1234, 16), b"\xee" * 16, psn=21 + i),
              "attack", "mr-injection", f"WRITE into A's QP from {src}")
    t.add(roce(ATTACKER, SERVER, SEND_ONLY, QP_B, payload=b"spoof", psn=10), "attack", "mr-injection",
          "SEND into B's QP from a stranger")

    # Unauthorised MR access: B reads (or writes) the protected region through its own QP.
    for i in range(4):
        t.add(roce(CLIENT_B, SERVER, RDMA_READ_REQUEST, QP_B, reth(SECRET_VA + i * 4096, 0x1234, 4096), psn=30 + i),
              "attack", "mr-unauthorised", "B reads the protected region")
    t.add(roce(CLIENT_B, SERVER, RDMA_WRITE_ONLY, QP_B, reth(SECRET_VA + 0x800, 0x1234, 8), b"\x02" * 8, psn=40),
          "attack", "mr-unauthorised", "B writes the protected region")

    # Malformed: truncated RETH, bad UDP length, unknown opcode.
    good = bytes(roce(CLIENT_A, SERVER, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA, 0x1234, 8), b"\x03" * 8, psn=50))
    t.add(good[:14 + 20 + 8 + 12 + 6], "attack", "malformed", "truncated in the RETH")
    bad_udp = bytearray(good)
    struct.pack_into("!H", bad_udp, 14 + 20 + 4, 4000)
    t.add(bytes(bad_udp), "attack", "malformed", "UDP length beyond the frame")
    t.add(roce(CLIENT_A, SERVER, 0x15, QP_A, psn=51), "attack", "malformed", "reserved opcode 0x15")

    # Benign: B disconnects properly; the server answers.
    t.add(cm(CLIENT_B, SERVER, DREQ, 0xB001, 0x5002, qpn=QP_B), "benign", "cm", "B DREQ")
    t.add(cm(SERVER, CLIENT_B, DREP, 0x5002, 0xB001), "benign", "cm", "server DREP to B")
    # After that, B's old connection is gone: a replayed DREQ is orphaned.
    t.add(cm(CLIENT_B, SERVER, DREQ, 0xB001, 0x5002, qpn=QP_B), "attack", "fraudulent-disconnect",
          "replayed DREQ after teardown")
    return t


def lrh(slid, dlid, lnh, words):
    return struct.pack("!BBHHH", 0x00, lnh, dlid, words & 0x7FF, slid)


def ib_packet(slid, dlid, opcode, dqpn, ext=b"", payload=b"", sgid=None, dgid=None, psn=0):
    bth = struct.pack("!BBHI", opcode, 0, 0xFFFF, dqpn & 0xFFFFFF) + struct.pack("!I", psn & 0xFFFFFF)
    body = bth + ext + payload
    grh = b""
    if sgid is not None:
        grh = struct.pack("!IHBB", 0x60000000, len(body) + 4, 0x1B, 64) + sgid + dgid
    body = grh + body
    body += b"\x00" * ((-len(body)) % 4)
    words = (8 + len(body) + 4) // 4
    return lrh(slid, dlid, 0x03 if sgid is not None else 0x02, words) + body + b"\x00" * 4 + b"\x00" * 2


def infiniband():
    t = Trace()
    gid = lambda n: bytes.fromhex("fe800000000000000000000000000000")[:15] + bytes([n])
    t.add(ib_packet(1, 10, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA, 1, 8), b"\x00" * 8), "benign", "data", "LID 1 writes")
    t.add(ib_packet(2, 10, RDMA_READ_REQUEST, QP_B, reth(PUBLIC_VA, 1, 64)), "benign", "data", "LID 2 reads")
    t.add(ib_packet(1, 10, SEND_ONLY, QP_A, b"", b"hi", sgid=gid(1), dgid=gid(10)), "benign", "data", "GRH send")
    t.add(ib_packet(66, 10, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA, 1, 8), b"\xee" * 8), "attack", "mr-injection",
          "LID 66 injects a WRITE")
    t.add(ib_packet(2, 10, FETCH_ADD, QP_LOCK, atomic_eth(LOCK_VA, 1, 1, 0)), "attack", "atomic-exhaustion",
          "LID 2 atomics")
    t.add(ib_packet(1, 10, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA, 1, 8), b"\x00" * 8, sgid=gid(66), dgid=gid(10)),
          "attack", "mr-injection", "foreign GID behind a trusted LID")
    t.add(ib_packet(1, 10, RDMA_WRITE_ONLY, QP_A, reth(PUBLIC_VA, 1, 8))[:20], "attack", "malformed", "truncated")
    return t


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    attacks().write(os.path.join(out, "attacks.pcap"), 1)
    infiniband().write(os.path.join(out, "ib.pcap"), 247)


if __name__ == "__main__":
    main()
