"""DCI streams and mlx5dv_map_ah_to_qp through pyverbs.providers.mlx5.mlx5dv.

mlx5dv_dci_stream_id_reset(3): an error completion on one stream of a DCI created with
MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS flushes only that stream's work requests; the other streams
go on and the DCI stays in RTS, until 2^log_num_errored streams are in error (then the DCI enters
ERR); mlx5dv_dci_stream_id_reset returns an errored stream to service. mlx5dv_map_ah_to_qp(3):
bookkeeping (softverbs has no congestion control algorithms to choose between).
"""
import errno
import textwrap

import base
import dc
import pyverbs.enums as e
import pyverbs.providers.mlx5.mlx5_enums as dve
from pyverbs.addr import AH
from pyverbs.providers.mlx5.mlx5dv import Mlx5QP

tearDownModule = base.tear_down_module

BAD_RKEY_XOR = 0x80  # flips the key byte of an rkey: no MR answers to it


class DciStreamsTest(base.DataTestCase):
    """A DCT and DCIs in this process (the same-host fabric runs the DCT's side in the DCI's
    thread, so every completion is in when the post returns)."""

    def setUp(self):
        super().setUp()
        self.srq = dc.new_srq(self.pd)
        self.dct = dc.create_dct(self.ctx, self.pd, self.cq, self.srq)
        self.dctn = self.dct.qp_num
        self.mem = base.Buffer(self.pd, 4096)

    def write(self, dci, stream, offset, raddr, wr_id, rkey=None):
        dci.post('write', self.dctn, offset=offset, length=16, wr_id=wr_id, stream=stream,
                 rkey=self.mem.rkey if rkey is None else rkey, raddr=self.mem.addr + raddr)

    def test_a_stream_in_error_does_not_stop_the_others(self):
        dci = dc.Dci(self.ctx, self.pd, streams=(2, 1))  # 4 streams; 2 in error stop the DCI
        dci.buf.write(b'stream-1 payload')
        dci.buf.write(b'stream-2 payload', 16)
        self.write(dci, 1, 0, 0, wr_id=1, rkey=self.mem.rkey ^ BAD_RKEY_XOR)
        self.write(dci, 1, 0, 32, wr_id=2)   # same stream: flushed, never executed
        self.write(dci, 2, 16, 64, wr_id=3)  # another stream: goes on
        self.write(dci, 2, 16, 96, wr_id=4)
        wcs = dci.poll(4)
        self.assertEqual([(w.wr_id, w.status) for w in wcs],
                         [(1, e.IBV_WC_REM_ACCESS_ERR), (2, e.IBV_WC_WR_FLUSH_ERR),
                          (3, e.IBV_WC_SUCCESS), (4, e.IBV_WC_SUCCESS)])
        self.assertEqual(self.mem.read(0, 64), b'\0' * 64)  # nothing of stream 1 landed
        self.assertEqual(self.mem.read(64, 16), b'stream-2 payload')
        self.assertEqual(self.mem.read(96, 16), b'stream-2 payload')
        # ibv_query_qp tells a stream error (still RTS) from a DCI error (mlx5dv_dci_stream_id_reset(3)).
        self.assertEqual(dci.state(), e.IBV_QPS_RTS)
        # Until it is reset, what is posted to the stream in error is flushed.
        self.write(dci, 1, 0, 128, wr_id=5)
        [wc] = dci.poll()
        self.assertWC(wc, wr_id=5, status=e.IBV_WC_WR_FLUSH_ERR)
        Mlx5QP.modify_dci_stream_channel_id(dci.qp, 1)
        self.write(dci, 1, 0, 160, wr_id=6)
        [wc] = dci.poll()
        self.assertWC(wc, wr_id=6, status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_RDMA_WRITE, qp_num=dci.qpn)
        self.assertEqual(self.mem.read(160, 16), b'stream-1 payload')
        # The second stream in error (2^log_num_errored = 2) takes the whole DCI to ERR.
        self.write(dci, 3, 0, 192, wr_id=7, rkey=self.mem.rkey ^ BAD_RKEY_XOR)
        self.assertEqual(dci.state(), e.IBV_QPS_RTS)
        self.write(dci, 2, 16, 224, wr_id=8, rkey=self.mem.rkey ^ BAD_RKEY_XOR)
        self.write(dci, 0, 16, 256, wr_id=9)
        wcs = dci.poll(3)
        self.assertEqual([(w.wr_id, w.status) for w in wcs],
                         [(7, e.IBV_WC_REM_ACCESS_ERR), (8, e.IBV_WC_REM_ACCESS_ERR), (9, e.IBV_WC_WR_FLUSH_ERR)])
        self.assertEqual(dci.state(), e.IBV_QPS_ERR)
        self.assertEqual(self.mem.read(192, 80), b'\0' * 80)
        self.assertTrue(self.mem.guards_intact())
        self.assertNoCompletion(self.cq)  # the DCT's CQ: WRITEs without immediate complete nothing there

    def test_stream_ids_beyond_log_num_concurent_are_streams_too(self):
        # rdma-core's DCI stream test posts ids up to 2^log_num_concurent + 2 on real hardware.
        dci = dc.Dci(self.ctx, self.pd, streams=(1, 2))
        dci.buf.write(b'a stream far out')
        for i, stream in enumerate((0, 1, 2, 3, 0xffff)):
            self.write(dci, stream, 0, 32 * i, wr_id=i)
        self.assertEqual([w.status for w in dci.poll(5)], [e.IBV_WC_SUCCESS] * 5)
        for i in range(5):
            self.assertEqual(self.mem.read(32 * i, 16), b'a stream far out')

    def test_a_dci_without_streams_stops_at_its_first_error(self):
        dci = dc.Dci(self.ctx, self.pd)
        self.write(dci, 1, 0, 0, wr_id=1, rkey=self.mem.rkey ^ BAD_RKEY_XOR)
        self.write(dci, 2, 0, 32, wr_id=2)  # stream ids of a DCI without streams are ignored
        self.assertEqual([w.status for w in dci.poll(2)], [e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_WR_FLUSH_ERR])
        self.assertEqual(dci.state(), e.IBV_QPS_ERR)

    def test_bad_input(self):
        # Caps exceeded: EINVAL, as mlx5 (dci_streams_caps are 16 and 16).
        for streams in ((17, 0), (0, 17)):
            with self.subTest(streams=streams):
                self.assertRDMAError(errno.EINVAL, dc.create_dci, self.ctx, self.pd, self.cq, streams=streams)
        dci = dc.Dci(self.ctx, self.pd, streams=(3, 3))
        # A stream that is not in error: EINVAL (the firmware refuses it; rdma-core's test expects so).
        self.assertRDMAError(errno.EINVAL, Mlx5QP.modify_dci_stream_channel_id, dci.qp, 5)
        # A DCI without streams, an RC QP: EINVAL; a QP out of RTS: EOPNOTSUPP (mlx5's order).
        plain = dc.Dci(self.ctx, self.pd)
        self.assertRDMAError(errno.EINVAL, Mlx5QP.modify_dci_stream_channel_id, plain.qp, 0)
        rc = base.Peer(self.ctx, self.pd, e.IBV_QPT_RC)
        rc.connect(rc.qpn)
        self.assertRDMAError(errno.EINVAL, Mlx5QP.modify_dci_stream_channel_id, rc.qp, 0)
        self.assertRDMAError(errno.EOPNOTSUPP, Mlx5QP.modify_dci_stream_channel_id, self.dct, 0)

    def test_map_ah_to_qp(self):
        dci = dc.Dci(self.ctx, self.pd)
        ah = AH(self.pd, attr=base.global_ah_attr(self.ctx))
        Mlx5QP.map_ah_to_qp(ah, dci.qpn)
        Mlx5QP.map_ah_to_qp(ah, self.dctn)  # "A duplicate mapping [...] is ignored": success
        self.assertRDMAError(errno.EINVAL, Mlx5QP.map_ah_to_qp, ah, 0xfff000)  # no such QP here
        # The mapping is a hint: traffic through the AH is unchanged.
        dci.buf.write(b'mapped')
        dci.post('write', self.dctn, length=6, rkey=self.mem.rkey, raddr=self.mem.addr)
        [wc] = dci.poll()
        self.assertWC(wc, status=e.IBV_WC_SUCCESS)
        self.assertEqual(self.mem.read(0, 6), b'mapped')

    def test_refusals_log_one_line(self):
        # base clears SOFTVERBS_LOG when imported; the library reads it at its first log line.
        code = textwrap.dedent('''
            import os
            import base, dc
            os.environ['SOFTVERBS_LOG'] = 'error'
            from pyverbs.providers.mlx5.mlx5dv import Mlx5QP
            from pyverbs.cq import CQ
            from pyverbs.pd import PD
            ctx = base.open_context(); pd = PD(ctx); cq = CQ(ctx, 16, None, None, 0)
            qp = dc.create_dci(ctx, pd, cq, streams=(2, 2))
            try:
                Mlx5QP.modify_dci_stream_channel_id(qp, 3)
            except Exception as ex:
                print('refused', qp.qp_num)
        ''')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertIn('refused', r.stdout, r.stderr)
        qpn = int(r.stdout.split()[1])
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertEqual(lines[0].split(' ', 1)[1],
                         f'error: mlx5dv_dci_stream_id_reset(qp 0x{qpn:x}): stream 3 is not in error '
                         '(mlx5dv_dci_stream_id_reset(3) resets an errored stream_id)')


if __name__ == '__main__':
    import unittest
    unittest.main()
