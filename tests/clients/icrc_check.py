#!/usr/bin/env python3
"""Checks the ICRC of every RoCEv2 packet in a classic pcap (Ethernet, or LINKTYPE_RAW as
SOFTVERBS_PCAP and `softverbs trace` write) against the packet's own
IP header, as a receiver such as the kernel's rxe does (rxe_icrc.c): the IPv4 ID included, which
a UDP GSO send numbers 0, 1, 2... per segment.

Usage: icrc_check.py <file.pcap>
Prints "packets=N bad=B nonzero_ids=Z" and exits 0 when every packet's ICRC matches (N > 0).
Independent of softverbs' own code (zlib's CRC-32), so it checks that code from outside.
"""
import struct
import sys
import zlib

ROCE_PORT = 4791


def masked_headers(ip, udp, bth):
    """IBA annex A17.3.3: the fields routers may change are ones; 8 bytes of ones for the LRH."""
    ip = bytearray(ip)
    if ip[0] >> 4 == 4:
        ip[1] = 0xff                    # TOS
        ip[8] = 0xff                    # TTL
        ip[10] = ip[11] = 0xff          # header checksum
    else:
        ip[0] |= 0x0f                   # traffic class and flow label
        ip[1] = ip[2] = ip[3] = 0xff
        ip[7] = 0xff                    # hop limit
    udp = bytearray(udp)
    udp[6] = udp[7] = 0xff              # UDP checksum
    bth = bytearray(bth)
    bth[4] = 0xff                       # FECN, BECN, resv6
    return b'\xff' * 8 + bytes(ip) + bytes(udp) + bytes(bth)


def roce_packets(path):
    """(ip header, udp header, udp payload, ipv4 id or None) of each UDP 4791 frame."""
    with open(path, 'rb') as f:
        data = f.read()
    magic = struct.unpack_from('<I', data, 0)[0]
    if magic not in (0xa1b2c3d4, 0xa1b23c4d):
        raise SystemExit(f'{path}: not a little-endian classic pcap')
    linktype = struct.unpack_from('<I', data, 20)[0]
    if linktype not in (1, 101):
        raise SystemExit(f'{path}: neither an Ethernet nor a raw IP capture')
    at = 24
    while at + 16 <= len(data):
        caplen, wirelen = struct.unpack_from('<II', data, at + 8)
        frame = data[at + 16:at + 16 + caplen]
        at += 16 + caplen
        if linktype == 101:  # raw IP: the version nibble names the header
            if caplen != wirelen or not frame:
                continue
            ethertype, l3 = {4: 0x0800, 6: 0x86dd}.get(frame[0] >> 4, 0), frame
        else:
            if caplen != wirelen or len(frame) < 14:
                continue
            ethertype, l3 = struct.unpack_from('!H', frame, 12)[0], frame[14:]
        if ethertype == 0x0800 and len(l3) >= 20 and l3[9] == 17:
            ihl = (l3[0] & 0x0f) * 4
            total = struct.unpack_from('!H', l3, 2)[0]
            ip, rest, ip_id = l3[:ihl], l3[ihl:total], struct.unpack_from('!H', l3, 4)[0]
        elif ethertype == 0x86dd and len(l3) >= 40 and l3[6] == 17:
            plen = struct.unpack_from('!H', l3, 4)[0]
            ip, rest, ip_id = l3[:40], l3[40:40 + plen], None
        else:
            continue
        if len(rest) < 8 + 12 + 4 or struct.unpack_from('!H', rest, 2)[0] != ROCE_PORT:
            continue
        yield ip, rest[:8], rest[8:], ip_id


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    packets = bad = nonzero = 0
    for ip, udp, payload, ip_id in roce_packets(sys.argv[1]):
        packets += 1
        nonzero += bool(ip_id)
        covered = masked_headers(ip, udp, payload[:12]) + payload[12:-4]
        if zlib.crc32(covered) != struct.unpack('<I', payload[-4:])[0]:
            bad += 1
    print(f'packets={packets} bad={bad} nonzero_ids={nonzero}')
    return 0 if packets > 0 and bad == 0 else 1


if __name__ == '__main__':
    sys.exit(main())
