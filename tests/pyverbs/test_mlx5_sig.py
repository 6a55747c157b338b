"""Block signature mkeys (mlx5dv_create_mkey with MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE,
mlx5dv_wr_set_mkey_sig_block, mlx5dv_mkey_check) through pyverbs.providers.mlx5: rdma-core's
own cases of tests/test_mlx5_mkey.py (T10-DIF and CRC32 on the wire domain, a bad CRC32 in the
memory domain) and the bytes behind them -- each wire field compared with a model (zlib's CRC32,
the T10-DIF CRC16 written out below), the memory fields a scatter generates, the first error
kept with its expected and actual values until checked -- then the refusals with mlx5's errno
and a log line, sig_caps, and signature pipelining (the send queue stops at a failed check).
"""
import ctypes
import errno
import faulthandler
import struct
import textwrap
import unittest
import zlib

import base
import dc
import pyverbs.enums as e
import pyverbs.providers.mlx5.mlx5_enums as dve
import test_mlx5_mkey as mk
import test_mlx5_mkey_configure as cfg
from agent import Agent
from pyverbs.providers.mlx5.mlx5dv import Mlx5QP
from pyverbs.providers.mlx5.mlx5dv_mkey import (Mlx5Mkey, Mlx5MkeyConfAttr, Mlx5SigBlockAttr, Mlx5SigBlockDomain,
                                                Mlx5SigCrc, Mlx5SigT10Dif)
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr, QPCap
from pyverbs.wr import SGE

tearDownModule = base.tear_down_module

OK = e.IBV_WC_SUCCESS
SIG_FLAGS = dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE
B512 = dve.MLX5DV_BLOCK_SIZE_512
RESET_SIG_ATTR = 1  # MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR (mlx5dv.h; pyverbs does not name it)
T10_ALL = dve.MLX5DV_SIG_MASK_T10DIF_GUARD | dve.MLX5DV_SIG_MASK_T10DIF_APPTAG | dve.MLX5DV_SIG_MASK_T10DIF_REFTAG


def crc16_t10dif(data, seed=0):
    """T10 SBC-3 guard: polynomial 0x8BB7, not reflected, no final inversion."""
    c = seed
    for byte in data:
        c ^= byte << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x8BB7) if c & 0x8000 else c << 1
            c &= 0xFFFF
    return c


def crc32c(data):
    """CRC-32C (RFC 3720 B.4): reflected 0x82F63B78, initial and final ~0."""
    c = 0xFFFFFFFF
    for byte in data:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def crc64_xp10(data, seed=2**64 - 1):
    """XP10's CRC64 (Project Zipline XP10CRC64: reflected 0x9A6C9329AC4BC9B5, final inversion),
    the register starting at `seed`; check('123456789') with seed ~0 is 0xAE8B14860A799888."""
    c = seed
    for byte in data:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ 0x9A6C9329AC4BC9B5 if c & 1 else c >> 1
    return c ^ (2**64 - 1)


def dif(data, bg, app, ref):
    return struct.pack('>HHI', crc16_t10dif(data, bg), app, ref)


def crc_domain(crc_type=dve.MLX5DV_SIG_CRC_TYPE_CRC32, seed=0xFFFFFFFF, block=B512):
    crc = Mlx5SigCrc(crc_type=crc_type, seed=seed)
    return Mlx5SigBlockDomain(sig_type=dve.MLX5DV_SIG_TYPE_CRC, crc=crc, block_size=block), crc


def t10_domain(bg=0xFFFF, app=0xABCD, ref=0x01234567, flags=dve.MLX5DV_SIG_T10DIF_FLAG_REF_REMAP, block=B512,
               bg_type=dve.MLX5DV_SIG_T10DIF_CRC):
    d = Mlx5SigT10Dif(bg_type=bg_type, bg=bg, app_tag=app, ref_tag=ref, flags=flags)
    return Mlx5SigBlockDomain(sig_type=dve.MLX5DV_SIG_TYPE_T10DIF, dif=d, block_size=block), d


