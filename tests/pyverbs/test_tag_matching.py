"""Tag matching on the same host (IBV_SRQT_TM; ibv_create_srq_ex(3), ibv_post_srq_ops(3),
ibv_wc_read_tm_info in ibv_create_cq_ex(3); mlx5's behaviour from rdma-core's providers/mlx5
and tests/test_tag_matching.py).

A client RC QP sends to a server RC QP whose receives come from a TM SRQ. Every message starts
with a TMH (struct ibv_tmh: opcode, app_ctx, tag, big-endian). Data is checked byte for byte with
guard bytes around every buffer; bad input is refused with mlx5's errno or completion status.
"""
import errno
import time
import unittest

import base
import pyverbs.enums as e
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.qp import QP, QPInitAttr
from pyverbs.srq import SRQ, OpsWr, SrqAttr, SrqInitAttr, SrqInitAttrEx

tearDownModule = base.tear_down_module

TMH = 16
MAX_TAGS = 255  # tm_caps.max_num_tags
SRQ_WR_ID = 0x5eed


def tmh(opcode, tag, app_ctx=0):
    return bytes([opcode, 0, 0, 0]) + app_ctx.to_bytes(4, 'big') + tag.to_bytes(8, 'big')


def rvh(va, rkey, length):
    return va.to_bytes(8, 'big') + rkey.to_bytes(4, 'big') + length.to_bytes(4, 'big')


def tm_cq(ctx, cqe=256):
    return CQEX(ctx, CqInitAttrEx(cqe=cqe, wc_flags=e.IBV_WC_EX_WITH_TM_INFO | e.IBV_WC_STANDARD_FLAGS))


def tm_srq_attr(pd, cq, max_num_tags=8, max_ops=16, max_wr=64):
    a = SrqInitAttrEx(max_wr=max_wr, max_sge=1)
    a.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ |
                   e.IBV_SRQ_INIT_ATTR_TM)
    a.srq_type = e.IBV_SRQT_TM
    a.pd = pd
    a.cq = cq
    a.max_num_tags = max_num_tags
    a.max_ops = max_ops
    return a


def poll_ex(cq, timeout=base.POLL_TIMEOUT):
    """The next completion of an extended CQ as a dict (bounded wait)."""
    deadline = time.monotonic() + timeout
    attr = PollCqAttr()
    while cq.start_poll(attr) != 0:
        if time.monotonic() > deadline:
            raise AssertionError(f'no completion within {timeout} s')
        time.sleep(0.0002)
    info = cq.read_tm_info()
    wc = {'wr_id': cq.wr_id, 'status': cq.status, 'opcode': cq.read_opcode(),
          'flags': cq.read_wc_flags(), 'byte_len': cq.read_byte_len(), 'tag': info.tag,
          'priv': info.priv}
    cq.end_poll()
    return wc


def drain_ex(cq):
    attr = PollCqAttr()
    if cq.start_poll(attr) != 0:
        return None
    wc = {'wr_id': cq.wr_id, 'opcode': cq.read_opcode()}
    cq.end_poll()
    return wc


