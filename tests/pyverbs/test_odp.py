"""On-demand paging (issue 13 item 2): IBV_ACCESS_ON_DEMAND MRs, implicit ODP (NULL, SIZE_MAX),
ibv_advise_mr(3) and odp_caps. softverbs pins nothing, so an ODP key reaches the owner's memory
as it is mapped at each access: memory mapped after the registration is reachable, and an access
to an unmapped page fails as a NIC's failed page fault does (rxe_odp.c: the responder NAKs with a
remote access error, a local access completes IBV_WC_LOC_PROT_ERR). Every byte is checked, guard
pages included."""
import ctypes
import errno
import mmap

import base
import pyverbs.enums as e
from agent import Agent
from base import Buffer
from pyverbs.mr import MR
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

RC = e.IBV_QPT_RC
OK = e.IBV_WC_SUCCESS
PAGE = mmap.PAGESIZE
ODP = e.IBV_ACCESS_ON_DEMAND
ODP_ALL = base.ACCESS_ALL | ODP

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FIXED = 0x10


def map_pages(n, at=None):
    """n anonymous pages (at `at` exactly if given), filled with 0x5a."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (MAP_FIXED if at else 0)
    addr = _libc.mmap(at, n * PAGE, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    ctypes.memset(addr, 0x5a, n * PAGE)
    return addr


def unmap(addr, n):
    assert _libc.munmap(addr, n * PAGE) == 0


class OdpTestCase(base.DataTestCase):

    def setUp(self):
        super().setUp()
        self.a, self.b = base.connected_pair(self.ctx, self.pd, RC)
        self.buf = Buffer(self.pd, 4096)  # a's ordinary memory
        self.mapped = []

    def tearDown(self):
        try:
            self.assertTrue(self.buf.guards_intact())
            for addr, n in self.mapped:
                unmap(addr, n)
        finally:
            super().tearDown()

    def pages(self, n):
        addr = map_pages(n)
        self.mapped.append((addr, n))
        return addr

    def write_to(self, rkey, raddr, data, wr_id=1):
        self.buf.write(data)
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.buf.sge(0, len(data))], wr_id=wr_id,
                                      rdma=(rkey, raddr)))
        return self.a.poll()[0]


class OdpCapsTest(base.SoftverbsTestCase):

    def test_odp_caps_per_transport(self):
        x = self.ctx.query_device_ex()
        self.assertEqual(x.odp_caps.general_caps, e.IBV_ODP_SUPPORT | e.IBV_ODP_SUPPORT_IMPLICIT)
        t = x.odp_caps
        msg = e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV
        self.assertEqual(t.rc_odp_caps, msg | e.IBV_ODP_SUPPORT_WRITE | e.IBV_ODP_SUPPORT_READ |
                         e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV)
        self.assertEqual(t.uc_odp_caps, msg | e.IBV_ODP_SUPPORT_WRITE)
        self.assertEqual(t.ud_odp_caps, msg | e.IBV_ODP_SUPPORT_SRQ_RECV)
        self.assertEqual(t.xrc_odp_caps, e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_WRITE | e.IBV_ODP_SUPPORT_READ |
                         e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV)


class ExplicitOdpTest(OdpTestCase):

    def test_every_rc_opcode_on_an_odp_mr(self):
        addr = self.pages(2)
        mr = MR(self.pd, 2 * PAGE, ODP_ALL, address=addr)
        data = bytes(range(256)) * 8
        wc = self.write_to(mr.rkey, addr + 100, data)
        self.assertWC(wc, status=OK, opcode=e.IBV_WC_RDMA_WRITE)
        self.assertEqual(ctypes.string_at(addr + 100, len(data)), data)
        self.assertEqual(ctypes.string_at(addr, 100), b'\x5a' * 100)
        self.assertEqual(ctypes.string_at(addr + 100 + len(data), 50), b'\x5a' * 50)
        # READ back into a's memory, SEND from the ODP MR into a receive on an ODP lkey.
        self.a.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [self.buf.sge(0, 1000)], wr_id=2,
                                      rdma=(mr.rkey, addr + 200)))
        self.assertWC(self.a.poll()[0], status=OK, opcode=e.IBV_WC_RDMA_READ)
        self.assertEqual(self.buf.read(0, 1000), ctypes.string_at(addr + 200, 1000))
        self.b.post_recv(SGE(addr + PAGE, 3000, mr.lkey), wr_id=3)
        self.buf.write(bytes(range(200, 0, -1)) * 15)
        self.a.post_send(base.send_wr(e.IBV_WR_SEND, [self.buf.sge(0, 3000)], wr_id=4))
        self.assertWC(self.a.poll()[0], status=OK)
        self.assertWC(self.b.poll()[0], status=OK, byte_len=3000)
        self.assertEqual(ctypes.string_at(addr + PAGE, 3000), self.buf.read(0, 3000))
        ctypes.memmove(addr + 8, (41).to_bytes(8, 'little'), 8)
        self.a.post_send(base.send_wr(e.IBV_WR_ATOMIC_FETCH_AND_ADD, [self.buf.sge(0, 8)], wr_id=5,
                                      atomic=(mr.rkey, addr + 8, 1, 0)))
        self.assertWC(self.a.poll()[0], status=OK)
        self.assertEqual(self.buf.u64(0), 41)
        self.assertEqual(int.from_bytes(ctypes.string_at(addr + 8, 8), 'little'), 42)

    def test_unmapped_page_is_a_remote_access_error_then_mapped_again_is_reachable(self):
        addr = self.pages(3)
        mr = MR(self.pd, 3 * PAGE, ODP_ALL, address=addr)
        unmap(addr + PAGE, 1)
        wc = self.write_to(mr.rkey, addr + PAGE + 16, b'x' * 64)
        self.assertWC(wc, status=e.IBV_WC_REM_ACCESS_ERR)
        # The neighbours were not written.
        self.assertEqual(ctypes.string_at(addr, PAGE), b'\x5a' * PAGE)
        self.assertEqual(ctypes.string_at(addr + 2 * PAGE, PAGE), b'\x5a' * PAGE)
        # A page mapped there after the registration is reached through the same key.
        map_pages(1, addr + PAGE)
        b, c = base.connected_pair(self.ctx, self.pd, RC)
        self.buf.write(b'y' * 64)
        b.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.buf.sge(0, 64)], wr_id=7,
                                 rdma=(mr.rkey, addr + PAGE + 16)))
        self.assertWC(b.poll()[0], status=OK)
        self.assertEqual(ctypes.string_at(addr + PAGE, 80), b'\x5a' * 16 + b'y' * 64)

    def test_registering_an_unmapped_range_needs_odp(self):
        addr = self.pages(1)
        unmap(addr, 1)
        self.mapped.clear()
        with self.assertRaises(PyverbsRDMAError) as ctx:
            MR(self.pd, PAGE, base.ACCESS_ALL, address=addr)
        self.assertEqual(ctx.exception.error_code, errno.EFAULT)
        MR(self.pd, PAGE, ODP_ALL, address=addr).close()


class ImplicitOdpTest(OdpTestCase):

    def implicit(self):
        return MR(self.pd, 0, ODP_ALL, implicit=True)

    def test_keys_reach_any_mapped_address(self):
        mr = self.implicit()
        self.assertEqual(mr.length, 2**64 - 1)
        addr = self.pages(1)  # mapped after the registration
        wc = self.write_to(mr.rkey, addr + 5, b'implicit' * 10)
        self.assertWC(wc, status=OK)
        self.assertEqual(ctypes.string_at(addr, 90), b'\x5a' * 5 + b'implicit' * 10 + b'\x5a' * 5)
        # Local side through the implicit lkey: SEND from the page into a's buffer.
        self.a.post_recv(self.buf.sge(0, 4096), wr_id=9)
        self.b.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(addr, 200, mr.lkey)], wr_id=10))
        self.assertWC(self.b.poll()[0], status=OK)
        self.assertWC(self.a.poll()[0], status=OK, byte_len=200)
        self.assertEqual(self.buf.read(0, 200), ctypes.string_at(addr, 200))

    def test_unmapped_local_address_is_loc_prot_err(self):
        mr = self.implicit()
        addr = self.pages(1)
        unmap(addr, 1)
        self.mapped.clear()
        self.b.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(addr, 64, mr.lkey)], wr_id=11))
        self.assertWC(self.b.poll()[0], wr_id=11, status=e.IBV_WC_LOC_PROT_ERR)

    def test_another_process_writes_through_the_implicit_rkey(self):
        mr = self.implicit()
        addr = self.pages(2)
        unmap(addr + PAGE, 1)
        child = Agent()
        self.addCleanup(child.close)
        info = child.call('qp', qpt=RC, size=4096)
        me = base.Peer(self.ctx, self.pd, RC).connect(info['qpn'])
        child.call('connect', id=info['id'], remote_qpn=me.qpn)
        data = bytes(range(1, 101))
        child.call('write', id=info['id'], offset=0, data=data.hex())
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_RDMA_WRITE, wr_id=1, offset=0,
                   length=100, rkey=mr.rkey, raddr=addr + 10)
        [wc] = child.call('poll', id=info['id'])
        self.assertEqual(wc['status'], OK)
        self.assertEqual(ctypes.string_at(addr, 120), b'\x5a' * 10 + data + b'\x5a' * 10)
        # The unmapped page: the child's WRITE fails, nothing here changes.
        child.call('post_send', id=info['id'], opcode=e.IBV_WR_RDMA_WRITE, wr_id=2, offset=0,
                   length=100, rkey=mr.rkey, raddr=addr + PAGE + 10)
        [wc] = child.call('poll', id=info['id'])
        self.assertEqual(wc['status'], e.IBV_WC_REM_ACCESS_ERR)


class AdviseMrTest(OdpTestCase):

    def test_prefetch_and_bad_input(self):
        addr = self.pages(4)
        mr = MR(self.pd, 4 * PAGE, ODP_ALL, address=addr)
        flush = e._IBV_ADVISE_MR_FLAG_FLUSH
        for advice in (e._IBV_ADVISE_MR_ADVICE_PREFETCH, e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                       e._IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT):
            self.pd.advise_mr(advice, flush, [SGE(addr, 4 * PAGE, mr.lkey)])
            self.pd.advise_mr(advice, 0, [SGE(addr + 10, 100, mr.lkey)])
        self.assertEqual(ctypes.string_at(addr, 4 * PAGE), b'\x5a' * 4 * PAGE)  # prefetch changes nothing
        cases = [
            ('unknown advice', 7, 0, [SGE(addr, 8, mr.lkey)], errno.EOPNOTSUPP),
            ('unknown flags', 0, 4, [SGE(addr, 8, mr.lkey)], errno.EINVAL),
            ('not an ODP MR', 0, flush, [self.buf.sge(0, 8)], errno.EINVAL),
            ('unknown lkey', 0, 0, [SGE(addr, 8, 0x7fffff00)], errno.EINVAL),
            ('unregistered range', 0, flush, [SGE(addr + 4 * PAGE - 4, 8, mr.lkey)], errno.EFAULT),
        ]
        for name, advice, flags, sgl, err in cases:
            with self.subTest(case=name):
                with self.assertRaises(PyverbsRDMAError) as ctx:
                    self.pd.advise_mr(advice, flags, sgl)
                self.assertEqual(ctx.exception.error_code, err)
        # An unmapped page of the MR, prefetched synchronously: EFAULT (ibv_advise_mr(3)).
        unmap(addr + 3 * PAGE, 1)
        self.mapped = [(addr, 3)]
        with self.assertRaises(PyverbsRDMAError) as ctx:
            self.pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH, flush, [SGE(addr + 3 * PAGE, 8, mr.lkey)])
        self.assertEqual(ctx.exception.error_code, errno.EFAULT)

    def test_refusal_log_line(self):
        # base drops an inherited SOFTVERBS_LOG; the library reads it at its first log line.
        code = ('import base, os, pyverbs.enums as e\nos.environ["SOFTVERBS_LOG"] = "error"\n'
                'from pyverbs.mr import MR\nfrom pyverbs.wr import SGE\n'
                'ctx = base.open_context(); pd = base.PD(ctx)\n'
                'mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ON_DEMAND)\n'
                'try:\n    pd.advise_mr(0, 1, [SGE(mr.buf + 4090, 8, mr.lkey)])\n'
                'except base.PyverbsRDMAError as x:\n    print("errno", x.error_code)\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f'errno {errno.EFAULT}', r.stdout)
        self.assertRegex(r.stderr, r'ibv_advise_mr\(pd 0x[0-9a-f]+\): \[0x[0-9a-f]+, \+8\) is outside the MR '
                                   r'of lkey 0x[0-9a-f]+')