class SigTestCase(cfg.ConfigureTestCase):

    def setUp(self):
        super().setUp()
        self.mem = base.Buffer(self.pd, 2 * 520)
        self.pbuf = base.Buffer(self.pd, 2 * 520)

    def sig_mkey(self, mem_bytes, mem=None, wire=None, check_mask=0, **attr):
        """A BLOCK_SIGNATURE mkey over self.mem's first mem_bytes, with the given domains."""
        mkey = Mlx5Mkey(self.pd, SIG_FLAGS, 4)
        keep = (mem, wire)  # pyverbs keeps pointers to these objects
        sig = Mlx5SigBlockAttr(mem=mem and mem[0], wire=wire and wire[0], check_mask=check_mask, **attr)
        self.configure(mkey, 3, lambda q: q.wr_set_mkey_access_flags(mk_access()),
                       lambda q: q.wr_set_mkey_layout_list([self.mem.sge(0, mem_bytes)]),
                       lambda q: q.wr_set_mkey_sig_block(sig))
        del keep
        [wc] = base.poll(self.cq)
        self.assertWC(wc, status=OK, opcode=cfg.mk.UMR)
        return mkey

    def check(self, mkey, err_type=dve.MLX5DV_MKEY_NO_ERR):
        err = mkey.mkey_check()
        self.assertEqual(err.err_type, err_type)
        return err

    def send_from(self, mkey, length):
        """SEND `length` wire bytes from the mkey to the peer; returns what the peer received."""
        self.peer.post_recv(self.pbuf.sge(0, 1040), wr_id=1)
        self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(0, length, mkey.lkey)]))
        self.assertWC(base.poll(self.cq)[0], status=OK)
        self.assertWC(self.peer.poll()[0], status=OK, byte_len=length)
        return self.pbuf.read(0, length)

    def send_to(self, mkey, wire):
        """The peer SENDs `wire` into a receive through the mkey."""
        self.pbuf.write(wire)
        self.qp.post_recv(base.recv_wr([SGE(0, len(wire), mkey.lkey)], wr_id=2))
        self.peer.post_send(base.send_wr(e.IBV_WR_SEND, [self.pbuf.sge(0, len(wire))]))
        self.assertWC(self.peer.poll()[0], status=OK)
        self.assertWC(base.poll(self.cq)[0], status=OK, byte_len=len(wire))


def mk_access():
    return e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE


class RdmaCoreCasesTest(SigTestCase):
    """rdma-core tests/test_mlx5_mkey.py: test_mkey_sig_t10dif, _crc and _err between two mkeys."""

    def pair_traffic(self, domain):
        server_mem = base.Buffer(self.pd, 600)
        client = self.sig_mkey(512, wire=domain(), check_mask=T10_ALL if domain is t10_domain else
                               dve.MLX5DV_SIG_MASK_CRC32)
        saved, self.mem = self.mem, server_mem
        server = self.sig_mkey(512, wire=domain(), check_mask=T10_ALL if domain is t10_domain else
                               dve.MLX5DV_SIG_MASK_CRC32)
        self.mem = saved
        # The client's SEND of 512 wire bytes through its mkey lands, through the server's,
        # in the server's memory ("c" * 512 then what was there).
        self.mem.write(b'c' * 512)
        server_mem.write(b's' * 600)
        self.peer.post_recv(SGE(0, 512, server.lkey), wr_id=2)
        self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [SGE(0, 512, client.lkey)]))
        self.assertWC(base.poll(self.cq)[0], status=OK)
        self.assertWC(self.peer.poll()[0], status=OK, byte_len=512)
        self.assertEqual(server_mem.read(0, 600), b'c' * 512 + b's' * 88)
        self.check(server)
        self.check(client)

    def test_t10dif_wire_domain(self):
        self.pair_traffic(t10_domain)

    def test_crc32_wire_domain(self):
        self.pair_traffic(crc_domain)

    def test_bad_guard_in_the_memory_domain(self):
        # test_mkey_sig_err: 512 + 4 bytes of memory whose CRC32 field is not the data's; a SEND
        # of its 512 wire bytes completes and the mkey reports BAD_GUARD.
        data = b'c' * 516
        self.mem.write(data)
        mkey = self.sig_mkey(516, mem=crc_domain(), check_mask=dve.MLX5DV_SIG_MASK_CRC32)
        self.assertEqual(self.send_from(mkey, 512), data[:512])
        err = self.check(mkey, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD)
        self.assertEqual(err.sig_err.actual_value, zlib.crc32(data[:512]))
        self.assertEqual(err.sig_err.expected_value, struct.unpack('>I', b'cccc')[0])
        self.assertEqual(err.sig_err.offset, 0)
        self.check(mkey)  # the error was taken by the check
        # check_mask 0 checks nothing (test_mkey_sig_pipelining_good's mkey).
        quiet = self.sig_mkey(516, mem=crc_domain(), check_mask=0)
        self.send_from(quiet, 512)
        self.check(quiet)


