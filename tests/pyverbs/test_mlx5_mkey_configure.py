"""The mkey configure API (mlx5dv_wr_mkey_configure(3)) through pyverbs.providers.mlx5: a QP
created with MLX5DV_QP_EX_WITH_MKEY_CONFIGURE configures an indirect mkey with the builder and
its setters (access flags, an SGE list or interleaved layout); the WR completes as MLX5DV_WC_UMR
(IBV_WC_DRIVER1) and traffic through the mkey is byte-exact (the model of test_mlx5_mkey). A
configuration changes only what its setters set. Then the refusals -- setters miscounted,
repeated or without a builder, a layout beyond the mkey's entries, signature setters and checks
on an mkey without BLOCK_SIGNATURE (signature mkeys themselves: test_mlx5_sig) -- each with its
errno and one log line.
"""
import errno
import unittest

import base
import dc
import pyverbs.enums as e
import pyverbs.providers.mlx5.mlx5_enums as dve
import test_mlx5_mkey as mk
from pyverbs.providers.mlx5.mlx5dv_mkey import (Mlx5Mkey, Mlx5MkeyConfAttr, Mlx5SigBlockAttr,
                                                Mlx5SigBlockDomain, Mlx5SigCrc)
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

OK = e.IBV_WC_SUCCESS
CONFIGURE = dve.MLX5DV_QP_EX_WITH_MKEY_CONFIGURE
INLINE_SIGNALED = e.IBV_SEND_INLINE | e.IBV_SEND_SIGNALED


class ConfigureTestCase(mk.MkeyTestCase):

    def setUp(self):
        super().setUp()
        self.qp = self.mlx5_qp(mr_ops=CONFIGURE)
        self.peer = self.connected_peer()
        self.pbuf = base.Buffer(self.pd, 512)

    def configure(self, mkey, num_setters, *setters, conf=None, flags=INLINE_SIGNALED, wr_id=0x99):
        """One mkey configuration WR: the builder, then each setter (a callable on the QP)."""
        self.qp.wr_start()
        self.qp.wr_id, self.qp.wr_flags = wr_id, flags
        self.qp.wr_mkey_configure(mkey, num_setters, conf or Mlx5MkeyConfAttr())
        for setter in setters:
            setter(self.qp)
        self.qp.wr_complete()

    def configured(self, mkey, layout, access=mk.LOCAL_ALL, interleaved=False):
        layout_setter = ((lambda q: q.wr_set_mkey_layout_interleaved(layout.repeat, layout.interleaved()))
                         if interleaved else (lambda q: q.wr_set_mkey_layout_list(layout.sges())))
        self.configure(mkey, 2, lambda q: q.wr_set_mkey_access_flags(access), layout_setter)
        [wc] = base.poll(self.cq)
        self.assertWC(wc, status=OK, opcode=mk.UMR, wr_id=0x99)

    def peer_read(self, mkey, offset, length):
        self.peer.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [self.pbuf.sge(0, length)], rdma=(mkey.rkey, offset)))
        return self.peer.poll()[0]


