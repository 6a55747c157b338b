"""ibv_close_device of a context that still holds raw objects (issue 14): run by
test_raw_packet.py inside the namespace of raw_cases.py (`unshare -rn`, the veth pair sva/svb).

A program may close its context without destroying what it made -- for example after
ibv_destroy_qp refused with EBUSY because flows remain. The kernel's uverbs then destroys every
object of the file itself, flows before QPs; softverbs must do the same for what acts on its
own: no flow rule may still steer frames to a QP of the closed context, and no paced send
queue may still send or complete. The case runs in a process of its own (`child()` below): it
closes a context under pyverbs' feet, which pyverbs cannot clean up after, so the child leaves
with os._exit, and a crash shows as its exit status.
"""
import ctypes
import os
import subprocess
import time
import unittest

import base  # environment first
import raw_cases as rc

CHILD = "import raw_close_cases as m; m.child()"


def child():
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.flow import Flow, FlowAttr
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPInitAttrEx
    from pyverbs.spec import EthSpec
    from pyverbs.wq import WQ, WQAttr, WQInitAttr, RwqIndTable, RwqIndTableInitAttr, RxHashConf
    from pyverbs.wr import RecvWR, SGE
    import raw

    vp = ctypes.c_void_p
    keep = []  # nothing the closed context made may be collected (pyverbs would destroy it)
    mac_a, mac_b = rc.mac_of(rc.A), rc.mac_of(rc.B)
    to_b = EthSpec(dst_mac=mac_b, dst_mac_mask='ff:ff:ff:ff:ff:ff')

    # The context that is closed with everything in it.
    victim = base.open_context()
    pd = PD(victim)
    q = rc.RawQp(victim, pd, rc.B)  # a plain raw QP on svb, its rule counting into counters
    q.post_recv(8)
    qp_ptr = raw.pyverbs_pointer(q.qp, 52, q.qp.qp_num)  # struct ibv_qp.qp_num
    ctx_ptr = vp.from_address(qp_ptr).value  # struct ibv_qp.context
    counters = rc._vctx_op(ctx_ptr, 280, vp, [vp, vp])(ctx_ptr, ctypes.byref(ctypes.c_uint32(0)))
    assert counters, os.strerror(ctypes.get_errno())
    attach = rc._vctx_op(ctx_ptr, 288, ctypes.c_int, [vp, vp, vp])
    assert attach(counters, ctypes.byref(rc.CounterAttachC(rc.IBV_COUNTER_PACKETS, 0, 0)), None) == 0
    eth = rc.EthSpecC(type=e.IBV_FLOW_SPEC_ETH, size=ctypes.sizeof(rc.EthSpecC))
    for i, b in enumerate(rc.mac_bytes(mac_b)):
        eth.val.dst_mac[i], eth.mask.dst_mac[i] = b, 0xff
    count = rc.CountSpecC(type=e.IBV_FLOW_SPEC_ACTION_COUNT, size=ctypes.sizeof(rc.CountSpecC), counters=counters)
    body = bytes(eth) + bytes(count)
    head = rc.FlowAttrC(type=e.IBV_FLOW_ATTR_NORMAL, size=ctypes.sizeof(rc.FlowAttrC) + len(body), num_of_specs=2,
                        port=1)
    blob = ctypes.create_string_buffer(bytes(head) + body)
    assert rc._vctx_op(ctx_ptr, 80, vp, [vp, vp])(qp_ptr, blob), os.strerror(ctypes.get_errno())
    # An RSS QP on svb: two WQs in RDY with receives, a table, a rule.
    cqs = [CQ(victim, 64) for _ in range(2)]
    wqs = [WQ(victim, WQInitAttr(wq_pd=pd, wq_cq=cq, wq_type=e.IBV_WQT_RQ, max_wr=16, max_sge=1)) for cq in cqs]
    mr = MR(pd, 2 * 16 * 256, e.IBV_ACCESS_LOCAL_WRITE)
    for k, wq in enumerate(wqs):
        wq.modify(WQAttr(attr_mask=e.IBV_WQ_ATTR_STATE, wq_state=e.IBV_WQS_RDY))
        for i in range(16):
            wq.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(mr.buf + (k * 16 + i) * 256, 256, mr.lkey)]))
    table = RwqIndTable(victim, RwqIndTableInitAttr(log_ind_tbl_size=1, wqs_list=wqs))
    conf = RxHashConf(rx_hash_function=e.IBV_RX_HASH_FUNC_TOEPLITZ, rx_hash_key_len=len(rc.MS_KEY),
                      rx_hash_key=list(rc.MS_KEY), rx_hash_fields_mask=e.IBV_RX_HASH_SRC_PORT_UDP)
    os.environ['SOFTVERBS_RAW_IF'] = rc.B
    rss = QP(victim, QPInitAttrEx(qp_type=e.IBV_QPT_RAW_PACKET, pd=pd, hash_conf=conf, ind_table=table,
                                  comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_IND_TABLE |
                                  e.IBV_QP_INIT_ATTR_RX_HASH))
    rss_attr = FlowAttr(num_of_specs=1, port=1)
    rss_attr.specs.append(to_b)
    rss_flow = Flow(rss, rss_attr)
    # A paced QP on sva (20 kb/s, a one-frame bucket: a 1000-byte frame every 0.4 s) with frames
    # waiting, and a rule of its own.
    p = rc.RawQp(victim, pd, rc.A)
    p.flow(EthSpec(dst_mac=mac_a, dst_mac_mask='ff:ff:ff:ff:ff:ff'))
    p.post_recv(4)
    a = QPAttr()
    a.rate_limit = 20
    p.qp.modify(a, e.IBV_QP_RATE_LIMIT)
    keep += [victim, pd, q, cqs, wqs, mr, table, rss, rss_flow, p]

    # The observer: another context, whose QP on svb sees every frame to svb's MAC.
    ctx = base.open_context()
    opd = PD(ctx)
    o = rc.RawQp(ctx, opd, rc.B)
    o.flow(to_b)
    o.post_recv(16)
    sender = rc.RawQp(ctx, opd, rc.A)
    keep += [ctx, opd, o, sender]

    paced = [rc.udp4_frame(rc.mac_bytes(mac_b), p.mac, bytes([i]) * 1000) for i in range(3)]
    for i, f in enumerate(paced):
        p.send(f, wr_id=i, inline=False)
    assert [o.received(w) for w in o.poll(1)] == paced[:1], 'the first paced frame did not arrive'

    # ibv_destroy_qp refuses (its flow remains), and the program closes the context anyway.
    destroy = raw.lib.ibv_destroy_qp(ctypes.cast(qp_ptr, ctypes.POINTER(raw.IbvQp)))
    assert destroy == rc.EBUSY, destroy
    assert raw.lib.ibv_close_device(ctypes.cast(ctx_ptr, ctypes.POINTER(raw.IbvContext))) == 0

    # Frames the closed context's rules matched still arrive at the port: they reach the
    # observer only, and the process lives.
    frames = [rc.udp4_frame(rc.mac_bytes(mac_b), sender.mac, b'after close %d' % i, sport=4000 + i)
              for i in range(4)]
    frames.append(rc.udp4_frame(rc.mac_bytes(mac_a), sender.mac, b'to the paced QP'))
    for f in frames:
        sender.send(f)
    got = [o.received(w) for w in o.poll(4)]
    assert got == frames[:4], got
    # The paced frames that waited never leave (the QP is gone with its context).
    time.sleep(1.0)
    late = rc.drain(o, 0.1)
    assert late == [], [o.received(w)[:20] for w in late]
    print('ALIVE', flush=True)
    os._exit(0)