class WireBytesTest(SigTestCase):
    """The wire view byte for byte, in each direction."""

    def test_send_inserts_crc32_and_crc32c(self):
        data = cfg.mk.payload(1024, 7)
        self.mem.write(data)
        for crc_type, fn in ((dve.MLX5DV_SIG_CRC_TYPE_CRC32, zlib.crc32), (dve.MLX5DV_SIG_CRC_TYPE_CRC32C, crc32c)):
            with self.subTest(crc_type=crc_type):
                mkey = self.sig_mkey(1024, wire=crc_domain(crc_type))
                wire = self.send_from(mkey, 1032)
                self.assertEqual(wire, data[:512] + struct.pack('>I', fn(data[:512])) +
                                 data[512:] + struct.pack('>I', fn(data[512:])))
                self.check(mkey)

    def test_send_inserts_crc64_xp10(self):
        self.assertEqual(crc64_xp10(b'123456789'), 0xAE8B14860A799888)  # the model: CRC-64/NVME's check
        data = cfg.mk.payload(1024, 9)
        self.mem.write(data)
        for seed in (2**64 - 1, 0):
            with self.subTest(seed=seed):
                mkey = self.sig_mkey(1024, wire=crc_domain(dve.MLX5DV_SIG_CRC_TYPE_CRC64_XP10, seed=seed))
                wire = self.send_from(mkey, 1040)
                self.assertEqual(wire, data[:512] + struct.pack('>Q', crc64_xp10(data[:512], seed)) +
                                 data[512:] + struct.pack('>Q', crc64_xp10(data[512:], seed)))
        # A receive checks all 8 bytes (MLX5DV_SIG_MASK_CRC64_XP10) and reports the block's guard.
        mkey = self.sig_mkey(1024, wire=crc_domain(dve.MLX5DV_SIG_CRC_TYPE_CRC64_XP10, seed=2**64 - 1),
                             check_mask=dve.MLX5DV_SIG_MASK_CRC64_XP10)
        good = crc64_xp10(data[512:])
        self.send_to(mkey, data[:512] + struct.pack('>Q', crc64_xp10(data[:512])) +
                     data[512:] + struct.pack('>Q', good ^ 1))
        err = self.check(mkey, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD)
        self.assertEqual((err.sig_err.actual_value, err.sig_err.expected_value, err.sig_err.offset),
                         (good, good ^ 1, 520))

    def test_rdma_read_inserts_t10dif_with_ref_remap(self):
        data = cfg.mk.payload(1024, 8)
        self.mem.write(data)
        mkey = self.sig_mkey(1024, wire=t10_domain())
        self.assertWC(self.peer_read(mkey, 0, 1040), status=OK)
        self.assertEqual(self.pbuf.read(0, 1040), data[:512] + dif(data[:512], 0xFFFF, 0xABCD, 0x01234567) +
                         data[512:] + dif(data[512:], 0xFFFF, 0xABCD, 0x01234568))
        # A part of the wire view: the second block's field alone.
        self.assertWC(self.peer_read(mkey, 1032, 8), status=OK)
        self.assertEqual(self.pbuf.read(0, 8), dif(data[512:], 0xFFFF, 0xABCD, 0x01234568))
        # Beyond the wire view (1040 bytes) is beyond the key.
        self.assertWC(self.peer_read(mkey, 1036, 8), status=e.IBV_WC_REM_ACCESS_ERR)

    def test_receive_strips_and_checks_the_wire_field(self):
        data = cfg.mk.payload(512, 9)
        mkey = self.sig_mkey(512, wire=t10_domain(), check_mask=T10_ALL)
        self.send_to(mkey, data + dif(data, 0xFFFF, 0xABCD, 0x01234567))
        self.assertEqual(self.mem.read(0, 512), data)
        self.check(mkey)
        # A wrong application tag: the data still lands, the first error is kept (with the
        # guard right, the app tag is what fails).
        self.send_to(mkey, data + dif(data, 0xFFFF, 0x1111, 0x01234567))
        err = self.check(mkey, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_APPTAG)
        self.assertEqual((err.sig_err.actual_value, err.sig_err.expected_value), (0x1111, 0xABCD))
        self.send_to(mkey, data + dif(data, 0xFFFF, 0xABCD, 0x7))
        err = self.check(mkey, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_REFTAG)
        self.assertEqual((err.sig_err.actual_value, err.sig_err.expected_value), (0x7, 0x01234567))
        bad = bytes([data[0] ^ 1]) + data[1:]
        self.send_to(mkey, bad + dif(data, 0xFFFF, 0xABCD, 0x01234567))
        err = self.check(mkey, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD)
        self.assertEqual(err.sig_err.actual_value, crc16_t10dif(bad, 0xFFFF))
        self.assertEqual(self.mem.read(0, 512), bad)

    def test_rdma_read_response_lands_through_the_mkey(self):
        # The mkey as an RDMA READ's local SGE: the response's wire field is checked and stripped.
        data = cfg.mk.payload(512, 12)
        mkey = self.sig_mkey(512, wire=t10_domain(), check_mask=T10_ALL)
        for app, want in ((0xABCD, dve.MLX5DV_MKEY_NO_ERR), (0x4321, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_APPTAG)):
            self.pbuf.write(data + dif(data, 0xFFFF, app, 0x01234567))
            self.qp.post_send(base.send_wr(e.IBV_WR_RDMA_READ, [SGE(0, 520, mkey.lkey)],
                                           rdma=(self.pbuf.rkey, self.pbuf.addr)))
            self.assertWC(base.poll(self.cq)[0], status=OK, opcode=e.IBV_WC_RDMA_READ)
            self.assertEqual(self.mem.read(0, 512), data)
            self.check(mkey, want)

    def test_rdma_write_generates_the_memory_field(self):
        # Wire without a signature, memory with T10-DIF (insert on the way into memory).
        data = cfg.mk.payload(1024, 10)
        mkey = self.sig_mkey(1040, mem=t10_domain(app=0x55AA, ref=100))
        self.pbuf.write(data)
        self.peer.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [self.pbuf.sge(0, 1024)], rdma=(mkey.rkey, 0)))
        self.assertWC(self.peer.poll()[0], status=OK)
        self.assertEqual(self.mem.read(0, 1040), data[:512] + dif(data[:512], 0xFFFF, 0x55AA, 100) +
                         data[512:] + dif(data[512:], 0xFFFF, 0x55AA, 101))
        self.check(mkey)

    def test_reset_sig_attr_makes_a_plain_mkey(self):
        data = cfg.mk.payload(512, 11)
        self.mem.write(data)
        mkey = self.sig_mkey(512, wire=crc_domain())
        self.configure(mkey, 0, conf=Mlx5MkeyConfAttr(conf_flags=RESET_SIG_ATTR))
        self.assertWC(base.poll(self.cq)[0], status=OK)
        self.assertEqual(self.send_from(mkey, 512), data)
        self.assertWC(self.peer_read(mkey, 0, 516), status=e.IBV_WC_REM_ACCESS_ERR)