class TmTestCase(base.SoftverbsTestCase):
    """A server RC QP on a TM SRQ (completing on an extended CQ) and a client RC QP."""
    MAX_TAGS = 8
    MAX_OPS = 16

    def setUp(self):
        super().setUp()
        self.scq = tm_cq(self.ctx)
        self.srq = SRQ(self.ctx, tm_srq_attr(self.pd, self.scq, self.MAX_TAGS, self.MAX_OPS))
        self.server = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.scq, srq=self.srq,
                                             cap=base.default_cap(max_send_wr=16, max_send_sge=1,
                                                                  max_recv_wr=0, max_recv_sge=0)))
        self.client = base.Peer(self.ctx, self.pd, e.IBV_QPT_RC)
        self.client.connect(self.server.qp_num)
        base.connect_qp(self.ctx, self.server, self.client.qpn)
        self.src = base.Buffer(self.pd, 4096)
        self.unexp = base.Buffer(self.pd, 4096)  # the ordinary SRQ receive
        self.unexpected_cnt = 0

    def op(self, opcode, wr_id, **kw):
        wr = OpsWr(wr_id=wr_id, opcode=opcode, **kw)
        self.srq.post_srq_ops(wr)
        return wr

    def add(self, tag, buf, wr_id, mask=0xffffffffffffffff, offset=0, length=None, signaled=True, sync=None):
        flags = (e.IBV_OPS_SIGNALED if signaled else 0) | (e.IBV_OPS_TM_SYNC if sync is not None else 0)
        wr = OpsWr(wr_id=wr_id, opcode=e.IBV_WR_TAG_ADD, flags=flags, recv_wr_id=wr_id + 0x1000,
                   num_sge=1, tag=tag, mask=mask, sg_list=[buf.sge(offset, length)],
                   unexpected_cnt=sync or 0)
        self.srq.post_srq_ops(wr)
        return wr

    def send(self, data, also=0):
        """SENDs `data` from the client; returns the client's `also` other completions (a FIN)."""
        self.src.write(data)
        self.client.post_send(base.send_wr(sges=[self.src.sge(0, len(data))], wr_id=0x77))
        wcs = self.client.poll(1 + also)
        self.client_wcs = wcs
        sends = [wc for wc in wcs if wc.opcode == e.IBV_WC_SEND]
        self.assertEqual(len(sends), 1, [base.wc_str(wc) for wc in wcs])
        self.assertEqual(sends[0].status, e.IBV_WC_SUCCESS, base.wc_str(sends[0]))
        return [wc for wc in wcs if wc.opcode != e.IBV_WC_SEND]

    def expect_op(self, opcode, wr_id, status=e.IBV_WC_SUCCESS, flags=0):
        wc = poll_ex(self.scq)
        self.assertEqual((wc['opcode'], wc['wr_id'], wc['status'], wc['flags']), (opcode, wr_id, status, flags), wc)

    def sync(self, wr_id=27):
        self.op(e.IBV_WR_TAG_SYNC, wr_id, flags=e.IBV_OPS_SIGNALED | e.IBV_OPS_TM_SYNC,
                unexpected_cnt=self.unexpected_cnt)
        self.expect_op(e.IBV_WC_TM_SYNC, wr_id)

    def post_unexpected_buffer(self):
        self.srq.post_recv(base.recv_wr([self.unexp.sge()], wr_id=SRQ_WR_ID))


class TmCapsTest(base.SoftverbsTestCase):

    def test_tm_caps(self):
        caps = self.ctx.query_device_ex().tm_caps
        self.assertEqual(caps.flags, e.IBV_TM_CAP_RC)
        self.assertEqual(caps.max_num_tags, MAX_TAGS)
        self.assertEqual(caps.max_sge, 1)
        self.assertEqual(caps.max_rndv_hdr_size, 64)
        self.assertEqual(caps.max_ops, self.ctx.query_device().max_qp_wr)

    def test_creation_refusals(self):
        cq = tm_cq(self.ctx)
        # tm_cap.max_num_tags beyond the device's list (the kernel's mlx5 create_srq: EINVAL).
        self.assertRDMAError(errno.EINVAL, SRQ, self.ctx, tm_srq_attr(self.pd, cq, MAX_TAGS + 1))
        # tm_cap.max_ops beyond a queue's size (mlx5's command QP: EINVAL).
        self.assertRDMAError(errno.EINVAL, SRQ, self.ctx,
                             tm_srq_attr(self.pd, cq, max_ops=self.ctx.query_device().max_qp_wr + 1))
        # mlx5: "An extended CQ is required to read TM information from".
        self.assertRDMAError(errno.EINVAL, SRQ, self.ctx, tm_srq_attr(self.pd, self.cq))
        a = tm_srq_attr(self.pd, cq)
        a.comp_mask &= ~e.IBV_SRQ_INIT_ATTR_PD
        self.assertRDMAError(errno.EINVAL, SRQ, self.ctx, a)
        # The largest list is fine, and a basic SRQ takes no list operation (mlx5: EINVAL).
        SRQ(self.ctx, tm_srq_attr(self.pd, cq, MAX_TAGS))
        basic = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
        self.assertRDMAError(errno.EINVAL, basic.post_srq_ops, OpsWr(opcode=e.IBV_WR_TAG_SYNC))

    def test_refusal_log_line(self):
        code = ('import base, os, errno\nos.environ["SOFTVERBS_LOG"] = "error"\n'
                'import test_tag_matching as t\nfrom pyverbs.srq import SRQ\n'
                'ctx = base.open_context(); pd = base.PD(ctx); cq = t.tm_cq(ctx)\n'
                'try:\n    SRQ(ctx, t.tm_srq_attr(pd, cq, 300))\n'
                'except base.PyverbsRDMAError as x:\n    print("errno", x.error_code)\n')
        r = base.run_python(code, SOFTVERBS_LOG='error')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f'errno {errno.EINVAL}', r.stdout)
        self.assertRegex(r.stderr, r'ibv_create_srq_ex\(.*\): tm_cap.max_num_tags 300 exceeds tm_caps.max_num_tags 255')


