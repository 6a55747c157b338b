"""DC (mlx5dv_create_qp) set-up shared by the mlx5dv tests and their child processes: DCTs, DCIs
(with or without streams) and posting through mlx5dv_qp_ex (mlx5dv_wr_set_dc_addr(_stream)).
Import base first (environment)."""
import base
import pyverbs.enums as e
import pyverbs.providers.mlx5.mlx5_enums as dve
from pyverbs.addr import AH
from pyverbs.cq import CQ
from pyverbs.providers.mlx5.mlx5dv import (Mlx5DCIStreamInitAttr, Mlx5DVDCInitAttr, Mlx5DVQPInitAttr,
                                           Mlx5QP)
from pyverbs.qp import QPAttr, QPCap, QPInitAttrEx
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr

DC_KEY = 0x5eed0fdc0ffee
DCI_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE |
           e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_READ |
           e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
# A silent target (wrong key, no DCT) is given up on after (retry_cnt + 1) local ACK timeouts of
# 4.096 us * 2^timeout: about 4 ms here.
FAST_TIMEOUT, FAST_RETRY = 10, 3


def dv_attr(dc_type=None, key=0, create_flags=None, send_ops_flags=None, comp_mask=0, streams=None):
    """A Mlx5DVQPInitAttr; each given field sets its comp_mask bit. `streams`: a DCI's
    (log_num_concurent, log_num_errored)."""
    kw = {}
    if dc_type is not None:
        comp_mask |= dve.MLX5DV_QP_INIT_ATTR_MASK_DC
        dci_streams = None
        if streams is not None:
            comp_mask |= dve.MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS
            dci_streams = Mlx5DCIStreamInitAttr(*streams)
        kw['dc_init_attr'] = Mlx5DVDCInitAttr(dc_type=dc_type, dct_access_key=key, dci_streams=dci_streams)
    if create_flags is not None:
        comp_mask |= dve.MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS
        kw['create_flags'] = create_flags
    if send_ops_flags is not None:
        comp_mask |= dve.MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS
        kw['send_ops_flags'] = send_ops_flags
    return Mlx5DVQPInitAttr(comp_mask=comp_mask, **kw)


def qp_attr(qpt, pd, cq, srq=None, send_ops=None, cap=None):
    mask = e.IBV_QP_INIT_ATTR_PD
    kw = {}
    if send_ops is not None:
        mask |= e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        kw['send_ops_flags'] = send_ops
    return QPInitAttrEx(qp_type=qpt, pd=pd, scq=cq, rcq=cq, srq=srq, comp_mask=mask,
                        cap=cap or QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=2,
                                         max_recv_sge=2), **kw)


def new_srq(pd, max_wr=256):
    return SRQ(pd, SrqInitAttr(SrqAttr(max_wr=max_wr, max_sge=2)))


def create_dct(ctx, pd, cq, srq, key=DC_KEY, access=base.ACCESS_ALL, **dv):
    """A DCT in RTR (it serves from there)."""
    qp = Mlx5QP(ctx, qp_attr(e.IBV_QPT_DRIVER, pd, cq, srq), dv_attr(dve.MLX5DV_DCTYPE_DCT, key, **dv))
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index, a.port_num, a.qp_access_flags = 0, base.PORT, access
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.path_mtu, a.min_rnr_timer = e.IBV_MTU_4096, 1
    a.ah_attr = base.global_ah_attr(ctx)
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PATH_MTU | e.IBV_QP_MIN_RNR_TIMER | e.IBV_QP_AV)
    return qp


def create_dci(ctx, pd, cq, ops=DCI_OPS, timeout=14, retry_cnt=7, **dv):
    """A DCI in RTS: INIT (PKEY, PORT), RTR (PATH_MTU), RTS (RC's requester attributes)."""
    qp = Mlx5QP(ctx, qp_attr(e.IBV_QPT_DRIVER, pd, cq, send_ops=ops), dv_attr(dve.MLX5DV_DCTYPE_DCI, **dv))
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index, a.port_num = 0, base.PORT
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.path_mtu = e.IBV_MTU_4096
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PATH_MTU)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.timeout, a.retry_cnt, a.rnr_retry, a.sq_psn, a.max_rd_atomic = timeout, retry_cnt, 7, 0, base.MAX_RD_ATOM
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
              e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)
    return qp


class Dci:
    """A DCI with its own CQ and buffer, posting through ibv_wr_* + mlx5dv_wr_set_dc_addr."""

    def __init__(self, ctx, pd, size=4096, **kw):
        self.ctx, self.pd = ctx, pd
        self.cq = CQ(ctx, 256, None, None, 0)
        self.qp = create_dci(ctx, pd, self.cq, **kw)
        self.qpn = self.qp.qp_num
        self.buf = base.Buffer(pd, size)
        self.ah = AH(pd, attr=base.global_ah_attr(ctx))

    def post(self, op, dctn, key=DC_KEY, offset=0, length=8, rkey=0, raddr=0, imm=0, compare_add=0,
             swap=0, wr_id=0, dc_addr=True, stream=None):
        q = self.qp
        q.wr_start()
        q.wr_id, q.wr_flags = wr_id, e.IBV_SEND_SIGNALED
        {'send': lambda: q.wr_send(),
         'send_imm': lambda: q.wr_send_imm(imm),
         'write': lambda: q.wr_rdma_write(rkey, raddr),
         'write_imm': lambda: q.wr_rdma_write_imm(rkey, raddr, imm),
         'read': lambda: q.wr_rdma_read(rkey, raddr),
         'fadd': lambda: q.wr_atomic_fetch_add(rkey, raddr, compare_add),
         'cas': lambda: q.wr_atomic_cmp_swp(rkey, raddr, compare_add, swap)}[op]()
        if dc_addr and stream is not None:
            q.wr_set_dc_addr_stream(self.ah, dctn, key, stream)
        elif dc_addr:
            q.wr_set_dc_addr(self.ah, dctn, key)
        q.wr_set_sge(self.buf.sge(offset, length))
        q.wr_complete()

    def poll(self, n=1, timeout=base.POLL_TIMEOUT):
        return base.poll(self.cq, n, timeout)

    def state(self):
        return self.qp.query(e.IBV_QP_STATE)[0].qp_state