class OtherProcessTest(SigTestCase):
    """The mkey's owner here, the initiator in another process (agent.py): the conversion runs
    there, on this process's memory and this mkey's error slot."""

    def test_read_write_and_send_from_another_process(self):
        child = Agent()
        self.addCleanup(child.close)
        info = child.call('qp', qpt=e.IBV_QPT_RC, size=2048)
        self.qp = self.mlx5_qp(mr_ops=cfg.CONFIGURE)
        base.connect_qp(self.ctx, self.qp, info['qpn'])
        cid = info['id']
        child.call('connect', id=cid, remote_qpn=self.qp.qp_num)

        def child_ok(**expected):
            [wc] = child.call('poll', id=cid, n=1)
            for k, v in dict(status=OK, **expected).items():
                self.assertEqual(wc[k], v, (k, wc))

        data = cfg.mk.payload(1024, 21)
        self.mem.write(data)
        mkey = self.sig_mkey(1024, wire=t10_domain(), check_mask=T10_ALL)
        with self.subTest('RDMA READ of the wire view'):
            child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_READ, wr_id=1, offset=0, length=1040,
                       rkey=mkey.rkey, raddr=0)
            child_ok()
            self.assertEqual(bytes.fromhex(child.call('read', id=cid, offset=0, length=1040)),
                             data[:512] + dif(data[:512], 0xFFFF, 0xABCD, 0x01234567) +
                             data[512:] + dif(data[512:], 0xFFFF, 0xABCD, 0x01234568))
        new = cfg.mk.payload(512, 22)
        with self.subTest('RDMA WRITE of block 1 with a bad reference tag'):
            wire = new + dif(new, 0xFFFF, 0xABCD, 0x01234567)  # block 1 expects ...68
            child.call('write', id=cid, offset=0, data=wire.hex())
            child.call('post_send', id=cid, opcode=e.IBV_WR_RDMA_WRITE, wr_id=2, offset=0, length=520,
                       rkey=mkey.rkey, raddr=520)
            child_ok()
            self.assertEqual(self.mem.read(0, 1024), data[:512] + new)
            err = self.check(mkey, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_REFTAG)
            self.assertEqual((err.sig_err.expected_value, err.sig_err.offset), (0x01234568, 520))
        with self.subTest('SEND into a receive through the mkey'):
            wire = new + dif(new, 0xFFFF, 0xABCD, 0x01234567)
            child.call('write', id=cid, offset=0, data=wire.hex())
            self.qp.post_recv(base.recv_wr([SGE(0, 520, mkey.lkey)], wr_id=3))
            child.call('post_send', id=cid, opcode=e.IBV_WR_SEND, wr_id=3, offset=0, length=520)
            child_ok()
            self.assertWC(base.poll(self.cq)[0], status=OK, byte_len=520)
            self.assertEqual(self.mem.read(0, 512), new)
            self.check(mkey)