class TmEagerTest(TmTestCase):

    def test_matched_in_any_order_byte_for_byte(self):
        bufs = {tag: base.Buffer(self.pd, 512) for tag in (1, 2, 3)}
        for tag, buf in bufs.items():
            wr = self.add(tag, buf, wr_id=tag)
            self.assertLess(wr.handle, self.MAX_TAGS)
            self.expect_op(e.IBV_WC_TM_ADD, tag)
        for tag in (3, 1, 2):
            payload = bytes((tag * 31 + i) & 0xff for i in range(300 + tag))
            self.send(tmh(e.IBV_TMH_EAGER, tag, app_ctx=0xc0ffee00 + tag) + payload)
            wc = poll_ex(self.scq)
            self.assertEqual(wc['status'], e.IBV_WC_SUCCESS, wc)
            self.assertEqual(wc['opcode'], e.IBV_WC_TM_RECV)
            self.assertEqual(wc['flags'] & (e.IBV_WC_TM_MATCH | e.IBV_WC_TM_DATA_VALID),
                             e.IBV_WC_TM_MATCH | e.IBV_WC_TM_DATA_VALID)
            self.assertEqual(wc['wr_id'], tag + 0x1000)  # the ADD's recv_wr_id
            self.assertEqual((wc['tag'], wc['priv']), (tag, 0xc0ffee00 + tag))
            self.assertEqual(wc['byte_len'], len(payload))
            self.assertEqual(bufs[tag].read(0, len(payload)), payload)  # the TMH is not placed
            self.assertEqual(bufs[tag].read(len(payload)), bytes(512 - len(payload)))
            self.assertTrue(bufs[tag].guards_intact())

    def test_oldest_matching_tag_wins_under_its_mask(self):
        a, b, c = (base.Buffer(self.pd, 64) for _ in range(3))
        self.add(0x12340000, a, wr_id=1, mask=0xffff0000)  # any tag 0x1234xxxx
        self.add(0x12345678, b, wr_id=2)                   # exactly 0x12345678
        self.add(0x12340000, c, wr_id=3, mask=0xffff0000)
        for wr_id in (1, 2, 3):
            self.expect_op(e.IBV_WC_TM_ADD, wr_id)
        for want, buf, byte in ((1, a, 0x11), (2, b, 0x22), (3, c, 0x33)):
            self.send(tmh(e.IBV_TMH_EAGER, 0x12345678) + bytes([byte]) * 8)
            wc = poll_ex(self.scq)
            self.assertEqual(wc['wr_id'], want + 0x1000, wc)
            self.assertEqual(wc['tag'], 0x12345678)
            self.assertEqual(buf.read(0, 8), bytes([byte]) * 8)

    def test_zero_length_payload_and_unsignaled_ops(self):
        buf = base.Buffer(self.pd, 64, fill=0x5a)
        self.add(9, buf, wr_id=9, signaled=False)
        self.assertIsNone(drain_ex(self.scq))  # IBV_OPS_SIGNALED not set: no completion
        self.send(tmh(e.IBV_TMH_EAGER, 9))
        wc = poll_ex(self.scq)
        self.assertEqual((wc['opcode'], wc['wr_id'], wc['byte_len'], wc['tag']), (e.IBV_WC_TM_RECV, 9 + 0x1000, 0, 9))
        self.assertEqual(buf.read(), bytes([0x5a]) * 64)

    def test_too_small_a_tag_buffer(self):
        buf = base.Buffer(self.pd, 64)
        self.add(4, buf, wr_id=4, length=10)
        self.expect_op(e.IBV_WC_TM_ADD, 4)
        self.src.write(tmh(e.IBV_TMH_EAGER, 4))
        self.client.post_send(base.send_wr(sges=[self.src.sge(0, TMH + 11)], wr_id=5))
        wc = poll_ex(self.scq)
        self.assertEqual((wc['status'], wc['wr_id']), (e.IBV_WC_LOC_LEN_ERR, 4 + 0x1000), wc)
        self.assertEqual(self.client.poll()[0].status, e.IBV_WC_REM_INV_REQ_ERR)
        self.assertEqual(buf.read(), bytes(64))
        self.assertTrue(buf.guards_intact())


