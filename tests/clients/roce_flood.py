"""A flood of malformed RoCEv2 datagrams at a softverbs target (see wire_peer.py, mode target).

Usage: roce_flood.py --src IP --dst IP --target <target.json> [--seed N] [--rounds N]

Builds every packet by hand (IBA 9.2 headers, Annex A17 ICRC computed as rxe_icrc.c does), sends
them from --src to --dst:4791 over a plain UDP socket, and prints what it sent. The cases:

  live QP (an RC QP that must survive): the flood's WRITEs into its MR with a bad ICRC, with
  truncated headers, with a PSN ahead of or behind the expected one, as UC and UD opcodes, and
  random bytes (seeded) with a valid ICRC; to an unknown QP number.
  victim QPs (one per case, each at its expected PSN, so the check under test is reached):
  SEND_MIDDLE and WRITE_LAST without a FIRST, a bad rkey, a RETH beyond the MR, RETH lengths
  the path MTU rules forbid, payloads over the MTU, a WRITE into a read-only MR, a READ beyond
  the MR (and of 4 GiB), a misaligned atomic, a pad count that contradicts the RETH, a SEND
  without a receive WQE.
  UD QP: a wrong Q_Key, a payload over its receive buffer, a truncated DETH, RC opcodes.
  calibrate: one well-formed WRITE of 64 bytes of 0xc7 (the target checks they arrived: the
  headers and ICRC built here are right, so the other packets test what they mean to).
"""
import argparse
import ipaddress
import json
import random
import socket
import struct
import sys
import zlib

ROCE_PORT = 4791
MTU = 1024
SRC_PORT = 47910

# RC opcodes (IBA 9.2, table 36); UC is 0x20 | op, UD SEND_ONLY 0x64.
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY = 0x06, 0x07, 0x08, 0x0a
READ_REQUEST, COMPARE_SWAP, FETCH_ADD = 0x0c, 0x13, 0x14
UD_SEND_ONLY = 0x64


def bth(opcode, qpn, psn, pad=0, ack_req=True):
    return struct.pack('>BBHBBHBBH', opcode, (pad & 3) << 4, 0xffff, 0, qpn >> 16, qpn & 0xffff,
                       0x80 if ack_req else 0, psn >> 16 & 0xff, psn & 0xffff)


def reth(va, rkey, length):
    return struct.pack('>QII', va, rkey, length)


def atomic_eth(va, rkey, swap_add, compare):
    return struct.pack('>QIQQ', va, rkey, swap_add, compare)


def deth(qkey, src_qp):
    return struct.pack('>IB', qkey, 0) + (src_qp & 0xffffff).to_bytes(3, 'big')


class Builder:
    def __init__(self, src, dst):
        self.src, self.dst = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed

    def icrc(self, body):
        """Annex A17: CRC-32 over 8 bytes of ones (the LRH), the IPv4 and UDP headers with their
        variant fields (TOS, TTL, checksums) set to ones, the BTH with resv8a set to ones, and
        the rest; little-endian on the wire. IPv4 as a Linux socket sends it: DF, ID 0."""
        total = 20 + 8 + len(body) + 4
        ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0xff, total, 0, 0x4000, 0xff, 17, 0xffff, self.src, self.dst)
        udp = struct.pack('>HHHH', SRC_PORT, ROCE_PORT, 8 + len(body) + 4, 0xffff)
        masked_bth = body[:4] + b'\xff' + body[5:12]
        crc = zlib.crc32(b'\xff' * 8 + ip + udp + masked_bth + body[12:])
        return struct.pack('<I', crc)

    def packet(self, headers, payload=b'', good_icrc=True, pad=None):
        """BTH (built with the pad count of `payload`) + headers + payload + pad + ICRC."""
        pad_n = (-len(payload)) & 3 if pad is None else pad
        body = bytearray(headers + payload + b'\0' * ((-len(payload)) & 3))
        body[1] = (body[1] & 0xcf) | (pad_n & 3) << 4
        body = bytes(body)
        crc = self.icrc(body)
        if not good_icrc:
            crc = bytes([crc[0] ^ 0x40]) + crc[1:]
        return body + crc

    def truncated(self, whole, keep):
        """The first `keep` bytes of a packet, with an ICRC over them (a valid-looking tail)."""
        part = whole[:keep]
        return part + self.icrc(part) if keep >= 12 else part