class SigRefusalTest(SigTestCase):

    def refused(self, code, mkey, attr):
        with self.assertRaises(PyverbsRDMAError) as cm:
            self.configure(mkey, 1, lambda q: q.wr_set_mkey_sig_block(attr))
        self.assertEqual(abs(cm.exception.error_code), code, str(cm.exception))

    def test_refusals(self):
        mkey = Mlx5Mkey(self.pd, SIG_FLAGS, 4)
        crc = crc_domain()
        cases = [
            ('block size beyond enum mlx5dv_block_size', errno.EINVAL, crc_domain(block=9)),
            ('a CRC32 seed other than 0 / ~0', errno.EINVAL, crc_domain(seed=5)),
            ('a T10-DIF bg other than 0 / 0xffff', errno.EINVAL, t10_domain(bg=0x1234)),
            ('unknown T10-DIF flags', errno.EINVAL, t10_domain(flags=0x80)),
            ('a CRC64_XP10 seed other than 0 / ~0 (a CRC32 ~0 is not one)', errno.EINVAL,
             crc_domain(crc_type=dve.MLX5DV_SIG_CRC_TYPE_CRC64_XP10, seed=0xFFFFFFFF)),
        ]
        for name, code, domain in cases:
            with self.subTest(name):
                self.refused(code, mkey, Mlx5SigBlockAttr(wire=domain[0]))
        with self.subTest('neither domain'):
            self.refused(errno.EINVAL, mkey, Mlx5SigBlockAttr(check_mask=0xff))
        with self.subTest('COPY_MASK without the same block structure'):
            t10 = t10_domain()
            self.refused(errno.EINVAL, mkey, Mlx5SigBlockAttr(mem=crc[0], wire=t10[0],
                                                             flags=dve.MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK))
        with self.subTest('two block sizes'):
            big = crc_domain(block=dve.MLX5DV_BLOCK_SIZE_4096)
            self.refused(errno.EOPNOTSUPP, mkey, Mlx5SigBlockAttr(mem=crc[0], wire=big[0]))
        with self.subTest('unknown attr flags'):
            self.refused(errno.EINVAL, mkey, Mlx5SigBlockAttr(wire=crc[0], flags=2))
        with self.subTest('an mkey without BLOCK_SIGNATURE'):
            plain = Mlx5Mkey(self.pd, dve.MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT, 4)
            self.refused(errno.EINVAL, plain, Mlx5SigBlockAttr(wire=crc[0]))
        self.assertNoCompletion(self.cq)

    def test_refusal_log_line(self):
        code = mk.refusal_child('MLX5DV_QP_EX_WITH_MKEY_CONFIGURE', 4, '''
            crc = Mlx5SigCrc(crc_type=dve.MLX5DV_SIG_CRC_TYPE_CRC32, seed=5)
            dom = Mlx5SigBlockDomain(sig_type=dve.MLX5DV_SIG_TYPE_CRC, crc=crc, block_size=dve.MLX5DV_BLOCK_SIZE_512)
            qp.wr_mkey_configure(mkey, 1, Mlx5MkeyConfAttr())
            qp.wr_set_mkey_sig_block(Mlx5SigBlockAttr(wire=dom))
        ''', mkey_flags='MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE')
        line = base.refused_once(self, code, 'mlx5dv_wr_set_mkey_sig_block')
        self.assertIn('CRC seed 0x5', line)