class TmUnexpectedTest(TmTestCase):

    def test_unmatched_goes_to_the_srq_whole(self):
        self.post_unexpected_buffer()
        msg = tmh(e.IBV_TMH_EAGER, 0x1234, app_ctx=7) + b'unexpected payload'
        self.send(msg)
        wc = poll_ex(self.scq)
        # mlx5 (cq.c, MLX5_CQE_APP_OP_TM_UNEXPECTED): IBV_WC_TM_RECV, no TM flags, the SRQ WQE's
        # wr_id, the TMH left to the application in the buffer.
        self.assertEqual((wc['status'], wc['opcode'], wc['wr_id'], wc['flags'] & 0x70, wc['tag']),
                         (e.IBV_WC_SUCCESS, e.IBV_WC_TM_RECV, SRQ_WR_ID, 0, 0), wc)
        self.assertEqual(wc['byte_len'], len(msg))
        self.assertEqual(self.unexp.read(0, len(msg)), msg)
        self.assertTrue(self.unexp.guards_intact())

    def test_matching_stops_until_the_count_is_synced(self):
        buf = base.Buffer(self.pd, 64)
        self.post_unexpected_buffer()
        self.send(tmh(e.IBV_TMH_EAGER, 1) + b'first')
        self.assertEqual(poll_ex(self.scq)['wr_id'], SRQ_WR_ID)
        # The application has not reported that message yet: the ADD asks for a sync, and the tag
        # does not match (it would overtake the unexpected message).
        self.add(2, buf, wr_id=2)
        self.expect_op(e.IBV_WC_TM_ADD, 2, flags=e.IBV_WC_TM_SYNC_REQ)
        self.post_unexpected_buffer()
        self.send(tmh(e.IBV_TMH_EAGER, 2) + b'second')
        wc = poll_ex(self.scq)
        self.assertEqual((wc['opcode'], wc['wr_id'], wc['flags'] & e.IBV_WC_TM_MATCH), (e.IBV_WC_TM_RECV, SRQ_WR_ID, 0))
        self.assertEqual(buf.read(), bytes(64))
        self.unexpected_cnt = 2
        self.sync()
        self.send(tmh(e.IBV_TMH_EAGER, 2) + b'third')
        wc = poll_ex(self.scq)
        self.assertEqual((wc['wr_id'], wc['tag']), (2 + 0x1000, 2), wc)
        self.assertEqual(buf.read(0, 5), b'third')

    def test_no_tag_is_an_ordinary_receive_and_not_counted(self):
        buf = base.Buffer(self.pd, 64)
        self.post_unexpected_buffer()
        msg = tmh(e.IBV_TMH_NO_TAG, 5) + b'plain'
        self.send(msg)
        wc = poll_ex(self.scq)
        self.assertEqual((wc['opcode'], wc['wr_id'], wc['flags'] & 0x70, wc['byte_len']),
                         (e.IBV_WC_TM_NO_TAG, SRQ_WR_ID, 0, len(msg)), wc)
        self.assertEqual(self.unexp.read(0, len(msg)), msg)
        self.add(5, buf, wr_id=5)
        self.expect_op(e.IBV_WC_TM_ADD, 5)  # no IBV_WC_TM_SYNC_REQ: NO_TAG is not unexpected
        self.send(tmh(e.IBV_TMH_EAGER, 5) + b'tagged')
        self.assertEqual(poll_ex(self.scq)['wr_id'], 5 + 0x1000)
        self.assertEqual(buf.read(0, 6), b'tagged')

    def test_no_srq_buffer_is_rnr(self):
        self.src.write(tmh(e.IBV_TMH_EAGER, 8) + b'x')
        self.client.post_send(base.send_wr(sges=[self.src.sge(0, TMH + 1)], wr_id=6))
        self.assertIsNone(drain_ex(self.scq))
        self.post_unexpected_buffer()  # the RNR retry finds it
        wc = poll_ex(self.scq)
        self.assertEqual((wc['opcode'], wc['wr_id']), (e.IBV_WC_TM_RECV, SRQ_WR_ID))
        self.assertEqual(self.client.poll()[0].status, e.IBV_WC_SUCCESS)