class ConfigureTest(ConfigureTestCase):

    def test_list_layout_every_direction(self):
        mkey, layout = self.mkey(), self.list_layout()
        self.configured(mkey, layout)
        n = len(layout)
        with self.subTest('remote RDMA WRITE into the mkey'):
            data, before = mk.payload(n - 3, 31), self.snapshot()
            self.pbuf.write(data)
            self.peer.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.pbuf.sge(0, len(data))], rdma=(mkey.rkey, 3)))
            self.assertWC(self.peer.poll()[0], status=OK)
            self.assertEqual(self.snapshot(), layout.expect_written(before, 3, data))
        with self.subTest('remote RDMA READ from the mkey'):
            self.assertWC(self.peer_read(mkey, 0, n), status=OK)
            self.assertEqual(self.pbuf.read(0, n), layout.read(0, n))
        with self.subTest('SEND from the mkey (its lkey)'):
            self.peer.post_recv(self.pbuf.sge(0, 512), wr_id=1)
            self.qp.wr_start()
            self.qp.wr_id, self.qp.wr_flags = 5, e.IBV_SEND_SIGNALED
            self.qp.wr_send()
            self.qp.wr_set_sge(SGE(7, n - 7, mkey.lkey))
            self.qp.wr_complete()
            self.assertWC(base.poll(self.cq)[0], status=OK, opcode=e.IBV_WC_SEND, wr_id=5)
            self.assertWC(self.peer.poll()[0], status=OK, byte_len=n - 7)
            self.assertEqual(self.pbuf.read(0, n - 7), layout.read(7, n - 7))
        self.assertTrue(all(b.guards_intact() for b in self.bufs + [self.pbuf]))

    def test_interleaved_layout_and_receive_into_the_mkey(self):
        mkey, layout = self.mkey(), self.interleaved_layout()
        self.configured(mkey, layout, interleaved=True)
        n = len(layout)
        data, before = mk.payload(n, 32), self.snapshot()
        self.pbuf.write(data)
        self.qp.post_recv(base.recv_wr([SGE(0, n, mkey.lkey)], wr_id=2))
        self.peer.post_send(base.send_wr(e.IBV_WR_SEND, [self.pbuf.sge(0, n)]))
        self.assertWC(self.peer.poll()[0], status=OK)
        self.assertWC(base.poll(self.cq)[0], status=OK, opcode=e.IBV_WC_RECV, byte_len=n)
        self.assertEqual(self.snapshot(), layout.expect_written(before, 0, data))
        self.assertWC(self.peer_read(mkey, 2, n - 2), status=OK)
        self.assertEqual(self.pbuf.read(0, n - 2), layout.read(2, n - 2))

    def test_a_configuration_keeps_what_its_setters_do_not_set(self):
        mkey, first, second = self.mkey(), self.list_layout(), self.interleaved_layout()
        self.configured(mkey, first)
        # A layout alone: the access flags (remote read among them) stay.
        self.configure(mkey, 1, lambda q: q.wr_set_mkey_layout_interleaved(second.repeat, second.interleaved()))
        self.assertWC(base.poll(self.cq)[0], status=OK, opcode=mk.UMR)
        n = len(second)
        self.assertWC(self.peer_read(mkey, 0, n), status=OK)
        self.assertEqual(self.pbuf.read(0, n), second.read(0, n))
        self.assertNotEqual(second.read(0, n), first.read(0, n))
        # num_setters 0 applies attr only: nothing changes.
        self.configure(mkey, 0)
        self.assertWC(base.poll(self.cq)[0], status=OK, opcode=mk.UMR)
        self.assertWC(self.peer_read(mkey, 1, n - 1), status=OK)
        self.assertEqual(self.pbuf.read(0, n - 1), second.read(1, n - 1))
        # Access flags alone: the layout stays (a SEND from the mkey reads it) and the new flags
        # replace the old ones ("only IBV_ACCESS_REMOTE_WRITE is allowed ... when the WR is completed").
        self.configure(mkey, 1, lambda q: q.wr_set_mkey_access_flags(e.IBV_ACCESS_LOCAL_WRITE))
        self.assertWC(base.poll(self.cq)[0], status=OK, opcode=mk.UMR)
        self.peer.post_recv(self.pbuf.sge(0, 512), wr_id=1)
        self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(0, n, mkey.lkey)]))
        self.assertWC(base.poll(self.cq)[0], status=OK)
        self.assertWC(self.peer.poll()[0], status=OK, byte_len=n)
        self.assertEqual(self.pbuf.read(0, n), second.read(0, n))
        self.assertWC(self.peer_read(mkey, 0, 8), status=e.IBV_WC_REM_ACCESS_ERR)

    def test_mkey_check_without_block_signature(self):
        # mlx5 (_mlx5dv_mkey_check) returns EINVAL for an mkey without a signature context.
        mkey = self.mkey()
        self.configured(mkey, self.list_layout())
        with self.assertRaises(PyverbsRDMAError) as cm:
            mkey.mkey_check()
        self.assertEqual(abs(cm.exception.error_code), errno.EINVAL, str(cm.exception))


