#!/usr/bin/env python3
"""Checks what tshark makes of a capture of same-host traffic (`softverbs trace -w`).

Usage: trace_check.py <file.pcap> <opcode,...>
Reads `tshark -T fields` of every packet tshark dissects as InfiniBand (RoCEv2) and checks:
- each opcode named (decimal BTH opcodes, e.g. 0,1,2 for RC SEND FIRST/MIDDLE/LAST) occurs;
- each requester's PSNs are consecutive per destination QP: the first time each PSN is seen,
  it follows the previous new one (24-bit; a READ request takes one PSN per response packet,
  IBA 9.7.1), so no packet of a message is missing; a PSN seen again is a retransmission;
- every RC request packet that asks for an answer (AckReq: the last packet of a SEND/WRITE, a
  READ request, an atomic) is answered: an ACK, READ response or atomic ACK carries its PSN.
Prints a summary; exits 0 when every check holds.
"""
import collections
import subprocess
import sys

ACK, ATOMIC_ACK, READ_REQUEST = 17, 18, 12
READ_RESPONSES = {13, 14, 15, 16}
RESPONSES = READ_RESPONSES | {ACK, ATOMIC_ACK}


def fields(path):
    out = subprocess.run(['tshark', '-n', '-r', path, '-Y', 'infiniband.bth', '-T', 'fields',
                          '-e', 'infiniband.bth.opcode', '-e', 'infiniband.bth.destqp',
                          '-e', 'infiniband.bth.psn', '-e', 'infiniband.bth.a'],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    for line in out.splitlines():
        parts = line.split('\t')
        op, qp, psn = int(parts[0]), int(parts[1], 0), int(parts[2])
        ack_req = len(parts) > 3 and parts[3] in ('1', 'True')
        yield op, qp, psn, ack_req


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    want = {int(x) for x in sys.argv[2].split(',')}
    packets = list(fields(sys.argv[1]))
    seen_ops = collections.Counter(op for op, _, _, _ in packets)
    answered = {psn for op, _, psn, _ in packets if op in RESPONSES}
    read_responses = {psn: op for op, _, psn, _ in packets if op in READ_RESPONSES}
    asked = {psn for op, _, psn, ack_req in packets if op < 32 and ack_req}  # RC (IBA 9.2 table 38)
    expected = {}  # dest QP -> the PSN its next new request packet must carry
    seen = collections.defaultdict(set)
    gaps = []
    for op, qp, psn, _ in packets:
        if op in RESPONSES or psn in seen[qp]:
            continue  # an answer, or a retransmission
        if qp in expected and psn != expected[qp]:
            gaps.append((qp, expected[qp], psn))
        seen[qp].add(psn)
        span = 1
        if op == READ_REQUEST:  # IBA 9.7.1: a READ takes one PSN per response packet
            if read_responses.get(psn) == 13:  # FIRST, then MIDDLEs up to the LAST
                while read_responses.get((psn + span) & 0xffffff) == 14:
                    span += 1
                span += read_responses.get((psn + span) & 0xffffff) == 15
        expected[qp] = (psn + span) & 0xffffff
    missing = sorted(want - set(seen_ops))
    unanswered = sorted(asked - answered)
    print(f'packets={len(packets)} opcodes={dict(sorted(seen_ops.items()))} qps={len(seen)} gaps={gaps[:5]} '
          f'missing_opcodes={missing} asked={len(asked)} unanswered={unanswered[:5]}')
    return 0 if packets and not missing and not gaps and not unanswered else 1


if __name__ == '__main__':
    sys.exit(main())