class TmListOpsTest(TmTestCase):
    MAX_TAGS = 2
    MAX_OPS = 3

    def test_delete(self):
        buf = base.Buffer(self.pd, 64)
        wr = self.add(3, buf, wr_id=3)
        self.expect_op(e.IBV_WC_TM_ADD, 3)
        d = OpsWr(wr_id=31, opcode=e.IBV_WR_TAG_DEL, flags=e.IBV_OPS_SIGNALED)
        d.handle = wr.handle
        self.srq.post_srq_ops(d)
        self.expect_op(e.IBV_WC_TM_DEL, 31)
        # A removed tag matches nothing; removing it again fails with IBV_WC_TM_ERR
        # (ibv_post_srq_ops(3): "concurrent tag consumption").
        self.post_unexpected_buffer()
        self.send(tmh(e.IBV_TMH_EAGER, 3) + b'gone')
        self.assertEqual(poll_ex(self.scq)['wr_id'], SRQ_WR_ID)
        self.assertEqual(buf.read(), bytes(64))
        self.srq.post_srq_ops(d)
        self.expect_op(e.IBV_WC_TM_DEL, 31, status=e.IBV_WC_TM_ERR, flags=e.IBV_WC_TM_SYNC_REQ)
        d.handle = self.MAX_TAGS  # never returned by an ADD
        self.assertRDMAError(errno.EINVAL, self.srq.post_srq_ops, d)

    def test_consumed_tag_cannot_be_deleted(self):
        buf = base.Buffer(self.pd, 64)
        wr = self.add(4, buf, wr_id=4)
        self.expect_op(e.IBV_WC_TM_ADD, 4)
        self.send(tmh(e.IBV_TMH_EAGER, 4) + b'taken')
        self.assertEqual(poll_ex(self.scq)['wr_id'], 4 + 0x1000)
        d = OpsWr(wr_id=40, opcode=e.IBV_WR_TAG_DEL, flags=e.IBV_OPS_SIGNALED)
        d.handle = wr.handle
        self.srq.post_srq_ops(d)
        self.expect_op(e.IBV_WC_TM_DEL, 40, status=e.IBV_WC_TM_ERR)

    def test_capacity_and_refusals(self):
        buf = base.Buffer(self.pd, 64)
        self.add(1, buf, wr_id=1)
        self.add(2, buf, wr_id=2)
        # mlx5_post_srq_ops: "tag matching list is full" -> ENOMEM, *bad_wr the ADD.
        self.assertRDMAError(errno.ENOMEM, self.add, 3, buf, 3)
        self.expect_op(e.IBV_WC_TM_ADD, 1)
        self.expect_op(e.IBV_WC_TM_ADD, 2)
        self.assertIsNone(drain_ex(self.scq))
        # More operations in one list than tm_cap.max_ops: the command queue overflows (ENOMEM);
        # the ones before it are done.
        ops = [OpsWr(wr_id=50 + i, opcode=e.IBV_WR_TAG_SYNC) for i in range(self.MAX_OPS + 1)]
        for a, b in zip(ops, ops[1:]):
            a.next_wr = b
        bad = OpsWr()
        with self.assertRaises(base.PyverbsRDMAError) as cm:
            self.srq.post_srq_ops(ops[0], bad)
        self.assertEqual(cm.exception.error_code, errno.ENOMEM)
        self.assertEqual(bad.wr_id, 50 + self.MAX_OPS)
        for i in range(self.MAX_OPS):
            self.expect_op(e.IBV_WC_TM_SYNC, 50 + i)
        # tm_caps.max_sge is 1; an unknown opcode is EINVAL.
        two = OpsWr(wr_id=60, opcode=e.IBV_WR_TAG_ADD, num_sge=2, tag=1, mask=1,
                    sg_list=[buf.sge(0, 8), buf.sge(8, 8)])
        self.assertRDMAError(errno.EINVAL, self.srq.post_srq_ops, two)
        self.assertRDMAError(errno.EINVAL, self.srq.post_srq_ops, OpsWr(wr_id=61, opcode=7))
        self.assertIsNone(drain_ex(self.scq))