class CloseTest(unittest.TestCase):
    def test_close_device_with_flows_wqs_rss_and_paced_sends_left(self):
        rc.setup_pair()
        p = subprocess.run([base.PYTHON, '-c', CHILD], cwd=base.HERE, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn('ALIVE', p.stdout, p.stdout + p.stderr)


class DestroyTest(rc.RawBase):
    def test_paced_frames_still_leave_while_the_qp_is_destroyed(self):
        """As a NIC keeps sending what was posted while the destroy command runs: frames the
        rate lets go within the grace (50 ms) leave; perftest's raw_ethernet_burst_lat server
        destroys its QP right after posting its last replies and its client waits for them."""
        from pyverbs.qp import QPAttr
        from pyverbs.spec import EthSpec
        import pyverbs.enums as e
        a, b = self.pair()
        b.flow(EthSpec(dst_mac=rc.mac_of(rc.B), dst_mac_mask='ff:ff:ff:ff:ff:ff'))
        b.post_recv(8)
        attr = QPAttr()
        attr.rate_limit = 10000  # 10 Mb/s, a one-frame bucket: a 1400-byte frame every 1.12 ms
        a.qp.modify(attr, e.IBV_QP_RATE_LIMIT)
        frames = [rc.udp4_frame(b.mac, a.mac, bytes([i]) * 1400) for i in range(6)]
        for i, f in enumerate(frames):
            a.send(f, wr_id=i, inline=False)
        a.qp.close()  # at once: most of them still wait for the bucket
        self.assertEqual([b.received(w) for w in b.poll(6)], frames)
