"""XRC helpers (IBA annex A14) for the XRC tests: domains opened through a file, XRC SRQs, the
two halves of an XRC connection walked to RTS/RTR with the attributes ibv_modify_qp(3)
requires for each, and raw calls of the verbs_context ops that pyverbs does not wrap
(ibv_open_qp, and ibv_open_xrcd / ibv_close_xrcd on a raw context).
"""
import ctypes
import os

import base  # environment first
import pyverbs.enums as e
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttrEx
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttrEx
from pyverbs.xrcd import XRCD, XRCDInitAttr

XRCD_MASK = e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS


def open_xrcd(ctx, fd=-1, oflags=os.O_CREAT):
    return XRCD(ctx, XRCDInitAttr(XRCD_MASK, oflags, fd))


def xrc_srq(ctx, pd, xrcd, cq, max_wr=16, max_sge=2):
    attr = SrqInitAttrEx(max_wr=max_wr, max_sge=max_sge)
    attr.srq_type = e.IBV_SRQT_XRC
    attr.pd = pd
    attr.xrcd = xrcd
    attr.cq = cq
    attr.comp_mask = (e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ |
                      e.IBV_SRQ_INIT_ATTR_XRCD)
    return SRQ(ctx, attr)


def recv_qp(ctx, xrcd):
    """An XRC_RECV QP: only its domain (no PD, CQ or queue)."""
    return QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_XRCD,
                                xrcd=xrcd))


def send_qp(ctx, pd, cq, max_send_wr=16, **kw):
    """An XRC_SEND QP (comp_mask PD only: verbs.h sends it through ibv_create_qp)."""
    cap = QPCap(max_send_wr=max_send_wr, max_recv_wr=0, max_send_sge=2, max_recv_sge=0)
    return QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, comp_mask=e.IBV_QP_INIT_ATTR_PD,
                                pd=pd, scq=cq, cap=cap, **kw))


def connect_recv(ctx, qp, remote_qpn, access=base.ACCESS_ALL, to=e.IBV_QPS_RTR):
    """XRC_RECV: RESET->INIT->RTR (its receive half of RC's table) [->RTS]."""
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index, a.port_num, a.qp_access_flags = 0, base.PORT, access
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.ah_attr = base.global_ah_attr(ctx)
    a.path_mtu, a.dest_qp_num, a.rq_psn = e.IBV_MTU_1024, remote_qpn, 0
    a.max_dest_rd_atomic, a.min_rnr_timer = base.MAX_RD_ATOM, 1
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    if to == e.IBV_QPS_RTS:
        a = QPAttr(qp_state=e.IBV_QPS_RTS)
        qp.modify(a, e.IBV_QP_STATE)
    return qp


def connect_send(ctx, qp, remote_qpn, timeout=14, retry_cnt=7, rnr_retry=7):
    """XRC_SEND: RESET->INIT->RTR->RTS (its send half of RC's table)."""
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index, a.port_num = 0, base.PORT
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.ah_attr = base.global_ah_attr(ctx)
    a.path_mtu, a.dest_qp_num = e.IBV_MTU_1024, remote_qpn
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = 0, timeout, retry_cnt, rnr_retry, 4
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
              e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)
    return qp


def xrc_wr(remote_srqn, **kw):
    wr = base.send_wr(**kw)
    wr.set_qp_type_xrc(remote_srqn)
    return wr


# --- verbs_context ops pyverbs does not wrap ----------------------------------------------------
# ibv_open_qp, ibv_open_xrcd and ibv_close_xrcd are static inline in <infiniband/verbs.h>: they
# call the provider's op found in struct verbs_context, which ends with the struct ibv_context
# applications hold. Offsets of rdma-core 44's struct verbs_context on x86-64 (offsetof()).
VCTX_CONTEXT = 320
VCTX_OPEN_QP = 256
VCTX_CREATE_QP_EX = 264
VCTX_OPEN_XRCD = 288
VCTX_CLOSE_XRCD = 296
# enum ibv_qp_open_attr_mask (pyverbs does not export it).
QP_OPEN_ATTR_NUM, QP_OPEN_ATTR_XRCD, QP_OPEN_ATTR_CONTEXT, QP_OPEN_ATTR_TYPE = 1, 2, 4, 8


class IbvQpOpenAttr(ctypes.Structure):
    _fields_ = [('comp_mask', ctypes.c_uint32), ('qp_num', ctypes.c_uint32),
                ('xrcd', ctypes.c_void_p), ('qp_context', ctypes.c_void_p),
                ('qp_type', ctypes.c_int)]


