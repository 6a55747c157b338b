"""mlx5dv on softverbs0 through pyverbs.providers.mlx5.mlx5dv: the identity switch, the device
caps, mlx5dv_create_qp (plain RC/UC/UD, DCT, DCI, create flags) and DC traffic between a DCT in
this process and DCIs in other processes (every opcode with its data checked, wrong key, unknown
DCT, DCT destroyed under traffic).

DC QPs are created on a plain Context: mlx5dv works on softverbs0 without the identity switch;
only Mlx5Context (which pyverbs opens only when mlx5dv_is_supported) needs SOFTVERBS_MLX5_IDENTITY=1.
"""
import errno
import socket
import textwrap
import time
import unittest

import base
import dc
import pyverbs.enums as e
import pyverbs.providers.mlx5.mlx5_enums as dve
from dc_agent import DcAgent
from pyverbs.providers.mlx5.mlx5dv import Mlx5QP
from pyverbs.qp import QPAttr
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

IDENTITY_PROBE = textwrap.dedent('''
    import base
    from pyverbs.providers.mlx5.mlx5dv import Mlx5Context, Mlx5DVContextAttr
    import pyverbs.providers.mlx5.mlx5_enums as dve
    try:
        ctx = Mlx5Context(Mlx5DVContextAttr(), name='softverbs0')
    except Exception as ex:
        print('refused', type(ex).__name__, ex)
        raise SystemExit(0)
    d = ctx.query_mlx5_device(dve.MLX5DV_CONTEXT_MASK_DCI_STREAMS | dve.MLX5DV_CONTEXT_MASK_DC_ODP_CAPS)
    a = ctx.query_device()
    print('opened', hex(a.vendor_id), a.vendor_part_id, d.comp_mask, d.flags,
          d.dci_streams_caps['max_log_num_concurent'], d.dc_odp_caps, d.dci_streams_caps['max_log_num_errored'])
''')


class IdentityTest(unittest.TestCase):

    def test_mlx5_context_needs_the_identity_switch(self):
        off = base.run_python(IDENTITY_PROBE, SOFTVERBS_MLX5_IDENTITY=None)
        self.assertEqual(off.returncode, 0, off.stderr)
        self.assertIn('This is not an MLX5 device', off.stdout)  # mlx5dv_is_supported: false
        on = base.run_python(IDENTITY_PROBE, SOFTVERBS_MLX5_IDENTITY='1')
        self.assertEqual(on.returncode, 0, on.stderr)
        words = on.stdout.split()
        self.assertEqual(words[0], 'opened', on.stdout)
        self.assertEqual(words[1:3], ['0x2c9', '4123'])  # Mellanox, ConnectX-6
        # Both asked-for blocks answered; packet-based credit offered; DCI streams (every 16-bit
        # stream id, test_mlx5_dci_streams.py); DC ODP as RC's (one key rule on every transport:
        # test_odp.py).
        self.assertEqual(int(words[3]), dve.MLX5DV_CONTEXT_MASK_DCI_STREAMS | dve.MLX5DV_CONTEXT_MASK_DC_ODP_CAPS)
        self.assertEqual(int(words[4]), dve.MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE)
        dc_odp = (e.IBV_ODP_SUPPORT_SEND | e.IBV_ODP_SUPPORT_RECV | e.IBV_ODP_SUPPORT_WRITE |
                  e.IBV_ODP_SUPPORT_READ | e.IBV_ODP_SUPPORT_ATOMIC | e.IBV_ODP_SUPPORT_SRQ_RECV)
        self.assertEqual(words[5:8], ['16', str(dc_odp), '16'])


