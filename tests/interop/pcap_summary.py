#!/usr/bin/env python3
"""Counts what softverbs' captures (SOFTVERBS_PCAP) show of a RoCEv2 conversation with one peer.

Usage: pcap_summary.py [--mads] <own address>[,<own address>...] <file.pcap>...   (IPv4 or IPv6)

Prints one line of name=value: packets sent and received; NAKs (AETH syndrome 0x60-0x7f:
sequence error, invalid request, remote access, remote operational) and RNR NAKs (0x20-0x3f),
each way; and retransmissions each way: request packets (SEND, WRITE, READ request, atomics)
whose (destination QP, PSN) the same file already holds in the same direction (IBA 9.7.6.1.3:
a retry carries the original PSN). Each file is one process, so QP numbers and PSNs of
different runs never mix. `final_acks`: files whose last packet is a plain ACK softverbs sent --
the ACK a responder held (coalescing) and let out as its QP was destroyed, which may reach a
peer QP that is gone already (docs/wire.md, "ACK coalescing").
"""
import ipaddress
import struct
import sys

# BTH opcodes of RC responses (IBA table 38): READ RESPONSE FIRST..ONLY, ACKNOWLEDGE,
# ATOMIC ACKNOWLEDGE. Those with an AETH: FIRST, LAST, ONLY, ACK, ATOMIC ACK.
RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}
WITH_AETH = {0x0D, 0x0F, 0x10, 0x11, 0x12}


def packets(path):
    """Yields (source address, BTH bytes and the rest) of each UDP packet over IPv4 or IPv6
    (LINKTYPE_RAW: softverbs synthesizes the IP header; IPv6 without extension headers)."""
    with open(path, 'rb') as f:
        data = f.read()
    if len(data) < 24:
        return
    endian = '<' if data[:4] == b'\xd4\xc3\xb2\xa1' else '>'
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + 'I', data[off + 8:off + 12])[0]
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(pkt) >= 20 and pkt[0] >> 4 == 4 and pkt[9] == 17:
            ihl = (pkt[0] & 0xF) * 4
            yield ipaddress.ip_address(pkt[12:16]), pkt[ihl + 8:]
        elif len(pkt) >= 48 and pkt[0] >> 4 == 6 and pkt[6] == 17:
            yield ipaddress.ip_address(pkt[8:24]), pkt[48:]


# CM attribute IDs (IBA table 99) and the MAD's management class of the CM (0x07).
CM_ATTRIBUTES = {0x10: 'REQ', 0x11: 'MRA', 0x12: 'REJ', 0x13: 'REP', 0x14: 'RTU', 0x15: 'DREQ',
                 0x16: 'DREP', 0x17: 'SIDR_REQ', 0x18: 'SIDR_REP', 0x19: 'LAP', 0x1A: 'APR'}
CM_CLASS = 0x07
UD_SEND_ONLY = 0x64


def mads(own, paths):
    """The --mads summary: CM MADs by attribute each way, and the repeated ones."""
    n = {way: {name: 0 for name in CM_ATTRIBUTES.values()} for way in ('sent', 'rcvd')}
    repeated = {'sent': 0, 'rcvd': 0}
    for path in paths:
        seen = set()
        for src, bth in packets(path):
            # BTH (12 bytes), DETH (8), then the MAD: class at byte 1, TID at 8..16, attribute at 16.
            if len(bth) < 12 + 8 + 24 or bth[0] != UD_SEND_ONLY or int.from_bytes(bth[5:8], 'big') != 1:
                continue
            mad = bth[20:]
            attr = int.from_bytes(mad[16:18], 'big')
            if mad[1] != CM_CLASS or attr not in CM_ATTRIBUTES:
                continue
            way = 'sent' if src in own else 'rcvd'
            n[way][CM_ATTRIBUTES[attr]] += 1
            key = (way, attr, mad[8:16])
            if key in seen:
                repeated[way] += 1
            seen.add(key)
    line = lambda way: ' '.join(f'{k}={v}' for k, v in n[way].items() if v)
    print(f"sent: {line('sent') or 'none'} received: {line('rcvd') or 'none'} "
          f"repeated_sent={repeated['sent']} repeated_rcvd={repeated['rcvd']}")


def main():
    if sys.argv[1] == '--mads':
        mads({ipaddress.ip_address(a) for a in sys.argv[2].split(',')}, sys.argv[3:])
        return
    own = {ipaddress.ip_address(a) for a in sys.argv[1].split(',')}
    n = {k: 0 for k in ('sent', 'rcvd', 'naks_sent', 'naks_rcvd', 'rnr_sent', 'rnr_rcvd',
                        'retx_sent', 'retx_rcvd', 'final_acks')}
    for path in sys.argv[2:]:
        seen = set()
        last = None
        for src, bth in packets(path):
            if len(bth) < 12:
                continue
            way = 'sent' if src in own else 'rcvd'
            n[way] += 1
            last = (way, bth[0], bth[12] if len(bth) >= 13 else None)
            opcode = bth[0]
            dqp = int.from_bytes(bth[5:8], 'big')
            psn = int.from_bytes(bth[9:12], 'big')
            if opcode in WITH_AETH and len(bth) >= 13:
                syndrome = bth[12]
                if syndrome >= 0x60:
                    n['naks_' + way] += 1
                elif 0x20 <= syndrome < 0x40:
                    n['rnr_' + way] += 1
            if opcode >> 5 == 0 and opcode not in RESPONSES:  # an RC request
                key = (way, dqp, psn)
                if key in seen:
                    n['retx_' + way] += 1
                seen.add(key)
        if last is not None and last[0] == 'sent' and last[1] == 0x11 and last[2] is not None and last[2] < 0x20:
            n['final_acks'] += 1
    print(' '.join(f'{k}={v}' for k, v in n.items()))


if __name__ == '__main__':
    main()