class TmRendezvousTest(TmTestCase):

    def rndv(self, tag, data, app_ctx=3, rkey=None, length=None, fin=0):
        header = tmh(e.IBV_TMH_RNDV, tag, app_ctx) + rvh(data.addr, data.rkey if rkey is None else rkey,
                                                       data.size if length is None else length)
        return self.send(header + b'user-hdr', also=fin)

    def test_matched_rndv_reads_the_sender_and_sends_fin(self):
        data = base.Buffer(self.pd, 2048)
        payload = bytes((i * 13 + 5) & 0xff for i in range(2048))
        data.write(payload)
        fin = base.Buffer(self.pd, 64)
        self.client.post_recv(fin.sge(), wr_id=0xf1)
        dest = base.Buffer(self.pd, 2048)
        self.add(0x77, dest, wr_id=7)
        self.expect_op(e.IBV_WC_TM_ADD, 7)
        fins = self.rndv(0x77, data, fin=1)
        # mlx5's order on the sender's one CQ: the SEND's completion, then the FIN's receive.
        self.assertEqual([wc.opcode for wc in self.client_wcs], [e.IBV_WC_SEND, e.IBV_WC_RECV])
        # mlx5 (cq.c): a first completion when the tag is consumed (IBV_WC_TM_MATCH, with the tag
        # info), a second when the READ has placed the data (IBV_WC_TM_DATA_VALID, tag info 0 as
        # rdma-core's test_tm_rndv expects).
        first, second = poll_ex(self.scq), poll_ex(self.scq)
        self.assertEqual((first['status'], first['opcode'], first['wr_id'], first['flags'] & 0x70, first['tag'],
                          first['priv']), (e.IBV_WC_SUCCESS, e.IBV_WC_TM_RECV, 7 + 0x1000, e.IBV_WC_TM_MATCH, 0x77, 3))
        self.assertEqual((second['status'], second['opcode'], second['wr_id'], second['flags'] & 0x70,
                          second['tag'], second['byte_len']),
                         (e.IBV_WC_SUCCESS, e.IBV_WC_TM_RECV, 7 + 0x1000, e.IBV_WC_TM_DATA_VALID, 0, 2048))
        self.assertEqual(dest.read(), payload)
        self.assertTrue(dest.guards_intact())
        # The FIN: an ordinary SEND to the sender carrying a TMH (opcode FIN, the tag, app_ctx).
        wc = fins[0]
        self.assertEqual((wc.status, wc.opcode, wc.wr_id, wc.byte_len), (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, 0xf1, TMH))
        self.assertEqual(fin.read(0, TMH), tmh(e.IBV_TMH_FIN, 0x77, 3))

    def test_rdma_core_tm_rndv_sequence(self):
        # The logic of rdma-core's tests/test_tag_matching.py test_tm_rndv: tags 1..8 added, then
        # RNDVs sent for them in reverse order; after each, one poll of the client's CQ (the
        # SEND), one of the server's (TM_RECV with TM_MATCH and the tag), one of the client's
        # that must be the FIN's IBV_WC_RECV, one of the server's (TM_RECV, TM_DATA_VALID).
        data = base.Buffer(self.pd, 1024)
        payload = bytes((i * 7 + 1) & 0xff for i in range(1024))
        data.write(payload)
        fin = base.Buffer(self.pd, 64)
        dests = {}
        for tag in range(1, self.MAX_TAGS + 1):
            dests[tag] = base.Buffer(self.pd, 1024)
            self.add(tag, dests[tag], wr_id=tag)
            self.expect_op(e.IBV_WC_TM_ADD, tag)
        for tag in reversed(range(1, self.MAX_TAGS + 1)):
            self.client.post_recv(fin.sge(), wr_id=tag)
            self.src.write(tmh(e.IBV_TMH_RNDV, tag) + rvh(data.addr, data.rkey, 1024))
            self.client.post_send(base.send_wr(sges=[self.src.sge(0, 64)], wr_id=0x5e))
            wc = self.client.poll()[0]
            self.assertEqual((wc.status, wc.opcode), (e.IBV_WC_SUCCESS, e.IBV_WC_SEND), base.wc_str(wc))
            first = poll_ex(self.scq)
            self.assertEqual((first['opcode'], first['flags'] & 0x70, first['tag']),
                             (e.IBV_WC_TM_RECV, e.IBV_WC_TM_MATCH, tag))
            wc = self.client.poll()[0]
            self.assertEqual((wc.status, wc.opcode, wc.wr_id), (e.IBV_WC_SUCCESS, e.IBV_WC_RECV, tag))
            second = poll_ex(self.scq)
            self.assertEqual((second['opcode'], second['flags'] & 0x70), (e.IBV_WC_TM_RECV, e.IBV_WC_TM_DATA_VALID))
            self.assertEqual(dests[tag].read(), payload)

    def test_bad_rkey_in_the_rvh(self):
        data = base.Buffer(self.pd, 256)
        dest = base.Buffer(self.pd, 256)
        self.add(5, dest, wr_id=5)
        self.expect_op(e.IBV_WC_TM_ADD, 5)
        self.rndv(5, data, rkey=data.rkey ^ 0x5a5a00)
        self.assertEqual(poll_ex(self.scq)['flags'] & 0x70, e.IBV_WC_TM_MATCH)
        wc = poll_ex(self.scq)
        self.assertEqual((wc['status'], wc['wr_id']), (e.IBV_WC_REM_ACCESS_ERR, 5 + 0x1000), wc)
        self.assertEqual(dest.read(), bytes(256))
        self.assertTrue(dest.guards_intact())
        # The sender's QP refused the READ as its responder: it enters ERR, as over the wire (a
        # NAK remote access error, IBA 9.9.3.1.2; rxe do_class_ac_error).
        self.assertEqual(self.client.qp.query(e.IBV_QP_STATE)[0].qp_state, e.IBV_QPS_ERR)

    def test_rndv_too_long_for_the_tag(self):
        data = base.Buffer(self.pd, 256)
        dest = base.Buffer(self.pd, 128)
        self.add(6, dest, wr_id=6)
        self.expect_op(e.IBV_WC_TM_ADD, 6)
        self.rndv(6, data)
        poll_ex(self.scq)
        wc = poll_ex(self.scq)
        self.assertEqual((wc['status'], wc['wr_id']), (e.IBV_WC_LOC_LEN_ERR, 6 + 0x1000), wc)
        self.assertEqual(dest.read(), bytes(128))

    def test_rndv_without_rvh_is_left_to_the_application(self):
        dest = base.Buffer(self.pd, 64)
        self.add(8, dest, wr_id=8)
        self.expect_op(e.IBV_WC_TM_ADD, 8)
        self.send(tmh(e.IBV_TMH_RNDV, 8, 9) + b'short')
        wc = poll_ex(self.scq)
        # mlx5's software rendezvous (CONSUMED_MSG_SW_RNDV): IBV_WC_TM_RNDV_INCOMPLETE, what
        # follows the TMH in the tag's buffer.
        self.assertEqual((wc['status'], wc['opcode'], wc['wr_id'], wc['tag'], wc['priv'], wc['byte_len']),
                         (e.IBV_WC_TM_RNDV_INCOMPLETE, e.IBV_WC_TM_RECV, 8 + 0x1000, 8, 9, 5), wc)
        self.assertEqual(dest.read(0, 5), b'short')

    def test_unmatched_rndv_is_unexpected_with_its_headers(self):
        data = base.Buffer(self.pd, 64)
        self.post_unexpected_buffer()
        self.rndv(0x99, data)
        wc = poll_ex(self.scq)
        self.assertEqual((wc['opcode'], wc['wr_id'], wc['flags'] & 0x70), (e.IBV_WC_TM_RECV, SRQ_WR_ID, 0), wc)
        msg = tmh(e.IBV_TMH_RNDV, 0x99, 3) + rvh(data.addr, data.rkey, 64) + b'user-hdr'
        self.assertEqual(self.unexp.read(0, len(msg)), msg)


if __name__ == '__main__':
    unittest.main()