class IbvXrcdInitAttr(ctypes.Structure):
    _fields_ = [('comp_mask', ctypes.c_uint32), ('fd', ctypes.c_int), ('oflags', ctypes.c_int)]


def _op(ctx_ptr, offset, restype, *argtypes):
    vctx = ctypes.cast(ctx_ptr, ctypes.c_void_p).value - VCTX_CONTEXT
    fn = ctypes.c_void_p.from_address(vctx + offset).value
    return ctypes.CFUNCTYPE(restype, *argtypes, use_errno=True)(fn)


def raw_open_xrcd(raw_ctx, fd, oflags=os.O_CREAT, comp_mask=XRCD_MASK):
    """ibv_open_xrcd on a raw.RawContext: (xrcd pointer or None, errno)."""
    attr = IbvXrcdInitAttr(comp_mask, fd, oflags)
    ctypes.set_errno(0)
    x = _op(raw_ctx.ctx, VCTX_OPEN_XRCD, ctypes.c_void_p, ctypes.c_void_p,
            ctypes.POINTER(IbvXrcdInitAttr))(raw_ctx.ctx, ctypes.byref(attr))
    return x, ctypes.get_errno()


def raw_close_xrcd(raw_ctx, xrcd):
    return _op(raw_ctx.ctx, VCTX_CLOSE_XRCD, ctypes.c_int, ctypes.c_void_p)(xrcd)


def raw_open_qp(raw_ctx, xrcd, qp_num, qp_type=e.IBV_QPT_XRC_RECV,
                comp_mask=QP_OPEN_ATTR_NUM | QP_OPEN_ATTR_XRCD | QP_OPEN_ATTR_TYPE):
    """ibv_open_qp(3) on a raw.RawContext: (struct ibv_qp pointer or None, errno)."""
    import raw
    attr = IbvQpOpenAttr(comp_mask, qp_num, xrcd, None, qp_type)
    ctypes.set_errno(0)
    qp = _op(raw_ctx.ctx, VCTX_OPEN_QP, ctypes.POINTER(raw.IbvQp), ctypes.c_void_p,
             ctypes.POINTER(IbvQpOpenAttr))(raw_ctx.ctx, ctypes.byref(attr))
    return (qp if qp else None), ctypes.get_errno()


class IbvQpInitAttrEx(ctypes.Structure):
    # struct ibv_qp_init_attr_ex up to xrcd (qp_type at 52, comp_mask at 60, pd 64, xrcd 72),
    # padded to its full 136 bytes.
    _fields_ = [('head', ctypes.c_char * 52), ('qp_type', ctypes.c_int), ('sq_sig_all', ctypes.c_int),
                ('comp_mask', ctypes.c_uint32), ('pd', ctypes.c_void_p), ('xrcd', ctypes.c_void_p),
                ('tail', ctypes.c_char * 56)]


def raw_create_recv_qp(raw_ctx, xrcd):
    """ibv_create_qp_ex of an XRC_RECV QP in `xrcd` on a raw.RawContext: (qp or None, errno)."""
    import raw
    attr = IbvQpInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_XRCD, xrcd=xrcd)
    assert ctypes.sizeof(attr) == 136
    ctypes.set_errno(0)
    qp = _op(raw_ctx.ctx, VCTX_CREATE_QP_EX, ctypes.POINTER(raw.IbvQp), ctypes.c_void_p,
             ctypes.POINTER(IbvQpInitAttrEx))(raw_ctx.ctx, ctypes.byref(attr))
    return (qp if qp else None), ctypes.get_errno()


def raw_qp_state(qp):
    """ibv_query_qp's qp_state (the first field of struct ibv_qp_attr)."""
    import raw
    buf = ctypes.create_string_buffer(512)
    lib = raw.lib
    lib.ibv_query_qp.restype = ctypes.c_int
    lib.ibv_query_qp.argtypes = [ctypes.POINTER(raw.IbvQp), ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    rc = lib.ibv_query_qp(qp, buf, e.IBV_QP_STATE, None)
    assert rc == 0, rc
    return int.from_bytes(buf.raw[:4], 'little')


def raw_modify_state(qp, state):
    """ibv_modify_qp(qp, {qp_state}, IBV_QP_STATE); returns its result."""
    import raw
    buf = ctypes.create_string_buffer(512)
    ctypes.memmove(buf, int(state).to_bytes(4, 'little'), 4)
    lib = raw.lib
    lib.ibv_modify_qp.restype = ctypes.c_int
    lib.ibv_modify_qp.argtypes = [ctypes.POINTER(raw.IbvQp), ctypes.c_void_p, ctypes.c_int]
    return lib.ibv_modify_qp(qp, buf, e.IBV_QP_STATE)
