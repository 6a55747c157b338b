"""Alternate path and path migration (ibv_modify_qp(3): alt_ah_attr, alt_pkey_index, alt_port_num,
alt_timeout, path_mig_state; IBA 17.2.8): the alternate path is loaded and reported back,
REARM arms it, and a migration -- forced with MIGRATED here, where a QP pair on one host has no
path that can fail -- raises IBV_EVENT_PATH_MIG while traffic goes on."""
import errno

import base
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.qp import QPAttr

tearDownModule = base.tear_down_module

RC, UD = e.IBV_QPT_RC, e.IBV_QPT_UD
MIGRATED, REARM, ARMED = e.IBV_MIG_MIGRATED, e.IBV_MIG_REARM, e.IBV_MIG_ARMED


def alt_path(ctx, flow_label=7, timeout=9):
    """The alternate path of QPs on this host: the same GID, told apart by its flow label."""
    a = QPAttr()
    gr = GlobalRoute(dgid=ctx.query_gid(base.PORT, 1), sgid_index=1, hop_limit=64,
                     flow_label=flow_label)
    a.alt_ah_attr = AHAttr(port_num=base.PORT, is_global=1, gr=gr)
    a.alt_port_num, a.alt_pkey_index, a.alt_timeout = base.PORT, 0, timeout
    return a


class AltPathTest(base.DataTestCase):

    def test_device_claims_automatic_path_migration(self):
        self.assertTrue(self.ctx.query_device().device_cap_flags & e.IBV_DEVICE_AUTO_PATH_MIG)

    def test_alt_path_is_loaded_armed_and_queried(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        q = a.qp.query(e.IBV_QP_PATH_MIG_STATE)[0]
        self.assertEqual(q.path_mig_state, MIGRATED)  # where every QP starts
        attr = alt_path(self.ctx)
        attr.path_mig_state = REARM
        a.qp.modify(attr, e.IBV_QP_ALT_PATH | e.IBV_QP_PATH_MIG_STATE)
        q = a.qp.query(base.QUERY_ALL)[0]
        self.assertEqual(q.path_mig_state, ARMED)  # softverbs0 arms at once
        self.assertEqual((q.alt_port_num, q.alt_pkey_index, q.alt_timeout), (base.PORT, 0, 9))
        self.assertEqual(q.alt_ah_attr.flow_label, 7)
        self.assertEqual(q.alt_ah_attr.dgid, self.ctx.query_gid(base.PORT, 1).gid)
        self.assertEqual(q.ah_attr.flow_label, 0)  # the primary path is unchanged

    def test_alt_path_on_the_way_to_rtr(self):
        # INIT->RTR accepts IBV_QP_ALT_PATH (Linux's qp_state_table, ibv_modify_qp(3)).
        a = base.Peer(self.ctx, self.pd, RC)
        base.connect_qp(self.ctx, a.qp, 0x4242, to=e.IBV_QPS_INIT)
        attr = alt_path(self.ctx, flow_label=3)
        attr.qp_state = e.IBV_QPS_RTR
        attr.ah_attr = base.global_ah_attr(self.ctx)
        attr.path_mtu, attr.dest_qp_num, attr.rq_psn = e.IBV_MTU_1024, 0x4242, 0
        attr.max_dest_rd_atomic, attr.min_rnr_timer = 1, 1
        a.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
                    e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER |
                    e.IBV_QP_ALT_PATH)
        q = a.qp.query(base.QUERY_ALL)[0]
        self.assertEqual(q.alt_ah_attr.flow_label, 3)
        self.assertEqual(q.path_mig_state, MIGRATED)  # loaded, not armed

    def test_bad_alternate_paths_are_einval_and_change_nothing(self):
        a, b = base.connected_pair(self.ctx, self.pd, RC)
        before = base.qp_snapshot(a.qp)
        rearm = QPAttr()
        rearm.path_mig_state = REARM
        cases = {'REARM without an alternate path': (rearm, e.IBV_QP_PATH_MIG_STATE)}
        for field, value in (('alt_port_num', 2), ('alt_port_num', 0), ('alt_pkey_index', 1)):
            attr = alt_path(self.ctx)
            setattr(attr, field, value)
            cases[f'{field} {value}'] = (attr, e.IBV_QP_ALT_PATH)
        no_grh = alt_path(self.ctx)
        no_grh.alt_ah_attr = AHAttr(port_num=base.PORT, is_global=0)
        cases['alt_ah_attr without a GRH (RoCE)'] = (no_grh, e.IBV_QP_ALT_PATH)
        for why, (attr, mask) in cases.items():
            with self.subTest(why=why):
                self.assertRDMAError(errno.EINVAL, a.qp.modify, attr, mask)
                self.assertEqual(base.qp_snapshot(a.qp), before)

    def test_ud_has_no_alternate_path(self):
        a, _ = base.connected_pair(self.ctx, self.pd, UD)
        self.assertRDMAError(errno.EINVAL, a.qp.modify, alt_path(self.ctx), e.IBV_QP_ALT_PATH)


# A forced migration on a QP pair of this host (whose paths cannot fail): the child arms the
# alternate path, sets MIGRATED, waits (at most 2 s, SIGALRM ends it) in ibv_get_async_event,
# then writes through the migrated QP.
MIGRATE = '''
import signal
import base
import pyverbs.enums as e
from pyverbs.pd import PD
from pyverbs.qp import QPAttr
from test_path_migration import alt_path
ctx = base.open_context()
pd = PD(ctx)
a, b = base.connected_pair(ctx, pd, e.IBV_QPT_RC)
attr = alt_path(ctx)
attr.path_mig_state = e.IBV_MIG_REARM
a.qp.modify(attr, e.IBV_QP_ALT_PATH | e.IBV_QP_PATH_MIG_STATE)
m = QPAttr()
m.path_mig_state = e.IBV_MIG_MIGRATED
a.qp.modify(m, e.IBV_QP_PATH_MIG_STATE)
signal.alarm(2)  # default action: the process ends if no event comes
ev = ctx.get_async_event()
print('event', ev.event_type, flush=True)
ev.ack()
q = a.qp.query(base.QUERY_ALL)[0]
print('state', q.path_mig_state, 'flow', q.ah_attr.flow_label, 'timeout', q.timeout, flush=True)
src, dst = base.Buffer(pd, 64), base.Buffer(pd, 64)
src.write(b'migrated' * 8)
a.post_send(base.send_wr(e.IBV_WR_RDMA_WRITE, [src.sge(0, 64)], wr_id=5, rdma=(dst.rkey, dst.addr)))
wc = a.poll()[0]
print('wc', wc.status, 'data', dst.read(0, 64) == b'migrated' * 8, flush=True)
'''


class ForcedMigrationTest(base.SoftverbsTestCase):

    def test_migrated_raises_path_mig_and_traffic_goes_on(self):
        r = base.run_python(MIGRATE, timeout=20)
        self.assertEqual(r.returncode, 0, f'no async event within 2 s: {r.stdout} {r.stderr}')
        self.assertIn(f'event {e.IBV_EVENT_PATH_MIG}', r.stdout)
        self.assertIn(f'state {MIGRATED} flow 7 timeout 9', r.stdout)  # the alternate is primary
        self.assertIn(f'wc {e.IBV_WC_SUCCESS} data True', r.stdout)
