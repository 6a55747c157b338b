"""RAW_PACKET QPs end to end (issue 14): run by test_raw_packet.py inside a user + network
namespace of its own (`unshare -rn`), where the test holds CAP_NET_RAW and creates the veth pair
its frames cross. Not collected by discovery on its own (no test_ prefix).

The pair: `sva` (10.66.0.1) and `svb` (10.66.0.2) in one namespace. SOFTVERBS_RAW_IF picks the
interface of each QP when it is created, so a frame one QP sends out of sva really arrives at the
other QP's packet socket on svb.
"""
import os
import re
import struct
import subprocess
import time
import unittest

import base  # environment first

if os.environ.get('RAW_CASES_LOG_FILE'):
    # The refusal cases read the library's error lines back (base.py cleared any user setting;
    # the library reads these at its first log line, after this).
    os.environ['SOFTVERBS_LOG'] = 'error'
    os.environ['SOFTVERBS_LOG_FILE'] = os.environ['RAW_CASES_LOG_FILE']
import pyverbs.enums as e
from pyverbs.cq import CQ, CqInitAttrEx, CQEX, PollCqAttr
from pyverbs.flow import Flow, FlowAttr
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr, QPInitAttrEx
from pyverbs.spec import EthSpec, Ipv4ExtSpec, Ipv6Spec, TcpUdpSpec
from pyverbs.wr import SGE, RecvWR, SendWR

A, B = 'sva', 'svb'
IP_A, IP_B = '10.66.0.1', '10.66.0.2'


def sh(*cmd):
    subprocess.run(cmd, check=True, timeout=10)


_pair_ready = False


def setup_pair():
    global _pair_ready
    if _pair_ready:
        return
    _pair_ready = True
    sh('ip', 'link', 'set', 'lo', 'up')
    sh('ip', 'link', 'add', A, 'type', 'veth', 'peer', 'name', B)
    sh('ip', 'addr', 'add', IP_A + '/24', 'dev', A)
    sh('ip', 'addr', 'add', IP_B + '/24', 'dev', B)
    # No IPv6 link-local addresses: the kernel then sends no router or neighbour solicitations
    # that the default and sniffer rules would (rightly) see.
    for dev in (A, B):
        sh('ip', 'link', 'set', 'dev', dev, 'addrgenmode', 'none')
    sh('ip', 'link', 'set', A, 'up')
    sh('ip', 'link', 'set', B, 'up')


def mac_of(ifname):
    out = subprocess.run(['ip', '-o', 'link', 'show', 'dev', ifname], check=True, capture_output=True,
                         text=True, timeout=10).stdout
    return re.search(r'link/ether ([0-9a-f:]{17})', out).group(1)


def mac_bytes(mac):
    return bytes(int(x, 16) for x in mac.split(':'))


def csum(data):
    if len(data) % 2:
        data += b'\0'
    s = sum(struct.unpack('!%dH' % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return s


def udp4_frame(dst_mac, src_mac, payload, sport=4000, dport=5000, src=IP_A, dst=IP_B, checksums=True):
    """An Ethernet/IPv4/UDP frame; with `checksums` False, both checksums are left 0."""
    saddr, daddr = bytes(map(int, src.split('.'))), bytes(map(int, dst.split('.')))
    udp_len = 8 + len(payload)
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + udp_len, 7, 0x4000, 64, 17, 0, saddr, daddr)
    udp = struct.pack('!HHHH', sport, dport, udp_len, 0) + payload
    if checksums:
        ip = ip[:10] + struct.pack('!H', 0xffff ^ csum(ip)) + ip[12:]
        c = 0xffff ^ csum(saddr + daddr + struct.pack('!BBH', 0, 17, udp_len) + udp)
        udp = udp[:6] + struct.pack('!H', c or 0xffff) + udp[8:]
    return dst_mac + src_mac + b'\x08\x00' + ip + udp


def checksums_ok(frame):
    ip = frame[14:34]
    udp = frame[34:]
    pseudo = ip[12:20] + struct.pack('!BBH', 0, ip[9], len(udp))
    return csum(ip) == 0xffff and csum(pseudo + udp) == 0xffff


class RawQp:
    """A RAW_PACKET QP on interface `ifname`, in RTS, with a 64 KiB buffer."""

    def __init__(self, ctx, pd, ifname, create_flags=0, cq_ex=False, dv_flags=0):
        os.environ['SOFTVERBS_RAW_IF'] = ifname
        self.ctx, self.pd = ctx, pd
        if cq_ex:
            attr = CqInitAttrEx(cqe=256, wc_flags=e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_FLOW_TAG |
                                e.IBV_WC_EX_WITH_CVLAN)
            self.cq = CQEX(ctx, attr)
        else:
            self.cq = CQ(ctx, 256)
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=4, max_recv_sge=4, max_inline_data=512)
        if dv_flags:  # through mlx5dv_create_qp (mlx5dv_qp_init_attr.create_flags)
            from pyverbs.providers.mlx5.mlx5dv import Mlx5DVQPInitAttr, Mlx5QP
            import pyverbs.providers.mlx5.mlx5_enums as dve
            init = QPInitAttrEx(qp_type=e.IBV_QPT_RAW_PACKET, scq=self.cq, rcq=self.cq, cap=cap, pd=pd,
                                comp_mask=e.IBV_QP_INIT_ATTR_PD)
            self.qp = Mlx5QP(ctx, init, Mlx5DVQPInitAttr(comp_mask=dve.MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
                                                         create_flags=dv_flags))
        elif create_flags:
            init = QPInitAttrEx(qp_type=e.IBV_QPT_RAW_PACKET, scq=self.cq, rcq=self.cq, cap=cap, pd=pd,
                                comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS,
                                create_flags=create_flags)
            self.qp = QP(ctx, init)
        else:
            self.qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RAW_PACKET, scq=self.cq, rcq=self.cq, cap=cap))
        self.mr = MR(pd, 65536, e.IBV_ACCESS_LOCAL_WRITE)
        self.mac = mac_bytes(mac_of(ifname))
        self.flows = []
        self.v6 = False  # the test sends IPv6 frames to it
        self.to_rts()

    def to_rts(self):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.port_num = 1
        self.qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PORT)
        for state in (e.IBV_QPS_RTR, e.IBV_QPS_RTS):
            a = QPAttr()
            a.qp_state = state
            self.qp.modify(a, e.IBV_QP_STATE)

    def post_recv(self, n=8, size=2048):
        for i in range(n):
            self.qp.post_recv(RecvWR(wr_id=100 + i, num_sge=1, sg=[SGE(self.mr.buf + 32768 + i * size, size,
                                                                       self.mr.lkey)]))

    def send(self, frame, inline=True, flags=0, wr_id=1, split=None):
        flags |= e.IBV_SEND_SIGNALED
        if inline:
            self.mr.write(frame, len(frame), 0)
            sges = [SGE(self.mr.buf, len(frame), self.mr.lkey)]
            flags |= e.IBV_SEND_INLINE
        else:
            # A gather list: the frame in pieces at scattered places of the buffer.
            split = split or [len(frame)]
            sges, at, off = [], 0, 0
            for n in split:
                self.mr.write(frame[at:at + n], n, off)
                sges.append(SGE(self.mr.buf + off, n, self.mr.lkey))
                at, off = at + n, off + n + 64
        self.qp.post_send(SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=len(sges), sg=sges, send_flags=flags))

    def poll(self, n=1, timeout=5.0):
        """n completions (ibv_wc objects), bounded by `timeout`."""
        got, end = [], time.monotonic() + timeout
        while len(got) < n and time.monotonic() < end:
            if isinstance(self.cq, CQEX):
                if self.cq.start_poll(PollCqAttr()) != 0:
                    time.sleep(0.001)
                    continue
                while True:
                    got.append(dict(wr_id=self.cq.wr_id, status=self.cq.status, opcode=self.cq.read_opcode(),
                                    byte_len=self.cq.read_byte_len(), wc_flags=self.cq.read_wc_flags(),
                                    flow_tag=self.cq.read_flow_tag(), cvlan=self.cq.read_cvlan()))
                    if self.cq.poll_next() != 0:
                        break
                self.cq.end_poll()
                continue
            k, wcs = self.cq.poll(n - len(got))
            got += [dict(wr_id=w.wr_id, status=w.status, opcode=w.opcode, byte_len=w.byte_len, wc_flags=w.wc_flags)
                    for w in wcs[:k]]
            if k == 0:
                time.sleep(0.001)
        return got

    def received(self, wc):
        return self.mr.read(wc['byte_len'], 32768 + (wc['wr_id'] - 100) * 2048)

    def flow(self, *specs, flow_type=e.IBV_FLOW_ATTR_NORMAL, priority=0, flags=0):
        attr = FlowAttr(num_of_specs=len(specs), flow_type=flow_type, priority=priority, port=1, flags=flags)
        for s in specs:
            attr.specs.append(s)
        f = Flow(self.qp, attr)
        self.flows.append(f)  # a Flow python drops is destroyed
        return f