def live_cases(b, t, rng):
    live, qpn = t['live'], t['live']['qpn']
    data = bytes([0xee]) * 64
    write0 = bth(WRITE_ONLY, qpn, 0) + reth(live['addr'], live['rkey'], 64)
    out = [('live: WRITE with a bad ICRC', b.packet(write0, data, good_icrc=False))]
    whole = b.packet(write0, data)
    for keep in (0, 1, 4, 8, 11, 12, 20, 27):
        out.append((f'live: WRITE truncated to {keep} bytes', b.truncated(whole, keep)))
    out.append(('live: WRITE ahead of the expected PSN',
                b.packet(bth(WRITE_ONLY, qpn, 5) + reth(live['addr'], live['rkey'], 64), data)))
    out.append(('live: WRITE behind the expected PSN (duplicate)',
                b.packet(bth(WRITE_ONLY, qpn, 0xfffff0) + reth(live['addr'], live['rkey'], 64), data)))
    out.append(('live: READ behind the expected PSN, no resource',
                b.packet(bth(READ_REQUEST, qpn, 0xfffff0) + reth(live['addr'], live['rkey'], 1 << 31))))
    out.append(('live: atomic behind the expected PSN, no resource',
                b.packet(bth(FETCH_ADD, qpn, 0xfffff0) + atomic_eth(live['addr'], live['rkey'], 1, 0))))
    out.append(('live: a UC WRITE to an RC QP', b.packet(bth(0x20 | WRITE_ONLY, qpn, 0) +
                                                         reth(live['addr'], live['rkey'], 64), data)))
    out.append(('live: a UD SEND to an RC QP', b.packet(bth(UD_SEND_ONLY, qpn, 0) + deth(0, 3), data)))
    out.append(('unknown QP number', b.packet(bth(WRITE_ONLY, 0xfffffe, 0) + reth(live['addr'], live['rkey'], 64), data)))
    out.append(('unknown QP number, QP 0', b.packet(bth(SEND_ONLY, 0, 0), data)))
    out.append(('reserved opcode', b.packet(bth(0x1f, qpn, 0), data)))
    out.append(('CNP opcode', b.packet(bth(0x81, qpn, 0), b'\0' * 16)))
    for _ in range(300):  # random opcodes and bytes, valid ICRC, never the expected PSN
        op = rng.choice([rng.randrange(256), rng.randrange(0x20)])
        hdr = bth(op, rng.choice([qpn, t['ud']['qpn'], rng.randrange(1 << 24)]), rng.randrange(1, 1 << 24))
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80)))
        out.append(('random', b.packet(hdr, body)))
    for _ in range(100):  # random bytes of every short length, no ICRC to speak of
        out.append(('garbage', bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))))
    return out


def victim_cases(b, t):
    v = t['victims']
    out = []

    def add(name, *packets):
        out.extend((f'victim {name}', p) for p in packets)

    c = v['calibrate']
    add('calibrate', b.packet(bth(WRITE_ONLY, c['qpn'], 0) + reth(c['addr'], c['rkey'], 64), bytes([0xc7]) * 64))
    q = v['middle_first']
    add('middle_first', b.packet(bth(SEND_MIDDLE, q['qpn'], 0), b'\xab' * MTU),
        b.packet(bth(SEND_LAST, q['qpn'], 1), b'\xab' * 10))
    q = v['last_first']
    add('last_first', b.packet(bth(WRITE_LAST, q['qpn'], 0), b'\xab' * 64),
        b.packet(bth(WRITE_MIDDLE, q['qpn'], 0), b'\xab' * MTU))
    q = v['bad_rkey']
    add('bad_rkey', b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth(q['addr'], q['rkey'] ^ 0x5a5a00, 64), b'\xab' * 64))
    q = v['reth_beyond_mr']
    # A two-packet WRITE whose RETH reaches past the MR's end: refused before any byte lands
    # (rxe check_rkey checks va..va+length at the first packet), then a WRITE ending past it.
    add('reth_beyond_mr',
        b.packet(bth(WRITE_FIRST, q['qpn'], 0) + reth(q['addr'] + q['size'] - MTU, q['rkey'], 2 * MTU), b'\xab' * MTU),
        b.packet(bth(WRITE_LAST, q['qpn'], 1), b'\xab' * MTU),
        b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth(q['addr'] + q['size'] - 10, q['rkey'], 64), b'\xab' * 64),
        b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth((1 << 64) - 32, q['rkey'], 64), b'\xab' * 64))
    q = v['reth_beyond_pmtu']
    add('reth_beyond_pmtu',
        b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth(q['addr'], q['rkey'], 2000), b'\xab' * MTU),
        b.packet(bth(WRITE_FIRST, q['qpn'], 0) + reth(q['addr'], q['rkey'], 100), b'\xab' * MTU),
        b.packet(bth(WRITE_FIRST, q['qpn'], 0) + reth(q['addr'], q['rkey'], 3000), b'\xab' * 500))
    q = v['oversized']
    add('oversized', b.packet(bth(SEND_ONLY, q['qpn'], 0), b'\xab' * 2048),
        b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth(q['addr'], q['rkey'], 4100), b'\xab' * 4100),
        b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth(q['addr'], q['rkey'], 8000), b'\xab' * 8000))
    q = v['write_into_read_only']
    add('write_into_read_only', b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth(q['addr'], q['rkey'], 64), b'\xab' * 64))
    q = v['read_beyond_mr']
    add('read_beyond_mr', b.packet(bth(READ_REQUEST, q['qpn'], 0) + reth(q['addr'], q['rkey'], 0xffffffff)),
        b.packet(bth(READ_REQUEST, q['qpn'], 0) + reth(q['addr'], q['rkey'], q['size'] + 1)))
    q = v['atomic_misaligned']
    add('atomic_misaligned', b.packet(bth(FETCH_ADD, q['qpn'], 0) + atomic_eth(q['addr'] + 3, q['rkey'], 1, 0)),
        b.packet(bth(COMPARE_SWAP, q['qpn'], 0) + atomic_eth(q['addr'] + q['size'], q['rkey'], 1, 0)))
    q = v['bad_pad']  # the pad count disagrees with the RETH: a length error (rxe check_length)
    add('bad_pad', b.packet(bth(WRITE_ONLY, q['qpn'], 0) + reth(q['addr'], q['rkey'], 64), b'\xab' * 64, pad=2))
    q = v['send_no_wqe']
    add('send_no_wqe', b.packet(bth(SEND_ONLY, q['qpn'], 0), b'\xab' * 64))
    return out