class ConfigureRefusalTest(ConfigureTestCase):

    def refused(self, code, mkey, num_setters, *setters, **kw):
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.configure(mkey, num_setters, *setters, **kw)
        self.assertEqual(abs(cm.exception.error_code), code, str(cm.exception))

    def test_refusals(self):
        mkey, layout = self.mkey(max_entries=4), self.list_layout()
        access = lambda q: q.wr_set_mkey_access_flags(mk.LOCAL_ALL)
        lst = lambda q: q.wr_set_mkey_layout_list(layout.sges())
        with self.subTest('fewer setters than num_setters'):
            self.refused(errno.EINVAL, mkey, 3, access, lst)
        with self.subTest('more setters than num_setters'):
            self.refused(errno.EINVAL, mkey, 1, access, lst)
        with self.subTest('a setter twice'):
            self.refused(errno.EINVAL, mkey, 2, access, access)
        with self.subTest('two layout setters'):
            self.refused(errno.EINVAL, mkey, 2, lst, lambda q: q.wr_set_mkey_layout_interleaved(
                2, layout.interleaved()[:2]))
        with self.subTest('a layout beyond max_entries (mlx5: ENOMEM)'):
            five = mk.Layout(self.bufs, [(0, 0, 4, 0), (0, 8, 4, 0), (1, 0, 4, 0), (1, 8, 4, 0), (2, 0, 4, 0)])
            self.refused(errno.ENOMEM, mkey, 1, lambda q: q.wr_set_mkey_layout_list(five.sges()))
            # one entry is the strided header (mlx5dv_wr_mkey_configure(3))
            self.refused(errno.ENOMEM, mkey, 1, lambda q: q.wr_set_mkey_layout_interleaved(
                2, mk.Layout(self.bufs, five.entries[:4]).interleaved()))
        with self.subTest('unknown access flags'):
            self.refused(errno.EINVAL, mkey, 1, lambda q: q.wr_set_mkey_access_flags(e.IBV_ACCESS_MW_BIND))
        with self.subTest('without IBV_SEND_INLINE (mlx5: EOPNOTSUPP)'):
            self.refused(errno.EOPNOTSUPP, mkey, 0, flags=e.IBV_SEND_SIGNALED)
        with self.subTest('unknown conf_flags'):
            self.refused(errno.EOPNOTSUPP, mkey, 0, conf=Mlx5MkeyConfAttr(conf_flags=2))
        with self.subTest('a signature setter on an mkey without BLOCK_SIGNATURE'):
            crc = Mlx5SigBlockDomain(sig_type=dve.MLX5DV_SIG_TYPE_CRC,
                                     crc=Mlx5SigCrc(crc_type=dve.MLX5DV_SIG_CRC_TYPE_CRC32C),
                                     block_size=dve.MLX5DV_BLOCK_SIZE_512)
            self.refused(errno.EINVAL, mkey, 1, lambda q: q.wr_set_mkey_sig_block(
                Mlx5SigBlockAttr(wire=crc, check_mask=dve.MLX5DV_SIG_MASK_CRC32C)))
        with self.subTest('a QP created without MKEY_CONFIGURE'):
            self.qp = self.mlx5_qp()
            base.connect_qp(self.ctx, self.qp, self.peer.qpn)
            self.refused(errno.EINVAL, mkey, 0)
        # Nothing of the above was posted or configured: the mkey still covers nothing, and a
        # valid configuration on a good QP works.
        self.qp = self.mlx5_qp(mr_ops=CONFIGURE)
        self.peer = self.connected_peer()
        self.assertNoCompletion(self.cq)
        self.configured(mkey, layout)

    def test_crypto_mkeys_are_not_offered(self):
        # (BLOCK_SIGNATURE mkeys are: test_mlx5_sig.)
        self.assertRDMAError(errno.EOPNOTSUPP, Mlx5Mkey, self.pd,
                             dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO, 4)

    def test_refusal_log_line(self):
        code = mk.refusal_child('MLX5DV_QP_EX_WITH_MKEY_CONFIGURE', 4, '''
            qp.wr_mkey_configure(mkey, 2, Mlx5MkeyConfAttr())
            qp.wr_set_mkey_access_flags(e.IBV_ACCESS_LOCAL_WRITE)
        ''')
        line = base.refused_once(self, code, 'mlx5dv_wr_mkey_configure')
        self.assertIn('ibv_wr_complete', line)
        self.assertIn('announced 2 setters but 1 were called', line)


if __name__ == '__main__':
    unittest.main()