def drain(q, timeout=0.3):
    """Completions that arrive within `timeout` (for "nothing arrives")."""
    return q.poll(n=64, timeout=timeout)


class RawBase(unittest.TestCase):
    def setUp(self):
        setup_pair()
        self.ctx = base.open_context()
        self.pd = PD(self.ctx)

    def tearDown(self):
        self.ctx.close()

    def pair(self, **kw):
        a = RawQp(self.ctx, self.pd, A)
        b = RawQp(self.ctx, self.pd, B, **kw)
        return a, b


class FramesTest(RawBase):
    """Whole frames out of one interface and into the QP on the other, byte for byte."""

    def test_inline_and_gather_frames_arrive_byte_exact(self):
        a, b = self.pair()
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(4)
        f1 = udp4_frame(b.mac, a.mac, b'inline frame' * 5)
        f2 = udp4_frame(b.mac, a.mac, bytes(range(256)) * 3)
        a.send(f1, inline=True, wr_id=11)
        a.send(f2, inline=False, wr_id=12, split=[14, 100, len(f2) - 114])
        sends = a.poll(2)
        self.assertEqual([(w['wr_id'], w['status'], w['opcode']) for w in sends],
                         [(11, e.IBV_WC_SUCCESS, e.IBV_WC_SEND), (12, e.IBV_WC_SUCCESS, e.IBV_WC_SEND)])
        recvs = b.poll(2)
        self.assertEqual(len(recvs), 2, recvs)
        self.assertEqual([w['opcode'] for w in recvs], [e.IBV_WC_RECV] * 2)
        self.assertEqual(b.received(recvs[0]), f1)
        self.assertEqual(b.received(recvs[1]), f2)
        # Both carried correct IPv4 and UDP checksums: the receive side says so.
        self.assertTrue(all(w['wc_flags'] & e.IBV_WC_IP_CSUM_OK for w in recvs))

    def test_ip_csum_computes_checksums_and_bad_ones_are_not_flagged(self):
        a, b = self.pair()
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(2)
        bare = udp4_frame(b.mac, a.mac, b'checksum me', checksums=False)
        a.send(bare, flags=e.IBV_SEND_IP_CSUM, wr_id=1)
        a.send(bare, wr_id=2)  # sent as is: both checksums 0 (the IPv4 header's is then wrong)
        self.assertEqual(len(a.poll(2)), 2)
        recvs = b.poll(2)
        self.assertEqual(len(recvs), 2)
        fixed, raw = b.received(recvs[0]), b.received(recvs[1])
        self.assertEqual(fixed, udp4_frame(b.mac, a.mac, b'checksum me'))
        self.assertTrue(checksums_ok(fixed))
        self.assertEqual(raw, bare)
        self.assertTrue(recvs[0]['wc_flags'] & e.IBV_WC_IP_CSUM_OK)
        self.assertFalse(recvs[1]['wc_flags'] & e.IBV_WC_IP_CSUM_OK)

    def test_frame_too_small_for_the_wqe_is_a_length_error(self):
        a, b = self.pair()
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.qp.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(b.mr.buf + 32768, 20, b.mr.lkey)]))
        a.send(udp4_frame(b.mac, a.mac, b'x' * 100))
        recvs = b.poll(1)
        self.assertEqual(recvs[0]['status'], e.IBV_WC_LOC_LEN_ERR)
        self.assertEqual(b.mr.read(20, 32768), bytes(20))  # nothing written

    def test_unregistered_sge_is_a_protection_error_and_nothing_leaves(self):
        a, b = self.pair()
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(1)
        frame = udp4_frame(b.mac, a.mac, b'y' * 64)
        a.mr.write(frame, len(frame), 0)
        a.qp.post_send(SendWR(wr_id=5, opcode=e.IBV_WR_SEND, num_sge=1,
                              sg=[SGE(a.mr.buf, len(frame), a.mr.lkey + 0x1000)], send_flags=e.IBV_SEND_SIGNALED))
        self.assertEqual(a.poll(1)[0]['status'], e.IBV_WC_LOC_PROT_ERR)
        self.assertEqual(drain(b), [])

    def test_runt_frame_is_a_length_error(self):
        a, _ = self.pair()
        a.send(b'\x01' * 10, wr_id=9)
        self.assertEqual(a.poll(1)[0]['status'], e.IBV_WC_LOC_LEN_ERR)


