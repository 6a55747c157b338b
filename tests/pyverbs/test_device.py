"""The device model (DESIGN.md section 3): one device, one RoCE port, its GID table, limits."""
import errno
import ipaddress
import os
import select
import unittest

import base
import pyverbs.enums as e
import raw
from pyverbs.device import get_device_list
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.pyverbs_error import PyverbsRDMAError

tearDownModule = base.tear_down_module

ZERO_GID = ipaddress.IPv6Address(0)


class DeviceListTest(unittest.TestCase):

    def test_exactly_one_device_softverbs0(self):
        devs = get_device_list()
        self.assertEqual([d.name for d in devs], [b'softverbs0'])
        self.assertEqual(devs[0].node_type, e.IBV_NODE_CA)
        self.assertEqual(devs[0].transport_type, e.IBV_TRANSPORT_IB)
        self.assertNotEqual(devs[0].guid, 0)


class DeviceTest(unittest.TestCase):

    def setUp(self):
        self.ctx = base.open_context()

    def tearDown(self):
        self.ctx.close()

    def test_query_device_limits(self):
        a = self.ctx.query_device()
        expected = dict(max_qp=65536, max_qp_wr=32768, max_sge=32, max_cqe=1048575,
                        max_qp_rd_atom=16, max_qp_init_rd_atom=16, phys_port_cnt=1,
                        vendor_id=0x5356, max_pkeys=1)
        for name, value in expected.items():
            with self.subTest(attr=name):
                self.assertEqual(getattr(a, name), value)
        self.assertEqual(a.atomic_caps, e.IBV_ATOMIC_HCA)
        self.assertGreater(a.max_mr_size, 0)
        self.assertEqual(a.node_guid, a.sys_image_guid)
        # What the device does not offer it does not claim (no QP resizing).
        self.assertFalse(a.device_cap_flags & e.IBV_DEVICE_RESIZE_MAX_WR)

    def test_query_device_ex(self):
        x = self.ctx.query_device_ex()
        a = self.ctx.query_device()
        o = x.orig_attr
        for name in ('max_qp', 'max_qp_wr', 'max_sge', 'max_cqe', 'max_qp_rd_atom',
                     'max_qp_init_rd_atom', 'atomic_caps', 'phys_port_cnt', 'vendor_id',
                     'max_pkeys', 'max_mr_size', 'node_guid'):
            with self.subTest(attr=name):
                self.assertEqual(getattr(o, name), getattr(a, name))
        self.assertEqual(x.phys_port_cnt_ex, 1)

    def test_capabilities_match_the_refusals(self):
        # What the verbs refuse, the device must not advertise (and the reverse for SRQ resize).
        a = self.ctx.query_device()
        x = self.ctx.query_device_ex()
        # Memory windows of both types, type 2 checking QP and PD (2B); MRs and MWs share keys.
        self.assertTrue(a.device_cap_flags & e.IBV_DEVICE_MEM_WINDOW)
        self.assertTrue(a.device_cap_flags & e.IBV_DEVICE_MEM_WINDOW_TYPE_2B)
        self.assertFalse(a.device_cap_flags & e.IBV_DEVICE_MEM_WINDOW_TYPE_2A)
        self.assertEqual(a.max_mw, a.max_mr)
        self.assertTrue(a.device_cap_flags & e.IBV_DEVICE_XRC)  # same host (test_xrc.py)
        self.assertTrue(a.device_cap_flags & e.IBV_DEVICE_SRQ_RESIZE)  # IBV_SRQ_MAX_WR works
        # ODP and implicit ODP (test_odp.py); device memory up to max_dm_size (test_dm.py).
        self.assertEqual(x.odp_caps.general_caps, e.IBV_ODP_SUPPORT | e.IBV_ODP_SUPPORT_IMPLICIT)
        self.assertEqual(x.max_dm_size, 256 * 1024)
        self.assertEqual(x.completion_timestamp_mask, 2**64 - 1)  # 64-bit device clock
        self.assertEqual(x.hca_core_clock, 1000000)  # kHz: one tick per nanosecond
        # Packet pacing of RC, UC, UD and raw packet send queues up to the port's 100 Gb/s
        # (test_rate_limit.py, raw_cases.PacingTest).
        self.assertEqual((x.packet_pacing_caps.qp_rate_limit_min, x.packet_pacing_caps.qp_rate_limit_max),
                         (1, 100000000))
        self.assertEqual(x.packet_pacing_caps.supported_qpts,
                         (1 << e.IBV_QPT_RC) | (1 << e.IBV_QPT_UC) | (1 << e.IBV_QPT_UD) |
                         (1 << e.IBV_QPT_RAW_PACKET))
        self.assertEqual(x.tso_caps.max_tso, 256 * 1024)  # raw packet QPs (test_raw_packet.TsoTest)

    def test_query_port_1(self):
        p = self.ctx.query_port(base.PORT)
        self.assertEqual(p.state, e.IBV_PORT_ACTIVE)
        self.assertEqual(p.link_layer, e.IBV_LINK_LAYER_ETHERNET)
        self.assertEqual(p.max_mtu, e.IBV_MTU_4096)
        self.assertEqual(p.active_mtu, base.expected_active_mtu())  # the interfaces' (rxe's rule)
        self.assertEqual(p.gid_tbl_len, 64)
        self.assertEqual(p.lid, 0)
        self.assertEqual(p.pkey_tbl_len, 1)

    def test_query_port_that_does_not_exist(self):
        for port in (0, 2):
            with self.subTest(port=port):
                with self.assertRaises(PyverbsRDMAError):
                    self.ctx.query_port(port)

    def test_gid_0_is_link_local(self):
        gid = base.gid_address(self.ctx.query_gid(base.PORT, 0))
        self.assertTrue(gid.is_link_local, gid)
        self.assertEqual(gid.packed[:8], bytes.fromhex('fe80000000000000'))
        self.assertNotEqual(gid.packed[8:], bytes(8))

    def test_gid_1_is_ipv4_mapped_loopback(self):
        gid = base.gid_address(self.ctx.query_gid(base.PORT, 1))
        self.assertEqual(gid.ipv4_mapped, ipaddress.IPv4Address('127.0.0.1'))

    def test_empty_gid_slot_reads_zero_with_success(self):
        n = len(self.ctx.query_gid_table(64))
        self.assertLess(n, 64, 'the GID table is full; no empty slot to read')
        self.assertEqual(base.gid_address(self.ctx.query_gid(base.PORT, 63)), ZERO_GID)

    def test_query_gid_outside_the_table_fails(self):
        with self.assertRaises(PyverbsRDMAError):
            self.ctx.query_gid(base.PORT, 64)
        with self.assertRaises(PyverbsRDMAError):
            self.ctx.query_gid(2, 0)

    def test_gid_table_has_valid_roce_v2_entries_only(self):
        entries = self.ctx.query_gid_table(64)
        self.assertGreaterEqual(len(entries), 2)
        indices = [g.gid_index for g in entries]
        self.assertEqual(indices[:2], [0, 1])
        self.assertEqual(indices, sorted(set(indices)))
        for g in entries:
            with self.subTest(gid_index=g.gid_index):
                self.assertEqual(g.gid_type, e.IBV_GID_TYPE_ROCE_V2)
                self.assertEqual(g.port_num, base.PORT)
                addr = base.gid_address(g.gid_str())
                self.assertNotEqual(addr, ZERO_GID)
                self.assertEqual(addr, base.gid_address(self.ctx.query_gid(base.PORT, g.gid_index)))
        # Every non-empty slot is in the table, and only those.
        nonzero = [i for i in range(64)
                   if base.gid_address(self.ctx.query_gid(base.PORT, i)) != ZERO_GID]
        self.assertEqual(indices, nonzero)

    def test_gid_table_holds_the_addresses_of_the_namespace(self):
        # DESIGN.md section 3: after the link-local GID at index 0, one RoCEv2 GID per IP address
        # of the network namespace (IPv4 mapped, IPv6 as is).
        addrs = set()
        with open('/proc/net/if_inet6') as f:
            for line in f:
                addrs.add(ipaddress.IPv6Address(bytes.fromhex(line.split()[0])))
        with open('/proc/net/fib_trie') as f:
            lines = f.read().splitlines()
        for prev, line in zip(lines, lines[1:]):
            if line.strip() == '/32 host LOCAL':
                v4 = prev.split('-- ')[1].strip()
                addrs.add(ipaddress.IPv6Address('::ffff:' + v4))
        table = [base.gid_address(g.gid_str()) for g in self.ctx.query_gid_table(64)]
        self.assertEqual(len(table[1:]), len(set(table[1:])), 'a GID appears twice')
        self.assertLessEqual(set(table[1:]), addrs)
        if len(addrs) <= 63:
            self.assertEqual(set(table[1:]), addrs)

    def test_gid_table_too_small_fails(self):
        n = len(self.ctx.query_gid_table(64))
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.ctx.query_gid_table(n - 1)
        self.assertEqual(abs(cm.exception.error_code), errno.EINVAL)

    def test_query_gid_ex(self):
        g = self.ctx.query_gid_ex(base.PORT, 1)
        self.assertEqual(g.gid_type, e.IBV_GID_TYPE_ROCE_V2)
        self.assertEqual(g.gid_index, 1)
        self.assertEqual(base.gid_address(g.gid_str()).ipv4_mapped,
                         ipaddress.IPv4Address('127.0.0.1'))
        # ibv_query_gid_ex(3): ENODATA for an index inside the table without data.
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.ctx.query_gid_ex(base.PORT, 63)
        self.assertEqual(cm.exception.error_code, errno.ENODATA)

    def test_query_gid_type(self):
        for g in self.ctx.query_gid_table(64):
            with self.subTest(gid_index=g.gid_index):
                self.assertEqual(self.ctx.query_gid_type(base.PORT, g.gid_index),
                                 e.IBV_GID_TYPE_SYSFS_ROCE_V2)

    def test_query_pkey(self):
        self.assertEqual(self.ctx.query_pkey(base.PORT, 0), 0xffff)
        with self.assertRaises(PyverbsRDMAError):
            self.ctx.query_pkey(base.PORT, 1)

    def test_two_contexts_in_one_process(self):
        ctx2 = base.open_context()
        try:
            self.assertEqual(ctx2.query_device().node_guid, self.ctx.query_device().node_guid)
            PD(self.ctx)
            PD(ctx2)
            CQ(ctx2, 8, None, None, 0)
            self.ctx.close()  # the other context is independent
            self.assertEqual(ctx2.query_port(base.PORT).state, e.IBV_PORT_ACTIVE)
            PD(ctx2)
            CQ(ctx2, 8, None, None, 0)
        finally:
            ctx2.close()

    def test_cmd_fd_and_comp_vectors(self):
        fd = self.ctx.cmd_fd
        self.assertGreaterEqual(fd, 0)
        os.fstat(fd)  # an open descriptor
        self.assertEqual(self.ctx.num_comp_vectors, 1)


class RawContextTest(unittest.TestCase):
    """struct ibv_context fields pyverbs does not expose (async_fd)."""

    def test_async_fd_is_pollable_and_idle(self):
        with raw.RawContext() as rc:
            c = rc.ctx.contents
            self.assertEqual(c.num_comp_vectors, 1)
            self.assertGreaterEqual(c.cmd_fd, 0)
            self.assertGreaterEqual(c.async_fd, 0)
            self.assertNotEqual(c.async_fd, c.cmd_fd)
            os.fstat(c.async_fd)
            readable, _, _ = select.select([c.async_fd], [], [], 0)
            self.assertEqual(readable, [], 'an idle device reported an async event')

    def test_get_async_event_on_nonblocking_fd_is_eagain(self):
        with raw.RawContext() as rc:
            fd = rc.ctx.contents.async_fd
            os.set_blocking(fd, False)
            ev = raw.IbvAsyncEvent()
            self.assertEqual(raw.lib.ibv_get_async_event(rc.ctx, raw.ctypes.byref(ev)), -1)
            self.assertEqual(raw.ctypes.get_errno(), errno.EAGAIN)


if __name__ == '__main__':
    unittest.main()