class CreateTest(base.SoftverbsTestCase):

    def setUp(self):
        super().setUp()
        self.srq = dc.new_srq(self.pd)

    def create(self, qpt, srq=None, send_ops=None, **dv):
        return Mlx5QP(self.ctx, dc.qp_attr(qpt, self.pd, self.cq, srq, send_ops), dc.dv_attr(**dv))

    def test_plain_qps_through_mlx5dv_create_qp_carry_data(self):
        for qpt in (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD):
            qp = self.create(qpt)
            self.assertEqual(qp.qp_type, qpt)
            qp.close()
        # An RC QP of mlx5dv_create_qp talks to an RC QP of ibv_create_qp.
        a = self.create(e.IBV_QPT_RC)
        b = base.Peer(self.ctx, self.pd, e.IBV_QPT_RC)
        base.connect_qp(self.ctx, a, b.qpn)
        b.connect(a.qp_num)
        src, dst = base.Buffer(self.pd, 64), base.Buffer(self.pd, 64)
        src.write(b'from an mlx5dv QP')
        b.post_recv(dst.sge(0, 64), wr_id=2)
        a.post_send(base.send_wr(e.IBV_WR_SEND, [src.sge(0, 17)], wr_id=1))
        wcs = base.poll(self.cq, 1) + b.poll(1)
        self.assertEqual(sorted(w.status for w in wcs), [e.IBV_WC_SUCCESS] * 2)
        self.assertEqual(dst.read(0, 17), b'from an mlx5dv QP')

    def test_create_flags_accepted_or_refused_as_the_man_page_implies(self):
        cases = [  # (qp type, dc type, flags, errno or 0)
            (e.IBV_QPT_RC, None, dve.MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE, 0),
            (e.IBV_QPT_UD, None, dve.MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE, 0),
            (e.IBV_QPT_RC, None, dve.MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE, 0),
            (e.IBV_QPT_DRIVER, dve.MLX5DV_DCTYPE_DCI, dve.MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE, 0),
            (e.IBV_QPT_UC, None, dve.MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE, errno.EINVAL),
            (e.IBV_QPT_RC, None, dve.MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE |
             dve.MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE, errno.EINVAL),
            (e.IBV_QPT_RC, None, dve.MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE, 0),
            (e.IBV_QPT_UC, None, dve.MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE, errno.EINVAL),
            (e.IBV_QPT_RC, None, dve.MLX5DV_QP_CREATE_TUNNEL_OFFLOADS, errno.EINVAL),
            (e.IBV_QPT_UD, None, dve.MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC, errno.EINVAL),
            (e.IBV_QPT_UD, None, dve.MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC, errno.EINVAL),
            (e.IBV_QPT_RC, None, dve.MLX5DV_QP_CREATE_SIG_PIPELINING, 0),
            (e.IBV_QPT_UD, None, dve.MLX5DV_QP_CREATE_SIG_PIPELINING, 0),  # (mlx5: any type)
        ]
        for qpt, dc_type, flags, code in cases:
            with self.subTest(qpt=qpt, dc_type=dc_type, flags=flags):
                kw = dict(create_flags=flags)
                if dc_type is not None:
                    kw.update(dc_type=dc_type, send_ops=dc.DCI_OPS)
                if code:
                    self.assertRDMAError(code, self.create, qpt, **kw)
                else:
                    self.create(qpt, **kw).close()

    def test_dc_creation_rules(self):
        self.assertRDMAError(errno.EINVAL, self.create, e.IBV_QPT_DRIVER, dc_type=dve.MLX5DV_DCTYPE_DCT)  # no SRQ
        self.assertRDMAError(errno.EOPNOTSUPP, self.create, e.IBV_QPT_DRIVER)  # DRIVER without DC
        self.assertRDMAError(errno.EINVAL, self.create, e.IBV_QPT_RC, dc_type=dve.MLX5DV_DCTYPE_DCI)
        # DCI streams beyond dci_streams_caps (test_mlx5_dci_streams.py has the rest).
        self.assertRDMAError(errno.EINVAL, self.create, e.IBV_QPT_DRIVER, send_ops=dc.DCI_OPS,
                             dc_type=dve.MLX5DV_DCTYPE_DCI, streams=(17, 0))
        self.assertRDMAError(errno.EOPNOTSUPP, self.create, e.IBV_QPT_DRIVER, send_ops=dc.DCI_OPS,
                             dc_type=dve.MLX5DV_DCTYPE_DCI, send_ops_flags=dve.MLX5DV_QP_EX_WITH_MEMCPY)
        dct = self.create(e.IBV_QPT_DRIVER, srq=self.srq, dc_type=dve.MLX5DV_DCTYPE_DCT, key=7)
        self.assertEqual(dct.qp_type, e.IBV_QPT_DRIVER)

    def test_dct_state_rules(self):
        dct = dc.create_dct(self.ctx, self.pd, self.cq, self.srq)
        # A DCT serves in RTR; it has no send queue, so no RTS.
        self.assertRDMAError(errno.EINVAL, dct.modify, QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
        dci = self.create(e.IBV_QPT_DRIVER, send_ops=dc.DCI_OPS, dc_type=dve.MLX5DV_DCTYPE_DCI)
        a = QPAttr(qp_state=e.IBV_QPS_INIT)
        a.pkey_index, a.port_num = 0, 1
        # No destination for a DCI: IBV_QP_DEST_QPN is not an attribute of any of its transitions.
        dci.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT)
        a = QPAttr(qp_state=e.IBV_QPS_RTR)
        a.path_mtu, a.dest_qp_num = e.IBV_MTU_1024, dct.qp_num
        self.assertRDMAError(errno.EINVAL, dci.modify, a, e.IBV_QP_STATE | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN)

    def test_refusal_logs_one_line(self):
        # Not through base (it clears SOFTVERBS_LOG for the tests that import it).
        code = textwrap.dedent('''
            import pyverbs.enums as e
            import pyverbs.providers.mlx5.mlx5_enums as dve
            from pyverbs.cq import CQ
            from pyverbs.device import Context
            from pyverbs.pd import PD
            from pyverbs.providers.mlx5.mlx5dv import Mlx5DVQPInitAttr, Mlx5QP
            from pyverbs.qp import QPCap, QPInitAttrEx
            ctx = Context(name='softverbs0'); pd = PD(ctx); cq = CQ(ctx, 16, None, None, 0)
            attr = QPInitAttrEx(qp_type=e.IBV_QPT_RC, pd=pd, scq=cq, rcq=cq, cap=QPCap(),
                                comp_mask=e.IBV_QP_INIT_ATTR_PD)
            dv = Mlx5DVQPInitAttr(comp_mask=dve.MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
                                  create_flags=dve.MLX5DV_QP_CREATE_TUNNEL_OFFLOADS)
            try:
                Mlx5QP(ctx, attr, dv)
            except Exception as ex:
                print('refused')
        ''')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertIn('refused', r.stdout, r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r'^softverbs\[\d+\] error: mlx5dv_create_qp\(pd 0x[0-9a-f]+\): MLX5DV_QP_CREATE_TUNNEL_OFFLOADS '
                                   r'applies to raw packet \(TIR\) QPs only, not RC QPs')