PIPELINING = dve.MLX5DV_QP_CREATE_SIG_PIPELINING
FENCED = e.IBV_SEND_SIGNALED | e.IBV_SEND_FENCE


class PipeliningTest(SigTestCase):
    """MLX5DV_QP_CREATE_SIG_PIPELINING and mlx5dv_qp_cancel_posted_send_wrs: rdma-core's
    test_mkey_sig_pipelining_good / _bad (tests/test_mlx5_mkey.py) -- an RDMA WRITE of data
    through a CRC32 memory-domain mkey, then the response SEND with IBV_SEND_FENCE -- and what
    mlx5dv_qp_cancel_posted_send_wrs(3) says of cancels, SQD and ERR."""

    def mlx5_qp(self, mr_ops=cfg.CONFIGURE):
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=4, max_recv_sge=4)
        return Mlx5QP(self.ctx, dc.qp_attr(e.IBV_QPT_RC, self.pd, self.cq, send_ops=mk.QP_OPS, cap=cap),
                      dc.dv_attr(send_ops_flags=mr_ops, create_flags=PIPELINING))

    def setUp(self):
        super().setUp()
        self.resp = base.Buffer(self.pd, 16)
        self.resp.write(b'response-16bytes')

    def state(self):
        return self.qp.query(e.IBV_QP_STATE)[0].qp_state

    def move(self, state, cur=None):
        attr = QPAttr(qp_state=state)
        mask = e.IBV_QP_STATE
        if cur is not None:
            attr.cur_qp_state = cur
            mask |= e.IBV_QP_CUR_STATE
        self.qp.modify(attr, mask)

    def transaction(self, check_mask):
        """Data (512 bytes of memory 'c' * 516, whose CRC32 field is wrong) by an unsignaled
        RDMA WRITE, then the 16-byte response, both wr_id 1; the peer posts one receive."""
        self.mem.write(b'c' * 516)
        self.pbuf.write(b'\0' * 1040)
        mkey = self.sig_mkey(516, mem=crc_domain(), check_mask=check_mask)
        self.peer.post_recv(self.pbuf.sge(1024, 16), wr_id=7)
        self.qp.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [SGE(0, 512, mkey.lkey)], wr_id=1, flags=0,
                                       rdma=(self.pbuf.rkey, self.pbuf.addr)))
        self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [self.resp.sge()], wr_id=1, flags=FENCED))
        return mkey

    def sq_drained_event(self):
        # The stop is reported before ibv_post_send returns (same host); a regression must not
        # hang the suite: the watchdog ends the process after 10 s.
        faulthandler.dump_traceback_later(10, exit=True)
        try:
            ev = self.ctx.get_async_event()
        finally:
            faulthandler.cancel_dump_traceback_later()
        ev.ack()
        return ev.event_type

    def test_good_transaction_goes_through(self):
        mkey = self.transaction(check_mask=0)
        self.assertWC(base.poll(self.cq)[0], status=OK, wr_id=1, opcode=e.IBV_WC_SEND)
        self.assertWC(self.peer.poll()[0], status=OK, wr_id=7, byte_len=16)
        self.assertEqual(self.pbuf.read(0, 512), b'c' * 512)
        self.assertEqual(self.pbuf.read(1024, 16), b'response-16bytes')
        self.assertEqual(self.state(), e.IBV_QPS_RTS)
        self.check(mkey)

    def test_bad_signature_stops_until_canceled_and_rts(self):
        mkey = self.transaction(check_mask=dve.MLX5DV_SIG_MASK_CRC32)
        self.assertEqual(self.sq_drained_event(), e.IBV_EVENT_SQ_DRAINED)
        self.assertEqual(self.state(), e.IBV_QPS_SQD)
        # The WRITE moved its data (it was unsignaled); the fenced response waits.
        self.assertEqual(self.pbuf.read(0, 512), b'c' * 512)
        self.assertNoCompletion(self.cq)
        self.assertNoCompletion(self.peer)
        self.check(mkey, dve.MLX5DV_MKEY_SIG_BLOCK_BAD_GUARD)
        self.check(mkey)
        self.assertEqual(self.qp.cancel_posted_send_wrs(1), 1)
        self.assertEqual(self.qp.cancel_posted_send_wrs(3), 0)  # no WR of that id waits
        # A second cancel finds a NOP, which mlx5 refuses (providers/mlx5/qp.c: -EINVAL).
        self.assertRDMAError(errno.EINVAL, self.qp.cancel_posted_send_wrs, 1)
        # The corrected response, posted in SQD, waits too.
        self.resp.write(b'bad-signature!!!')
        self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [self.resp.sge()], wr_id=2, flags=FENCED))
        self.assertNoCompletion(self.cq)
        self.move(e.IBV_QPS_RTS, cur=e.IBV_QPS_SQD)
        # The canceled SEND completes as a good SEND (it was signaled) and sends nothing.
        wcs = base.poll(self.cq, 2)
        self.assertWC(wcs[0], status=OK, wr_id=1, opcode=e.IBV_WC_SEND)
        self.assertWC(wcs[1], status=OK, wr_id=2, opcode=e.IBV_WC_SEND)
        self.assertWC(self.peer.poll()[0], status=OK, wr_id=7, byte_len=16)
        self.assertEqual(self.pbuf.read(1024, 16), b'bad-signature!!!')
        self.assertNoCompletion(self.peer)
        self.assertEqual(self.state(), e.IBV_QPS_RTS)

    def test_canceled_wr_is_flushed_in_err(self):
        self.transaction(check_mask=dve.MLX5DV_SIG_MASK_CRC32)
        self.assertEqual(self.sq_drained_event(), e.IBV_EVENT_SQ_DRAINED)
        self.assertEqual(self.qp.cancel_posted_send_wrs(1), 1)
        self.move(e.IBV_QPS_ERR)
        self.assertWC(base.poll(self.cq)[0], status=e.IBV_WC_WR_FLUSH_ERR, wr_id=1)
        self.assertNoCompletion(self.cq)

    def test_cancel_in_sqd_entered_by_modify(self):
        # Not only a signature stop: any QP in SQD (providers/mlx5/qp.c checks the state only).
        self.peer.post_recv(self.pbuf.sge(0, 16), wr_id=7)
        self.move(e.IBV_QPS_SQD)
        for wr_id, flags in ((5, e.IBV_SEND_SIGNALED), (6, e.IBV_SEND_SIGNALED), (5, 0)):
            self.qp.post_send(base.send_wr(e.IBV_WR_SEND, [self.resp.sge()], wr_id=wr_id, flags=flags))
        self.assertEqual(self.qp.cancel_posted_send_wrs(5), 2)
        self.move(e.IBV_QPS_RTS)
        wcs = base.poll(self.cq, 2)
        self.assertEqual([(w.wr_id, w.status) for w in wcs], [(5, OK), (6, OK)])  # the unsignaled 5: none
        self.assertWC(self.peer.poll()[0], status=OK, wr_id=7, byte_len=16)
        self.assertNoCompletion(self.cq)

    def test_cancel_outside_sqd_is_einval_with_a_log_line(self):
        self.assertRDMAError(errno.EINVAL, self.qp.cancel_posted_send_wrs, 1)
        code = textwrap.dedent('''
            import pyverbs.enums as e
            import pyverbs.providers.mlx5.mlx5_enums as dve
            from pyverbs.cq import CQ
            from pyverbs.device import Context
            from pyverbs.pd import PD
            from pyverbs.providers.mlx5.mlx5dv import Mlx5DVQPInitAttr, Mlx5QP
            from pyverbs.qp import QPCap, QPInitAttrEx
            ctx = Context(name='softverbs0')
            pd = PD(ctx)
            cq = CQ(ctx, 16, None, None, 0)
            attr = QPInitAttrEx(qp_type=e.IBV_QPT_RC, pd=pd, scq=cq, rcq=cq, cap=QPCap(),
                                comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                send_ops_flags=e.IBV_QP_EX_WITH_SEND)
            qp = Mlx5QP(ctx, attr, Mlx5DVQPInitAttr(comp_mask=dve.MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
                                                    create_flags=dve.MLX5DV_QP_CREATE_SIG_PIPELINING))
            try:
                qp.cancel_posted_send_wrs(1)
            except Exception as ex:
                print('refused', ex)
        ''')
        line = base.refused_once(self, code, 'mlx5dv_qp_cancel_posted_send_wrs')
        self.assertIn('SQD only', line)


