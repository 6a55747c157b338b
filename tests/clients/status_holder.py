"""Holds QPs in known states for status_json_test.sh (run by status_json_check.py, not alone).

Role `a`: a QP of every kind status must tell apart -- an RC pair connected to each other in
RTS, a UD QP in RTS, a UC QP left in RESET, an RC QP in INIT -- and an RC QP `x` to be connected
to role `b`'s. Role `b`: only `x`. Each prints {"pid", "qps": {name: qpn}} on one line, reads the
other's `x` QP number, connects its `x` to it (RTS), prints "ready" and holds until stdin closes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'pyverbs'))
from base import CQ, PD, QP, connect_qp, e, init_attr, open_context  # noqa: E402


def main(role):
    ctx = open_context()
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    qps = {}

    def make(name, qpt):
        qps[name] = QP(pd, init_attr(qpt, cq))
        return qps[name]

    x = make('x', e.IBV_QPT_RC)
    if role == 'a':
        pair_a, pair_b = make('rc_pair_a', e.IBV_QPT_RC), make('rc_pair_b', e.IBV_QPT_RC)
        connect_qp(ctx, pair_a, pair_b.qp_num)
        connect_qp(ctx, pair_b, pair_a.qp_num)
        connect_qp(ctx, make('ud', e.IBV_QPT_UD))
        make('uc_reset', e.IBV_QPT_UC)
        connect_qp(ctx, make('rc_init', e.IBV_QPT_RC), to=e.IBV_QPS_INIT)
    print(json.dumps({'pid': os.getpid(), 'qps': {n: q.qp_num for n, q in qps.items()}}), flush=True)
    connect_qp(ctx, x, int(sys.stdin.readline()))
    print('ready', flush=True)
    sys.stdin.read()  # until the test closes our stdin


if __name__ == '__main__':
    main(sys.argv[1])