class FlowTest(RawBase):
    """ibv_create_flow: specs, priorities and rule types decide which QP gets a frame."""

    def setUp(self):
        super().setUp()
        self.a = RawQp(self.ctx, self.pd, A)
        self.q1 = RawQp(self.ctx, self.pd, B)
        self.q2 = RawQp(self.ctx, self.pd, B)
        for q in (self.q1, self.q2):
            q.post_recv(8)

    def udp(self, dport, **kw):
        return udp4_frame(self.q1.mac, self.a.mac, b'flow', dport=dport, **kw)

    def got(self, q, timeout=0.3):
        """The IPv4 frames `q` received (the kernel's own frames, if any, are not the test's)."""
        return [f for f in (q.received(w) for w in drain(q, timeout)) if f[12:14] != b'\x86\xdd' or q.v6]

    def test_ipv4_udp_specs_steer_by_port(self):
        self.q1.flow(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'),
                     TcpUdpSpec(spec_type=e.IBV_FLOW_SPEC_UDP, dst_port=5001, dst_port_mask=0xffff))
        self.q2.flow(TcpUdpSpec(spec_type=e.IBV_FLOW_SPEC_UDP, dst_port=5002, dst_port_mask=0xffff))
        for port in (5001, 5002, 5003, 5002):
            self.a.send(self.udp(port))
        self.assertEqual(self.got(self.q1), [self.udp(5001)])
        self.assertEqual(self.got(self.q2), [self.udp(5002), self.udp(5002)])

    def test_tcp_spec_does_not_match_udp(self):
        self.q1.flow(TcpUdpSpec(spec_type=e.IBV_FLOW_SPEC_TCP, dst_port=5001, dst_port_mask=0xffff))
        self.a.send(self.udp(5001))
        self.assertEqual(self.got(self.q1), [])

    def test_lower_priority_value_wins(self):
        self.q1.flow(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'), priority=3)
        self.q2.flow(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'),
                     TcpUdpSpec(spec_type=e.IBV_FLOW_SPEC_UDP, dst_port=5001, dst_port_mask=0xffff), priority=1)
        self.a.send(self.udp(5001))
        self.a.send(self.udp(5009))
        self.assertEqual(self.got(self.q2), [self.udp(5001)])
        self.assertEqual(self.got(self.q1), [self.udp(5009)])

    def test_dont_trap_lets_lower_priorities_see_the_frame(self):
        self.q1.flow(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'), priority=0,
                     flags=e.IBV_FLOW_ATTR_FLAGS_DONT_TRAP)
        self.q2.flow(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'), priority=2)
        self.a.send(self.udp(7))
        self.assertEqual(self.got(self.q1), [self.udp(7)])
        self.assertEqual(self.got(self.q2), [self.udp(7)])

    def test_sniffer_and_all_default(self):
        self.q1.flow(TcpUdpSpec(spec_type=e.IBV_FLOW_SPEC_UDP, dst_port=5001, dst_port_mask=0xffff))
        self.q2.flow(flow_type=e.IBV_FLOW_ATTR_ALL_DEFAULT)
        self.a.send(self.udp(5001))
        self.a.send(self.udp(6000))
        self.assertEqual(self.got(self.q1), [self.udp(5001)])
        self.assertEqual(self.got(self.q2), [self.udp(6000)])  # only what no NORMAL rule took
        sniff = RawQp(self.ctx, self.pd, A)
        sniff.post_recv(8)
        sniff.flow(flow_type=e.IBV_FLOW_ATTR_SNIFFER)
        self.a.send(self.udp(5001))  # sent out of A's port: its sniffer sees it leave
        self.assertEqual(self.got(sniff), [self.udp(5001)])

    def test_ipv6_and_vlan_eth_specs(self):
        v6 = RawQp(self.ctx, self.pd, B)
        v6.v6 = True
        v6.post_recv(4)
        v6.flow(EthSpec(ether_type=0x86dd, ether_type_mask=0xffff),
                Ipv6Spec(dst_ip='fd00::2', dst_ip_mask='ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
                         src_ip='::', src_ip_mask='::'), priority=1)
        ip6 = struct.pack('!IHBB', 6 << 28, 8, 17, 64) + bytes(15) + b'\x01' + bytes.fromhex('fd00') + bytes(13) + b'\x02'
        frame = self.q1.mac + self.a.mac + b'\x86\xdd' + ip6 + struct.pack('!HHHH', 1, 2, 8, 0)
        self.a.send(frame)
        self.assertEqual(self.got(v6), [frame])
        tagged = RawQp(self.ctx, self.pd, B)
        tagged.post_recv(4)
        tagged.flow(EthSpec(vlan_tag=0x0123, vlan_tag_mask=0x0fff), priority=0)
        plain = self.udp(1)
        vframe = plain[:12] + b'\x81\x00\x01\x23' + plain[12:]
        self.a.send(vframe)
        self.a.send(plain)
        self.assertEqual(self.got(tagged), [vframe])  # the tag is put back where it was

    def test_destroyed_flow_steers_nothing(self):
        f = self.q1.flow(TcpUdpSpec(spec_type=e.IBV_FLOW_SPEC_UDP, dst_port=5001, dst_port_mask=0xffff))
        self.a.send(self.udp(5001))
        self.assertEqual(self.got(self.q1), [self.udp(5001)])
        f.close()
        self.q1.flows.remove(f)
        self.a.send(self.udp(5001))
        self.assertEqual(self.got(self.q1), [])


def crc32_le_bytes(data):
    import zlib
    return struct.pack('<I', zlib.crc32(data))


class CreateFlagsTest(RawBase):
    """ibv_create_qp_ex(3) create flags of raw packet QPs."""

    def test_scatter_fcs_appends_the_frame_check_sequence(self):
        a = RawQp(self.ctx, self.pd, A)
        b = RawQp(self.ctx, self.pd, B, create_flags=e.IBV_QP_CREATE_SCATTER_FCS)
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(1)
        f = udp4_frame(b.mac, a.mac, b'fcs please')
        a.send(f)
        w = b.poll(1)[0]
        self.assertEqual(w['byte_len'], len(f) + 4)
        self.assertEqual(b.received(w), f + crc32_le_bytes(f))

    def test_cvlan_stripping_moves_the_tag_into_the_completion(self):
        a = RawQp(self.ctx, self.pd, A)
        b = RawQp(self.ctx, self.pd, B, create_flags=e.IBV_QP_CREATE_CVLAN_STRIPPING, cq_ex=True)
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(2)
        plain = udp4_frame(b.mac, a.mac, b'vlan')
        a.send(plain[:12] + b'\x81\x00\x60\x2a' + plain[12:])  # PCP 3, VID 42
        a.send(plain)
        ws = b.poll(2)
        self.assertEqual(len(ws), 2)
        self.assertEqual(b.received(ws[0]), plain)
        self.assertEqual(ws[0]['cvlan'], 0x602a)
        self.assertEqual(b.received(ws[1]), plain)

    def test_pci_write_end_padding_is_accepted(self):
        q = RawQp(self.ctx, self.pd, A, create_flags=e.IBV_QP_CREATE_PCI_WRITE_END_PADDING)
        self.assertEqual(q.qp.qp_state, e.IBV_QPS_RTS)


class FlowRefusalTest(RawBase):
    """Bad flow rules: the man page's errno and a log line; through pyverbs where it can build
    the rule, through the C op (raw.py) where it cannot (wrong sizes, unknown types)."""

    def setUp(self):
        super().setUp()
        self.q = RawQp(self.ctx, self.pd, B)

    def refused(self, errno_, **kw):
        specs = kw.pop('specs', ())
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.q.flow(*specs, **kw)
        self.assertEqual(cm.exception.error_code, errno_)

    def test_rule_checks(self):
        self.refused(12, priority=16)  # ENOMEM above the last priority, as mlx5
        self.refused(22, flow_type=e.IBV_FLOW_ATTR_SNIFFER, flags=e.IBV_FLOW_ATTR_FLAGS_DONT_TRAP)
        self.refused(22, flow_type=e.IBV_FLOW_ATTR_ALL_DEFAULT,
                     specs=[EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff')])
        self.refused(22, specs=[Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'),
                                Ipv6Spec(dst_ip='fd00::2', dst_ip_mask='ffff::', src_ip='::', src_ip_mask='::')])


# ----- Through the C ops: what pyverbs cannot build (spec sizes, unknown types, TAG, DROP).
import ctypes  # noqa: E402

import raw  # noqa: E402

vp = ctypes.c_void_p


class FlowAttrC(ctypes.Structure):
    _fields_ = [('comp_mask', ctypes.c_uint32), ('type', ctypes.c_int), ('size', ctypes.c_uint16),
                ('priority', ctypes.c_uint16), ('num_of_specs', ctypes.c_uint8), ('port', ctypes.c_uint8),
                ('flags', ctypes.c_uint32)]


class EthFilterC(ctypes.Structure):
    _fields_ = [('dst_mac', ctypes.c_uint8 * 6), ('src_mac', ctypes.c_uint8 * 6), ('ether_type', ctypes.c_uint16),
                ('vlan_tag', ctypes.c_uint16)]


class EthSpecC(ctypes.Structure):
    _fields_ = [('type', ctypes.c_int), ('size', ctypes.c_uint16), ('val', EthFilterC), ('mask', EthFilterC)]


class TagSpecC(ctypes.Structure):
    _fields_ = [('type', ctypes.c_int), ('size', ctypes.c_uint16), ('tag_id', ctypes.c_uint32)]


class DropSpecC(ctypes.Structure):
    _fields_ = [('type', ctypes.c_int), ('size', ctypes.c_uint16)]


class SgeC(ctypes.Structure):
    _fields_ = [('addr', ctypes.c_uint64), ('length', ctypes.c_uint32), ('lkey', ctypes.c_uint32)]


class RecvWrC(ctypes.Structure):
    _fields_ = [('wr_id', ctypes.c_uint64), ('next', vp), ('sg_list', ctypes.POINTER(SgeC)), ('num_sge', ctypes.c_int)]


class CqInitAttrExC(ctypes.Structure):
    _fields_ = [('cqe', ctypes.c_uint32), ('cq_context', vp), ('channel', vp), ('comp_vector', ctypes.c_uint32),
                ('wc_flags', ctypes.c_uint64), ('comp_mask', ctypes.c_uint32), ('flags', ctypes.c_uint32),
                ('parent_domain', vp)]


class QpAttrHead(ctypes.Structure):
    # struct ibv_qp_attr up to port_num; the rest stays zero (the buffer is larger).
    _fields_ = [('words', ctypes.c_uint32 * 9), ('cap', ctypes.c_uint32 * 5), ('ah', ctypes.c_uint8 * 64),
                ('pkey_index', ctypes.c_uint16), ('alt_pkey_index', ctypes.c_uint16), ('bytes', ctypes.c_uint8 * 5),
                ('port_num', ctypes.c_uint8), ('tail', ctypes.c_uint8 * 64)]


def _vctx_op(ctx, back, restype, argtypes):
    """A verbs_context slot: `back` bytes before the embedded ibv_context (verbs.h layout)."""
    addr = ctypes.cast(ctx, vp).value - back
    return ctypes.CFUNCTYPE(restype, *argtypes, use_errno=True)(ctypes.c_void_p.from_address(addr).value)


class CFlowBase(RawBase):
    """A RAW_PACKET QP on svb made through the C API, four receives posted, and a sender on sva."""

    def setUp(self):
        super().setUp()
        os.environ['SOFTVERBS_RAW_IF'] = B
        self.c = raw.RawContext()
        ctx = self.c.ctx
        self.create_flow = _vctx_op(ctx, 80, vp, [vp, vp])
        self._destroy_flow = _vctx_op(ctx, 96, ctypes.c_int, [vp])
        self.cflows = []  # destroyed before the QP: a rule left behind would outlive it
        create_cq_ex = _vctx_op(ctx, 120, vp, [vp, vp])
        self.cpd = self.c.alloc_pd()
        attr = CqInitAttrExC(cqe=64, wc_flags=e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_FLOW_TAG)
        self.cqx = create_cq_ex(ctx, ctypes.byref(attr))
        self.assertTrue(self.cqx)
        self.c._track(raw.lib.ibv_destroy_cq, self.cqx)
        self.qp = self.c.create_qp(self.cpd, self.cqx, e.IBV_QPT_RAW_PACKET)
        raw.lib.ibv_modify_qp.argtypes = [vp, vp, ctypes.c_int]
        for state, mask in ((e.IBV_QPS_INIT, e.IBV_QP_STATE | e.IBV_QP_PORT), (e.IBV_QPS_RTR, e.IBV_QP_STATE)):
            a = QpAttrHead()
            a.words[0] = state
            a.port_num = 1
            self.assertEqual(raw.lib.ibv_modify_qp(self.qp, ctypes.byref(a), mask), 0)
        self.buf = (ctypes.c_uint8 * 4096)()
        self.mr = self.c.reg_mr(self.cpd, self.buf, e.IBV_ACCESS_LOCAL_WRITE)
        lkey = ctypes.c_uint32.from_address(self.mr + 36).value  # struct ibv_mr: context, pd, addr, length, handle, lkey
        ops = ctypes.cast(ctx, ctypes.POINTER(raw.IbvContext)).contents.ops
        post_recv = ctypes.CFUNCTYPE(ctypes.c_int, vp, vp, vp)(ops[26])
        for i in range(4):
            sge = SgeC(ctypes.addressof(self.buf) + i * 1024, 1024, lkey)
            wr = RecvWrC(wr_id=i, sg_list=ctypes.pointer(sge), num_sge=1)
            bad = vp()
            self.assertEqual(post_recv(self.qp, ctypes.byref(wr), ctypes.byref(bad)), 0)
        self.sender = RawQp(self.ctx, self.pd, A)  # through pyverbs
        self.mac_b = mac_bytes(mac_of(B))

    def tearDown(self):
        for f in reversed(self.cflows):
            self._destroy_flow(f)
        self.c.close()
        super().tearDown()

    def destroy_flow(self, f):
        self.cflows.remove(f)
        return self._destroy_flow(f)

    def flow(self, *specs, expect=0):
        body = b''.join(bytes(s) for s in specs)
        head = FlowAttrC(type=e.IBV_FLOW_ATTR_NORMAL, size=ctypes.sizeof(FlowAttrC) + len(body),
                         num_of_specs=len(specs), port=1)
        blob = ctypes.create_string_buffer(bytes(head) + body)
        f = self.create_flow(self.qp, blob)
        if expect:
            self.assertFalse(f)
            self.assertEqual(ctypes.get_errno(), expect)
        else:
            self.assertTrue(f, os.strerror(ctypes.get_errno()))
            self.cflows.append(f)
        return f

    def eth(self):
        s = EthSpecC(type=e.IBV_FLOW_SPEC_ETH, size=ctypes.sizeof(EthSpecC))
        for i, b in enumerate(self.mac_b):
            s.val.dst_mac[i], s.mask.dst_mac[i] = b, 0xff
        return s

    def poll_tags(self, n, timeout=3.0):
        """(wr_id, status, flow_tag) of up to n completions, through the ibv_cq_ex ops."""
        fn = lambda off, res: ctypes.CFUNCTYPE(res, vp)(ctypes.c_void_p.from_address(self.cqx + off).value)
        start = ctypes.CFUNCTYPE(ctypes.c_int, vp, vp)(ctypes.c_void_p.from_address(self.cqx + 144).value)
        next_, end = fn(152, ctypes.c_int), fn(160, None)
        read_tag = fn(264, ctypes.c_uint32)
        got, deadline = [], time.monotonic() + timeout
        while len(got) < n and time.monotonic() < deadline:
            if start(self.cqx, None) != 0:
                time.sleep(0.002)
                continue
            while True:
                wr_id = ctypes.c_uint64.from_address(self.cqx + 136).value
                status = ctypes.c_int.from_address(self.cqx + 132).value
                got.append((wr_id, status, read_tag(self.cqx)))
                if next_(self.cqx) != 0:
                    break
            end(self.cqx)
        return got



class CFlowTest(CFlowBase):
    """TAG and DROP actions, spec sizes and types."""

    def test_tag_reaches_the_completion(self):
        self.flow(self.eth(), TagSpecC(type=e.IBV_FLOW_SPEC_ACTION_TAG, size=ctypes.sizeof(TagSpecC), tag_id=0xabcde))
        self.sender.send(udp4_frame(self.mac_b, self.sender.mac, b'tagged'))
        self.assertEqual(self.poll_tags(1), [(0, e.IBV_WC_SUCCESS, 0xabcde)])

    def test_drop_drops(self):
        f = self.flow(self.eth(), DropSpecC(type=e.IBV_FLOW_SPEC_ACTION_DROP, size=ctypes.sizeof(DropSpecC)))
        self.sender.send(udp4_frame(self.mac_b, self.sender.mac, b'dropped'))
        self.assertEqual(self.poll_tags(1, timeout=0.3), [])
        self.assertEqual(self.destroy_flow(f), 0)

    def test_bad_specs(self):
        bad_size = self.eth()
        bad_size.size -= 2
        self.flow(bad_size, expect=22)
        unknown = DropSpecC(type=0x77, size=ctypes.sizeof(DropSpecC))
        self.flow(unknown, expect=22)
        big_tag = TagSpecC(type=e.IBV_FLOW_SPEC_ACTION_TAG, size=ctypes.sizeof(TagSpecC), tag_id=1 << 24)
        self.flow(self.eth(), big_tag, expect=22)
        counter = DropSpecC(type=e.IBV_FLOW_SPEC_ACTION_COUNT, size=ctypes.sizeof(DropSpecC))
        self.flow(counter, expect=22)  # its struct (ibv_flow_spec_counter_action) is 16 bytes


# ----- Flow counters (ibv_create_counters(3) and friends), through the C ops.
class CountSpecC(ctypes.Structure):
    _fields_ = [('type', ctypes.c_int), ('size', ctypes.c_uint16), ('counters', vp)]


class CounterAttachC(ctypes.Structure):
    _fields_ = [('counter_desc', ctypes.c_int), ('index', ctypes.c_uint32), ('comp_mask', ctypes.c_uint32)]


IBV_COUNTER_PACKETS, IBV_COUNTER_BYTES = 0, 1
EINVAL, EBUSY, EOPNOTSUPP = 22, 16, 95


def log_lines():
    """The library's error lines so far (test_raw_packet.py runs these cases with a log file)."""
    with open(os.environ['RAW_CASES_LOG_FILE']) as f:
        return f.read()


class CountersTest(CFlowBase):
    def setUp(self):
        super().setUp()
        ctx = self.c.ctx
        self.create_counters = _vctx_op(ctx, 280, vp, [vp, vp])
        self.destroy_counters = _vctx_op(ctx, 272, ctypes.c_int, [vp])
        self.attach = _vctx_op(ctx, 288, ctypes.c_int, [vp, vp, vp])
        read = _vctx_op(ctx, 296, ctypes.c_int, [vp, vp, ctypes.c_uint32, ctypes.c_uint32])
        self.read = lambda c, n, flags=0, room=None: self._read(read, c, n, flags, room)

    def _read(self, fn, counters, n, flags, room):
        buf = (ctypes.c_uint64 * (room or max(n, 1)))(*([7] * (room or max(n, 1))))
        rc = fn(counters, buf, n, flags)
        return rc, list(buf)

    def counters(self, *descs):
        init = ctypes.c_uint32(0)
        c = self.create_counters(self.c.ctx, ctypes.byref(init))
        self.assertTrue(c, os.strerror(ctypes.get_errno()))
        for desc, index in descs:
            self.assertEqual(self.attach(c, ctypes.byref(CounterAttachC(desc, index, 0)), None), 0)
        return c

    def count_spec(self, c):
        return CountSpecC(type=e.IBV_FLOW_SPEC_ACTION_COUNT, size=ctypes.sizeof(CountSpecC), counters=c)

    def test_counts_exactly_what_the_rule_matched(self):
        c = self.counters((IBV_COUNTER_PACKETS, 0), (IBV_COUNTER_BYTES, 1))
        f = self.flow(self.eth(), self.count_spec(c))
        frames = [udp4_frame(self.mac_b, self.sender.mac, b'n' * n) for n in (40, 300, 900)]  # WQEs: 1 KiB
        for fr in frames:
            self.sender.send(fr, inline=False)
        # A frame to another MAC crosses the veth too, but the rule does not match it.
        self.sender.send(udp4_frame(b'\x02\x00\x00\x00\x00\x99', self.sender.mac, b'not counted'))
        self.assertEqual(self.poll_tags(3), [(i, e.IBV_WC_SUCCESS, 0) for i in range(3)])
        self.assertEqual(self.read(c, 2), (0, [3, sum(map(len, frames))]))
        self.assertEqual(self.read(c, 2, flags=1), (0, [3, sum(map(len, frames))]))  # PREFER_CACHED: exact too
        self.assertEqual(self.read(c, 3)[1][2], 0)  # an index no description names reads 0
        # Bound: no more descriptions, no second flow, no destroy.
        self.assertEqual(self.attach(c, ctypes.byref(CounterAttachC(IBV_COUNTER_PACKETS, 2, 0)), None), EBUSY)
        self.flow(self.eth(), self.count_spec(c), expect=EINVAL)
        self.assertEqual(self.destroy_counters(c), EBUSY)
        self.assertEqual(self.destroy_flow(f), 0)
        self.assertEqual(self.read(c, 2), (0, [3, sum(map(len, frames))]))  # the values stay
        self.assertEqual(self.destroy_counters(c), 0)
        log = log_lines()
        self.assertRegex(log, r'ibv_attach_counters_point_flow\(counters 0x[0-9a-f]+\): the counters are bound')
        self.assertRegex(log, r'ibv_destroy_counters\(counters 0x[0-9a-f]+\): a flow counts with them')

    def test_bad_input(self):
        c = self.counters((IBV_COUNTER_PACKETS, 0), (IBV_COUNTER_BYTES, 3))
        # A short buffer: the highest index (3) needs 4 entries; nothing is written.
        self.assertEqual(self.read(c, 3, room=4), (EINVAL, [7, 7, 7, 7]))
        self.assertEqual(self.read(c, 4, flags=2)[0], EINVAL)  # an unknown flag
        self.assertEqual(self.attach(c, ctypes.byref(CounterAttachC(2, 0, 0)), None), EOPNOTSUPP)
        self.assertEqual(self.attach(c, ctypes.byref(CounterAttachC(0, 0, 1)), None), EOPNOTSUPP)  # comp_mask
        f = self.flow(self.eth())
        self.assertEqual(self.attach(c, ctypes.byref(CounterAttachC(0, 0, 0)), f), EOPNOTSUPP)  # static binding only
        two = self.counters()
        self.flow(self.count_spec(c), self.count_spec(two), expect=EINVAL)  # one counters object per rule
        # Counters on a flow of a non-raw QP: refused with the flow, and the counters stay unbound.
        rc_qp = self.c.create_qp(self.cpd, self.cqx, e.IBV_QPT_RC)
        self.assertFalse(self.create_flow(rc_qp, self._attr(self.eth(), self.count_spec(c))))
        self.assertEqual(ctypes.get_errno(), EINVAL)
        self.assertEqual(self.destroy_counters(two), 0)
        self.assertEqual(self.destroy_counters(c), 0)
        log = log_lines()
        self.assertRegex(log, r'ibv_read_counters\(counters 0x[0-9a-f]+\): ncounters 3 is below the 4 entries')
        self.assertRegex(log, r'ibv_read_counters\(counters 0x[0-9a-f]+\): flags has bits other than')
        self.assertRegex(log, r'ibv_attach_counters_point_flow\(counters 0x[0-9a-f]+\): counter_desc 2 is not')
        self.assertRegex(log, r'ibv_create_flow\(qp 0x[0-9a-f]+\): a rule has at most one IBV_FLOW_SPEC_ACTION_COUNT')
        self.assertRegex(log, r'ibv_create_flow\(qp 0x[0-9a-f]+\): flow rules attach to RAW_PACKET')

    def _attr(self, *specs):
        body = b''.join(bytes(s) for s in specs)
        head = FlowAttrC(type=e.IBV_FLOW_ATTR_NORMAL, size=ctypes.sizeof(FlowAttrC) + len(body),
                         num_of_specs=len(specs), port=1)
        self._blob = ctypes.create_string_buffer(bytes(head) + body)
        return self._blob


# ----- RSS: receive WQs, an indirection table, a QP hashing into it.
from pyverbs.wq import WQ, WQAttr, WQInitAttr, RwqIndTable, RwqIndTableInitAttr, RxHashConf  # noqa: E402

MS_KEY = bytes.fromhex('6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa')


def toeplitz(key, data):
    """Microsoft's RSS hash, written out bit by bit (independent of the library's)."""
    k = int.from_bytes(key, 'big')
    klen = len(key) * 8
    h = 0
    for i in range(len(data) * 8):
        if data[i // 8] >> (7 - i % 8) & 1:
            h ^= (k >> (klen - 32 - i)) & 0xffffffff if klen - 32 - i >= 0 else (k << (i + 32 - klen)) & 0xffffffff
    return h


class RssBase(RawBase):
    def setUp(self):
        super().setUp()
        self.sender = RawQp(self.ctx, self.pd, A)
        self.cqs = [CQ(self.ctx, 128) for _ in range(4)]
        self.wqs = [WQ(self.ctx, WQInitAttr(wq_pd=self.pd, wq_cq=cq, wq_type=e.IBV_WQT_RQ, max_wr=64, max_sge=1))
                    for cq in self.cqs]
        self.mr = MR(self.pd, 4 * 64 * 256, e.IBV_ACCESS_LOCAL_WRITE)
        self.made = []  # QPs and tables, closed users first (the kernel refuses the other order: EBUSY)

    def tearDown(self):
        for obj in reversed(self.made):
            obj.close()
        super().tearDown()

    def table(self, log_size=2, wqs=None):
        t = RwqIndTable(self.ctx, RwqIndTableInitAttr(log_ind_tbl_size=log_size, wqs_list=wqs or self.wqs))
        self.made.append(t)
        return t

    def rss_qp(self, table, key=MS_KEY, fields=None, dv_flags=0):
        fields = fields if fields is not None else (e.IBV_RX_HASH_SRC_IPV4 | e.IBV_RX_HASH_DST_IPV4 |
                                                    e.IBV_RX_HASH_SRC_PORT_UDP | e.IBV_RX_HASH_DST_PORT_UDP)
        conf = RxHashConf(rx_hash_function=e.IBV_RX_HASH_FUNC_TOEPLITZ, rx_hash_key_len=len(key),
                          rx_hash_key=list(key), rx_hash_fields_mask=fields)
        os.environ['SOFTVERBS_RAW_IF'] = B
        init = QPInitAttrEx(qp_type=e.IBV_QPT_RAW_PACKET, pd=self.pd, hash_conf=conf, ind_table=table,
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_IND_TABLE | e.IBV_QP_INIT_ATTR_RX_HASH)
        if dv_flags:
            from pyverbs.providers.mlx5.mlx5dv import Mlx5DVQPInitAttr, Mlx5QP
            import pyverbs.providers.mlx5.mlx5_enums as dve
            qp = Mlx5QP(self.ctx, init, Mlx5DVQPInitAttr(comp_mask=dve.MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
                                                         create_flags=dv_flags))
        else:
            qp = QP(self.ctx, init)
        self.made.append(qp)
        return qp

    def ready(self, n=64):
        for k, wq in enumerate(self.wqs):
            wq.modify(WQAttr(attr_mask=e.IBV_WQ_ATTR_STATE, wq_state=e.IBV_WQS_RDY))
            for i in range(n):
                wq.post_recv(RecvWR(wr_id=k * 1000 + i, num_sge=1,
                                    sg=[SGE(self.mr.buf + (k * 64 + i) * 256, 256, self.mr.lkey)]))

    def frames_of(self, k, timeout=0.5):
        out, end = [], time.monotonic() + timeout
        while time.monotonic() < end:
            n, wcs = self.cqs[k].poll(64)
            for w in wcs[:n]:
                self.assertEqual(w.status, e.IBV_WC_SUCCESS)
                i = w.wr_id - k * 1000
                out.append(self.mr.read(w.byte_len, (k * 64 + i) * 256))
            if n == 0:
                time.sleep(0.01)
        return out



class RssTest(RssBase):
    def test_toeplitz_picks_the_wq_for_each_flow(self):
        table = self.table()
        qp = self.rss_qp(table)
        attr = FlowAttr(num_of_specs=1, port=1)
        attr.specs.append(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'))
        self.made.append(Flow(qp, attr))
        self.ready()
        want = [[] for _ in range(4)]
        mac_b = mac_bytes(mac_of(B))
        for sport in range(4000, 4032):
            f = udp4_frame(mac_b, self.sender.mac, b'rss %d' % sport, sport=sport, dport=5000)
            key_in = bytes(map(int, IP_A.split('.'))) + bytes(map(int, IP_B.split('.'))) + struct.pack('!HH', sport, 5000)
            want[toeplitz(MS_KEY, key_in) & 3].append(f)
            self.sender.send(f)
        self.assertEqual(len(self.sender.poll(32)), 32)
        got = [self.frames_of(k) for k in range(4)]
        self.assertEqual(got, want)
        self.assertGreater(sum(1 for w in want if w), 1)  # the flows really spread

    def test_known_vector_through_the_hash(self):
        # Microsoft's first IPv4 vector: 66.9.149.187 -> 161.142.100.80, IPv4 only: 0x323e8fc2.
        self.assertEqual(toeplitz(MS_KEY, bytes([66, 9, 149, 187, 161, 142, 100, 80])), 0x323e8fc2)

    def test_wq_in_reset_receives_nothing(self):
        table = self.table(log_size=1, wqs=self.wqs[:1] * 2)
        qp = self.rss_qp(table)
        attr = FlowAttr(num_of_specs=1, port=1)
        attr.specs.append(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'))
        self.made.append(Flow(qp, attr))
        self.wqs[0].post_recv(RecvWR(wr_id=0, num_sge=1, sg=[SGE(self.mr.buf, 256, self.mr.lkey)]))
        self.sender.send(udp4_frame(mac_bytes(mac_of(B)), self.sender.mac, b'too early'))
        self.assertEqual(self.frames_of(0, timeout=0.3), [])

    def test_refusals(self):
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.table(log_size=9, wqs=self.wqs * 128)  # 512 entries: above rss_caps
        self.assertEqual(cm.exception.error_code, 22)
        table = self.table()
        for kw in ({'key': MS_KEY[:20]},
                   {'fields': e.IBV_RX_HASH_SRC_PORT_TCP | e.IBV_RX_HASH_SRC_PORT_UDP}):
            with self.assertRaises(PyverbsRDMAError) as cm:
                self.rss_qp(table, **kw)
            self.assertEqual(cm.exception.error_code, 22, kw)
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.rss_qp(table, fields=(1 << 31) | e.IBV_RX_HASH_SRC_IPV4)  # IBV_RX_HASH_INNER
        self.assertEqual(cm.exception.error_code, 95)
        wq = self.wqs[0]
        wq.modify(WQAttr(attr_mask=e.IBV_WQ_ATTR_STATE, wq_state=e.IBV_WQS_ERR))
        with self.assertRaises(PyverbsRDMAError) as cm:  # ERR leaves only to RESET
            wq.modify(WQAttr(attr_mask=e.IBV_WQ_ATTR_STATE, wq_state=e.IBV_WQS_RDY))
        self.assertEqual(cm.exception.error_code, 22)
        with self.assertRaises(PyverbsRDMAError) as cm:  # curr_wq_state must be the WQ's state
            wq.modify(WQAttr(attr_mask=e.IBV_WQ_ATTR_STATE | e.IBV_WQ_ATTR_CURR_STATE, wq_state=e.IBV_WQS_RESET,
                             curr_wq_state=e.IBV_WQS_RDY))
        self.assertEqual(cm.exception.error_code, 22)


# ----- mlx5dv on raw QPs: tunnel offloads (inner RSS, inner checksums) and self-loopback.
MLX5DV_QP_CREATE_TUNNEL_OFFLOADS = 1
MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC = 2
MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC = 4
IBV_RX_HASH_INNER = 1 << 31
INNER_A, INNER_B = '192.168.7.1', '192.168.7.2'


def vxlan4_frame(dst_mac, src_mac, inner, vni=0x1234):
    """Outer Ethernet/IPv4/UDP to 4789 (VXLAN, RFC 7348) carrying the `inner` frame."""
    return udp4_frame(dst_mac, src_mac, b'\x08\0\0\0' + vni.to_bytes(3, 'big') + b'\0' + inner, sport=49152, dport=4789)


class InnerRssTest(RssBase):
    UDP4 = e.IBV_RX_HASH_SRC_IPV4 | e.IBV_RX_HASH_DST_IPV4 | e.IBV_RX_HASH_SRC_PORT_UDP | e.IBV_RX_HASH_DST_PORT_UDP

    def steer_all(self, qp):
        attr = FlowAttr(num_of_specs=1, port=1)
        attr.specs.append(Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'))
        self.made.append(Flow(qp, attr))

    def test_inner_hash_picks_the_wq_of_the_carried_packet(self):
        qp = self.rss_qp(self.table(), fields=IBV_RX_HASH_INNER | self.UDP4, dv_flags=MLX5DV_QP_CREATE_TUNNEL_OFFLOADS)
        self.steer_all(qp)
        self.ready(n=32)
        want = [[] for _ in range(4)]
        mac_b = mac_bytes(mac_of(B))
        for sport in range(6000, 6016):
            inner = udp4_frame(b'\x02' * 6, b'\x04' * 6, b'inner %d' % sport, sport=sport, dport=7000,
                               src=INNER_A, dst=INNER_B)
            f = vxlan4_frame(mac_b, self.sender.mac, inner)  # the outer headers never change
            key_in = bytes(map(int, INNER_A.split('.'))) + bytes(map(int, INNER_B.split('.'))) + \
                struct.pack('!HH', sport, 7000)
            want[toeplitz(MS_KEY, key_in) & 3].append(f)
            self.sender.send(f)
        self.assertEqual(len(self.sender.poll(16)), 16)
        self.assertEqual([self.frames_of(k) for k in range(4)], want)
        self.assertGreater(sum(1 for w in want if w), 1)  # spread by the inner ports alone

    def test_tunnel_offloads_check_the_inner_checksums(self):
        qp = self.rss_qp(self.table(log_size=1, wqs=self.wqs[:1] * 2), fields=self.UDP4,
                         dv_flags=MLX5DV_QP_CREATE_TUNNEL_OFFLOADS)
        self.steer_all(qp)
        self.ready(n=4)
        mac_b = mac_bytes(mac_of(B))
        good = udp4_frame(b'\x02' * 6, b'\x04' * 6, b'inner ok', src=INNER_A, dst=INNER_B)
        bad = good[:-1] + bytes([good[-1] ^ 1])  # its UDP checksum no longer holds
        for inner in (good, bad):
            self.sender.send(vxlan4_frame(mac_b, self.sender.mac, inner))
        self.assertEqual(len(self.sender.poll(2)), 2)
        flags, end = [], time.monotonic() + 3
        while len(flags) < 2 and time.monotonic() < end:
            n, wcs = self.cqs[0].poll(2)
            flags += [bool(w.wc_flags & e.IBV_WC_IP_CSUM_OK) for w in wcs[:n]]
        self.assertEqual(flags, [True, False])  # the outer checksums are right in both

    def test_inner_hash_needs_tunnel_offloads(self):
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.rss_qp(self.table(), fields=IBV_RX_HASH_INNER | self.UDP4)
        self.assertEqual(cm.exception.error_code, 95)  # EOPNOTSUPP, as mlx5
        self.assertRegex(log_lines(), r'IBV_RX_HASH_INNER hashes tunnelled frames: it needs '
                                      r'MLX5DV_QP_CREATE_TUNNEL_OFFLOADS')


class SelfLoopbackTest(RawBase):
    """A frame a QP sends to its own port comes back to the QPs of other contexts, and to those
    of its own context only with MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC / _MC."""

    def test_self_loopback_needs_the_allow_flags(self):
        sender = RawQp(self.ctx, self.pd, A)
        plain = RawQp(self.ctx, self.pd, A)
        uc = RawQp(self.ctx, self.pd, A, dv_flags=MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC)
        mc = RawQp(self.ctx, self.pd, A, dv_flags=MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC)
        ctx2 = base.open_context()
        self.addCleanup(ctx2.close)
        other = RawQp(ctx2, PD(ctx2), A)
        qps = (plain, uc, mc, other)
        to_me = udp4_frame(sender.mac, sender.mac, b'to my own port', dport=5999)
        to_all = udp4_frame(b'\xff' * 6, sender.mac, b'to everyone', dport=5999)
        for q in qps:
            q.post_recv(4)
            for dst in (sender.mac, b'\xff' * 6):
                q.flow(EthSpec(dst_mac=':'.join('%02x' % b for b in dst), dst_mac_mask='ff:ff:ff:ff:ff:ff'),
                       Ipv4ExtSpec(dst_ip=IP_B, dst_ip_mask='255.255.255.255'),
                       TcpUdpSpec(spec_type=e.IBV_FLOW_SPEC_UDP, dst_port=5999, dst_port_mask=0xffff))
        sender.send(to_me, wr_id=1)
        sender.send(to_all, wr_id=2)
        self.assertEqual(len(sender.poll(2)), 2)
        got = [[q.received(w) for w in q.poll(n)] for q, n in ((uc, 1), (mc, 1), (other, 2))]
        self.assertEqual(got, [[to_me], [to_all], [to_me, to_all]])
        self.assertEqual(drain(plain, 0.2), [])  # its own context's frames, not allowed
        self.assertEqual(drain(uc, 0.05) + drain(mc, 0.05), [])  # each only its kind


# ----- Packet pacing of raw QPs (ibv_modify_qp_rate_limit(3) / IBV_QP_RATE_LIMIT).
class PacingTest(RawBase):
    def rate(self, q, kbps):
        a = QPAttr()
        a.rate_limit = kbps
        q.qp.modify(a, e.IBV_QP_RATE_LIMIT)

    def test_paced_frames_arrive_in_order_and_complete(self):
        a, b = self.pair()
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(8)
        self.rate(a, 100000)  # 100 Mb/s: these 8 frames take well under a second
        frames = [udp4_frame(b.mac, a.mac, bytes([i]) * 400) for i in range(8)]
        for i, f in enumerate(frames):
            a.send(f, wr_id=i)
        sends = a.poll(8)
        self.assertEqual([(w['wr_id'], w['status']) for w in sends], [(i, e.IBV_WC_SUCCESS) for i in range(8)])
        self.assertEqual([b.received(w) for w in b.poll(8)], frames)

    def test_waiting_wrs_are_flushed_by_err(self):
        a, b = self.pair()
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(4)
        # 1 kb/s with a one-frame bucket: the first frame leaves, the next waits seconds for its
        # bytes -- long past the ERR below. Each WR completes when its frame leaves, or flushed.
        self.rate(a, 1)
        frames = [udp4_frame(b.mac, a.mac, bytes([i]) * 1000) for i in range(3)]
        for i, f in enumerate(frames):
            a.send(f, wr_id=i, inline=False)
        self.assertEqual([(w['wr_id'], w['status']) for w in a.poll(1)], [(0, e.IBV_WC_SUCCESS)])
        self.assertEqual([b.received(w) for w in b.poll(1)], frames[:1])
        err = QPAttr()
        err.qp_state = e.IBV_QPS_ERR
        a.qp.modify(err, e.IBV_QP_STATE)
        self.assertEqual([(w['wr_id'], w['status']) for w in a.poll(2)],
                         [(1, e.IBV_WC_WR_FLUSH_ERR), (2, e.IBV_WC_WR_FLUSH_ERR)])
        self.assertEqual(drain(b, 0.2), [])  # they never left


# ----- TSO: one work request, MSS-sized TCP segments on the wire.
from pyverbs.qp import QPEx  # noqa: E402


def tcp4_header(dst_mac, src_mac, seq, flags=0x18):
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 0, 0x2000, 0x4000, 64, 6, 0, bytes([10, 66, 0, 1]),
                     bytes([10, 66, 0, 2]))
    tcp = struct.pack('!HHIIBBHHH', 40000, 80, seq, 0, 5 << 4, flags, 0xffff, 0, 0)
    return dst_mac + src_mac + b'\x08\x00' + ip + tcp


class TsoTest(RawBase):
    def tso_qp(self, max_tso_header=128):
        os.environ['SOFTVERBS_RAW_IF'] = A
        cq = CQ(self.ctx, 64)
        init = QPInitAttrEx(qp_type=e.IBV_QPT_RAW_PACKET, scq=cq, rcq=cq, pd=self.pd,
                            cap=QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=1),
                            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                            e.IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
                            send_ops_flags=e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_TSO,
                            max_tso_header=max_tso_header)
        qp = QPEx(self.ctx, init)
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.port_num = 1
        qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PORT)
        for state in (e.IBV_QPS_RTR, e.IBV_QPS_RTS):
            a = QPAttr()
            a.qp_state = state
            qp.modify(a, e.IBV_QP_STATE)
        return qp, cq

    def test_segments_arrive_with_correct_headers(self):
        b = RawQp(self.ctx, self.pd, B)
        b.flow(EthSpec(dst_mac=mac_of(B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(8)
        qp, cq = self.tso_qp()
        mr = MR(self.pd, 16384, e.IBV_ACCESS_LOCAL_WRITE)
        hdr = tcp4_header(b.mac, mac_bytes(mac_of(A)), seq=1000, flags=0x19)  # PSH|FIN|ACK... FIN last only
        payload = bytes((i * 7) & 0xff for i in range(3000))
        mr.write(hdr, len(hdr), 0)
        mr.write(payload, len(payload), 1024)
        qp.wr_start()
        qp.wr_id = 77
        qp.wr_flags = e.IBV_SEND_SIGNALED
        qp.wr_send_tso(mr.buf, len(hdr), 1200)
        qp.wr_set_sge(SGE(mr.buf + 1024, len(payload), mr.lkey))
        qp.wr_complete()
        n, wcs = 0, []
        for _ in range(500):
            n, wcs = cq.poll(1)
            if n:
                break
            time.sleep(0.01)
        self.assertEqual((wcs[0].wr_id, wcs[0].status), (77, e.IBV_WC_SUCCESS))
        segs = [b.received(w) for w in b.poll(3)]
        self.assertEqual(len(segs), 3)
        self.assertEqual(b''.join(s[54:] for s in segs), payload)
        for i, s in enumerate(segs):
            total, ident = struct.unpack('!HH', s[16:20])
            seq, = struct.unpack('!I', s[38:42])
            self.assertEqual(total, 40 + len(s) - 54)
            self.assertEqual(ident, 0x2000 + i)
            self.assertEqual(seq, 1000 + 1200 * i)
            self.assertEqual(s[47] & 0x09 != 0, i == 2)  # FIN, PSH on the last segment only
            self.assertEqual(csum(s[14:34]), 0xffff)  # IPv4 header checksum
            pseudo = s[26:34] + struct.pack('!BBH', 0, 6, len(s) - 34)
            self.assertEqual(csum(pseudo + s[34:]), 0xffff)  # TCP checksum

    def test_refusals(self):
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.tso_qp(max_tso_header=1024)  # above the device's 256
        self.assertEqual(cm.exception.error_code, 22)
        qp, cq = self.tso_qp(max_tso_header=64)
        mr = MR(self.pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
        qp.wr_start()
        qp.wr_send_tso(mr.buf, 100, 1000)  # header above max_tso_header
        qp.wr_set_sge(SGE(mr.buf, 1000, mr.lkey))
        with self.assertRaises(PyverbsRDMAError) as cm:
            qp.wr_complete()
        self.assertEqual(cm.exception.error_code, 22)