class _SigCaps(ctypes.Structure):
    _fields_ = [('block_size', ctypes.c_uint64), ('block_prot', ctypes.c_uint32), ('t10dif_bg', ctypes.c_uint16),
                ('crc_type', ctypes.c_uint16)]


class _Mlx5DvContext(ctypes.Structure):
    # struct mlx5dv_context of mlx5dv.h up to sig_caps, then room for the rest.
    _fields_ = [('version', ctypes.c_uint8), ('flags', ctypes.c_uint64), ('comp_mask', ctypes.c_uint64),
                ('cqe_comp_caps', ctypes.c_uint32 * 2), ('sw_parsing_caps', ctypes.c_uint32 * 2),
                ('striding_rq_caps', ctypes.c_uint32 * 5), ('tunnel_offloads_caps', ctypes.c_uint32),
                ('max_dynamic_bfregs', ctypes.c_uint32), ('max_clock_info_update_nsec', ctypes.c_uint64),
                ('flow_action_flags', ctypes.c_uint32), ('dc_odp_caps', ctypes.c_uint32),
                ('hca_core_clock', ctypes.c_void_p), ('num_lag_ports', ctypes.c_uint8), ('sig_caps', _SigCaps),
                ('rest', ctypes.c_uint8 * 256)]


class SigCapsTest(unittest.TestCase):

    def test_sig_caps(self):
        verbs = ctypes.CDLL('libibverbs.so.1')
        mlx5 = ctypes.CDLL('libmlx5.so.1')
        verbs.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
        verbs.ibv_open_device.restype = ctypes.c_void_p
        verbs.ibv_open_device.argtypes = [ctypes.c_void_p]
        verbs.ibv_close_device.argtypes = [ctypes.c_void_p]
        verbs.ibv_free_device_list.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        mlx5.mlx5dv_query_device.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Mlx5DvContext)]
        devs = verbs.ibv_get_device_list(None)
        ctx = verbs.ibv_open_device(devs[0])
        try:
            out = _Mlx5DvContext()
            out.comp_mask = dve.MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD
            self.assertEqual(mlx5.mlx5dv_query_device(ctx, ctypes.byref(out)), 0)
            self.assertEqual(out.comp_mask, dve.MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD)
            caps = out.sig_caps
            # MLX5DV_BLOCK_SIZE_CAP_x is 1 << MLX5DV_BLOCK_SIZE_x (pyverbs names only the latter).
            sizes = [dve.MLX5DV_BLOCK_SIZE_512, dve.MLX5DV_BLOCK_SIZE_520, dve.MLX5DV_BLOCK_SIZE_4048,
                     dve.MLX5DV_BLOCK_SIZE_4096, dve.MLX5DV_BLOCK_SIZE_4160]
            self.assertEqual(caps.block_size, sum(1 << s for s in sizes))
            # Each *_CAP_x of mlx5dv.h is 1 << the enum value x.
            self.assertEqual(caps.block_prot, (1 << dve.MLX5DV_SIG_TYPE_T10DIF) | (1 << dve.MLX5DV_SIG_TYPE_CRC))
            self.assertEqual(caps.t10dif_bg, (1 << dve.MLX5DV_SIG_T10DIF_CRC) | (1 << dve.MLX5DV_SIG_T10DIF_CSUM))
            self.assertEqual(caps.crc_type,
                             (1 << dve.MLX5DV_SIG_CRC_TYPE_CRC32) | (1 << dve.MLX5DV_SIG_CRC_TYPE_CRC32C) |
                             (1 << dve.MLX5DV_SIG_CRC_TYPE_CRC64_XP10))
        finally:
            verbs.ibv_close_device(ctx)
            verbs.ibv_free_device_list(devs)


if __name__ == '__main__':
    unittest.main()