def ud_cases(b, t):
    ud = t['ud']
    out = [('UD: wrong Q_Key', b.packet(bth(UD_SEND_ONLY, ud['qpn'], 0) + deth(ud['qkey'] ^ 1, 7), b'\xab' * 64)),
           ('UD: payload over the receive buffer',
            b.packet(bth(UD_SEND_ONLY, ud['qpn'], 0) + deth(ud['qkey'], 7), b'\xab' * 1000)),
           ('UD: payload over the MTU', b.packet(bth(UD_SEND_ONLY, ud['qpn'], 0) + deth(ud['qkey'], 7), b'\xab' * 5000)),
           ('UD: truncated DETH', b.truncated(b.packet(bth(UD_SEND_ONLY, ud['qpn'], 0) + deth(ud['qkey'], 7)), 16)),
           ('UD: an RC SEND', b.packet(bth(SEND_ONLY, ud['qpn'], 0), b'\xab' * 64)),
           ('UD: an RC WRITE', b.packet(bth(WRITE_ONLY, ud['qpn'], 0) + reth(0, 0, 64), b'\xab' * 64)),
           ('UD: bad ICRC', b.packet(bth(UD_SEND_ONLY, ud['qpn'], 0) + deth(ud['qkey'], 7), b'\xab' * 64,
                                     good_icrc=False))]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--src', required=True)
    ap.add_argument('--dst', required=True)
    ap.add_argument('--target', required=True)
    ap.add_argument('--seed', type=int, default=11)
    ap.add_argument('--rounds', type=int, default=5)
    a = ap.parse_args()
    with open(a.target) as f:
        t = json.load(f)
    b = Builder(a.src, a.dst)
    rng = random.Random(a.seed)
    # The calibration WRITE goes first, alone; the victims' packets then repeat (after the first
    # round each is a duplicate or meets a QP in error), mixed with the rest.
    victims = victim_cases(b, t)
    cases = victims[1:] + live_cases(b, t, rng) + ud_cases(b, t)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: DF, as the ICRC assumes
    s.bind((a.src, SRC_PORT))
    s.sendto(victims[0][1], (a.dst, ROCE_PORT))
    sent, refused = 1, 0
    for _ in range(a.rounds):
        rng.shuffle(cases)
        for _, p in cases:
            try:
                s.sendto(p, (a.dst, ROCE_PORT))
                sent += 1
            except OSError:
                refused += 1  # a datagram over the link MTU: the kernel refuses it (EMSGSIZE)
    kinds = sorted({name for name, _ in cases})
    print(f'sent {sent} malformed datagrams ({refused} refused by the kernel) of {len(kinds)} kinds')
    return 0


if __name__ == '__main__':
    sys.exit(main())