class DcTrafficTest(base.DataTestCase):
    """A DCT here; DCIs in this process and in DcAgent children."""

    def setUp(self):
        super().setUp()
        self.srq = dc.new_srq(self.pd)
        self.dct = dc.create_dct(self.ctx, self.pd, self.cq, self.srq)
        self.dctn = self.dct.qp_num
        self.mem = base.Buffer(self.pd, 4096)
        self.agents = []

    def tearDown(self):
        for a in self.agents:
            a.close()
        super().tearDown()

    def agent(self):
        self.agents.append(DcAgent())
        return self.agents[-1]

    def test_every_opcode_from_dcis_in_three_processes(self):
        agents = [self.agent() for _ in range(3)]
        dcis = [a.call('dci') for a in agents]
        rkey, base_addr = self.mem.rkey, self.mem.addr
        self.mem.set_u64(1000, 2048)  # the shared counter
        for i in range(3):
            self.srq.post_recv(base.recv_wr([self.mem.sge(256 * i, 64)], wr_id=100 + i))
            self.srq.post_recv(base.recv_wr([self.mem.sge(256 * i + 128, 64)], wr_id=200 + i))
        expect_src = {}
        for i, (a, d) in enumerate(zip(agents, dcis)):
            marker = f'dci{i}:{d["qpn"]:06x}'.encode().ljust(16, b'.')
            a.call('write', id=0, offset=0, data=marker.hex())
            def post(op, **kw):
                [wc] = a.call('post', id=0, op=op, dctn=self.dctn, **kw)
                self.assertEqual(wc['status'], e.IBV_WC_SUCCESS, (i, op, wc))
                self.assertEqual(wc['qp_num'], d['qpn'])
                return wc
            post('send', length=16, wr_id=1)
            post('write', length=16, rkey=rkey, raddr=base_addr + 1024 + 32 * i)
            post('write_imm', length=0, rkey=rkey, raddr=base_addr, imm=0x1000 + i)
            self.mem.write(f'read-back-{i}'.encode().ljust(16, b'!'), 3072 + 32 * i)
            post('read', offset=64, length=16, rkey=rkey, raddr=base_addr + 3072 + 32 * i)
            self.assertEqual(bytes.fromhex(a.call('read', id=0, offset=64, length=16)),
                             f'read-back-{i}'.encode().ljust(16, b'!'))
            post('fadd', offset=128, rkey=rkey, raddr=base_addr + 2048, compare_add=10 ** i)
            self.mem.set_u64(7, 2056)
            post('cas', offset=136, rkey=rkey, raddr=base_addr + 2056, compare_add=7, swap=70 + i)
            self.assertEqual(int.from_bytes(bytes.fromhex(a.call('read', id=0, offset=136)), 'little'), 7)
            self.assertEqual(self.mem.u64(2056), 70 + i)
            self.assertEqual(self.mem.read(1024 + 32 * i, 16), marker)
            expect_src[d['qpn']] = marker
        self.assertEqual(self.mem.u64(2048), 1000 + 1 + 10 + 100)
        # At the DCT: one SEND and one WRITE_WITH_IMM per DCI, on the DCT's CQ, naming the DCI.
        wcs = base.poll(self.cq, 6)
        sends = [w for w in wcs if w.opcode == e.IBV_WC_RECV]
        imms = [w for w in wcs if w.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM]
        self.assertEqual(len(sends), 3)
        self.assertEqual(len(imms), 3)
        for w in wcs:
            self.assertWC(w, status=e.IBV_WC_SUCCESS, qp_num=self.dctn)
        for w in sends:
            slot = 256 * (w.wr_id % 100) + (128 if w.wr_id >= 200 else 0)
            self.assertEqual(self.mem.read(slot, 16), expect_src[w.src_qp])
        # pyverbs hands imm_data to the verb in host order and reads it back in network order.
        self.assertEqual(sorted(socket.ntohl(w.imm_data) for w in imms), [0x1000, 0x1001, 0x1002])
        self.assertEqual(sorted(w.src_qp for w in imms), sorted(expect_src))
        self.assertTrue(self.mem.guards_intact())

    def test_one_dci_reaches_several_dcts_each_with_its_key(self):
        # The point of DC: one initiator, a destination per work request.
        dct2 = dc.create_dct(self.ctx, self.pd, self.cq, self.srq, key=dc.DC_KEY + 2)
        a = self.agent()
        d = a.call('dci', timeout=dc.FAST_TIMEOUT, retry_cnt=dc.FAST_RETRY)
        for i, (dctn, key) in enumerate([(self.dctn, dc.DC_KEY), (dct2.qp_num, dc.DC_KEY + 2)] * 2):
            a.call('write', id=d['id'], offset=8 * i, data=f'to-dct{i}'.ljust(8, '.').encode().hex())
            [wc] = a.call('post', id=d['id'], op='write', dctn=dctn, key=key, offset=8 * i,
                          rkey=self.mem.rkey, raddr=self.mem.addr + 512 + 8 * i)
            self.assertEqual(wc['status'], e.IBV_WC_SUCCESS, (i, wc))
        self.assertEqual(self.mem.read(512, 32), b'to-dct0.to-dct1.to-dct2.to-dct3.')
        # Each DCT checks its own key: the first DCT's key does not open the second.
        [wc] = a.call('post', id=d['id'], op='write', dctn=dct2.qp_num, key=dc.DC_KEY,
                      rkey=self.mem.rkey, raddr=self.mem.addr + 600)
        self.assertEqual(wc['status'], e.IBV_WC_RETRY_EXC_ERR)
        self.assertEqual(self.mem.read(600, 8), b'\0' * 8)

    def test_wrong_key_and_unknown_dct_end_in_retry_exceeded(self):
        a = self.agent()
        before = self.mem.snapshot()
        for what, dctn, key in (('wrong key', self.dctn, dc.DC_KEY + 1),
                                ('unknown DCT', 0xfff000, dc.DC_KEY)):
            d = a.call('dci', timeout=dc.FAST_TIMEOUT, retry_cnt=dc.FAST_RETRY)
            a.call('write', id=d['id'], offset=0, data=b'intruder'.hex())
            [wc] = a.call('post', id=d['id'], op='write', dctn=dctn, key=key, rkey=self.mem.rkey,
                          raddr=self.mem.addr)
            # The DCT discards what does not carry its key; the DCI hears nothing and gives up.
            self.assertEqual(wc['status'], e.IBV_WC_RETRY_EXC_ERR, (what, wc))
            self.assertEqual(a.call('state', id=d['id']), e.IBV_QPS_ERR, what)
        self.assertEqual(self.mem.snapshot(), before)
        self.assertNoCompletion(self.cq)
        # The DCT was not disturbed: a DCI with the right key still gets through.
        d = a.call('dci')
        [wc] = a.call('post', id=d['id'], op='write', dctn=self.dctn, rkey=self.mem.rkey, raddr=self.mem.addr)
        self.assertEqual(wc['status'], e.IBV_WC_SUCCESS)
        self.assertEqual(self.mem.read(0, 8), b'\0' * 8)  # the fresh DCI's buffer is zeroed

    def test_dct_destroyed_under_traffic(self):
        a = self.agent()
        d = a.call('dci', timeout=dc.FAST_TIMEOUT, retry_cnt=dc.FAST_RETRY)
        a.send('traffic', id=d['id'], dctn=self.dctn, key=dc.DC_KEY, rkey=self.mem.rkey, raddr=self.mem.addr)
        deadline = time.monotonic() + 10
        while self.mem.u64(0) == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        self.assertNotEqual(self.mem.u64(0), 0, 'no traffic reached the DCT')
        self.dct.close()
        got = a.reply(timeout=30)
        statuses = got['statuses']
        # Every WR completed exactly once: successes, then the one that found no DCT, then flushes.
        self.assertEqual(len(statuses), got['posted'])
        first_error = next(i for i, s in enumerate(statuses) if s != e.IBV_WC_SUCCESS)
        self.assertGreater(first_error, 0)
        self.assertEqual(statuses[first_error], e.IBV_WC_RETRY_EXC_ERR)
        self.assertTrue(all(s == e.IBV_WC_WR_FLUSH_ERR for s in statuses[first_error + 1:]), statuses)

    def test_dci_in_this_process_and_old_post_send_refused(self):
        dci = dc.Dci(self.ctx, self.pd)
        dci.buf.write(b'local DCI')
        dci.post('write', self.dctn, length=9, rkey=self.mem.rkey, raddr=self.mem.addr + 100)
        [wc] = dci.poll()
        self.assertWC(wc, status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_RDMA_WRITE, qp_num=dci.qpn)
        self.assertEqual(self.mem.read(100, 9), b'local DCI')
        # Without mlx5dv_wr_set_dc_addr a DCI WR has no destination: the batch is refused.
        self.assertRDMAError(errno.EINVAL, dci.post, 'send', self.dctn, dc_addr=False)
        # ibv_post_send cannot name a DCT.
        self.assertRDMAError(errno.EINVAL, dci.qp.post_send, base.send_wr(e.IBV_WR_SEND, [dci.buf.sge(0, 8)]))
        self.assertNoCompletion(dci.cq)


if __name__ == '__main__':
    unittest.main()
