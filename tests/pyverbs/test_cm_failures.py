"""What a real CM reports when a connection does not happen or ends badly: rdma_reject with
private data (REJECTED, status 28 = IBA REJ "consumer defined"), connecting where nothing
listens (REJECTED status 8 = "invalid service ID"; UD: UNREACHABLE status 2 = SIDR "service not
supported"), and a peer process that dies (DISCONNECTED once connected, UNREACHABLE -ETIMEDOUT
before)."""
import errno
import signal
import textwrap
import unittest

import base
import cm_ctypes as c
from test_cm_events import CmTestCase

import pyverbs.cm_enums as ce  # noqa: E402
import pyverbs.cmid as cmid  # noqa: E402
import pyverbs.enums as e  # noqa: E402
from pyverbs.qp import QPCap, QPInitAttr  # noqa: E402

tearDownModule = base.tear_down_module
IBV_QPS_ERR = 6
IBV_QPT_UD = 4

# A child that listens, prints its port, accepts one connection and reports each event; it then
# waits to be killed.
SERVER = textwrap.dedent('''
    import sys, time
    import cm_ctypes as c
    ch = c.EventChannel()
    srv = c.Id(ch)
    srv.bind('127.0.0.1', 0)
    srv.listen()
    print('port', srv.src_port(), flush=True)
    req = ch.get()
    print(req.type, flush=True)
    if MODE == 'accept':
        child = c.Id(ch, ptr=req.id)
        child.create_qp()
        child.accept()
        print(ch.get().type, flush=True)
    time.sleep(60)
''')


class RejectTest(CmTestCase):

    def test_reject_carries_private_data_and_consumer_reason(self):
        sch, srv, port = self.listener()
        cch, cli = self.resolved_client('127.0.0.1', port)
        cli.create_qp()
        cli.connect()
        req = self.expect(sch, 'CONNECT_REQUEST')
        child = self.adopt(sch, req.id)
        child.reject(b'go away: 42')
        rej = self.expect(cch, 'REJECTED', 28)
        self.assertEqual(len(rej.private_data), 148)  # a REJ's private data area
        self.assertTrue(rej.private_data.startswith(b'go away: 42'))

    def test_reject_through_pyverbs(self):
        ch = cmid.CMEventChannel()
        srv = cmid.CMID(creator=ch)
        port = str(c.free_port())
        srv.bind_addr(cmid.AddrInfo(src='127.0.0.1', src_service=port,
                                    port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE))
        srv.listen()
        cli = cmid.CMID(creator=ch)
        cli.resolve_addr(cmid.AddrInfo(src='127.0.0.1', dst='127.0.0.1', dst_service=port,
                                       port_space=ce.RDMA_PS_TCP))
        for expected in ('RDMA_CM_EVENT_ADDR_RESOLVED',):
            ev = cmid.CMEvent(ch)
            self.assertEqual(ev.event_str(), expected)
            ev.ack_cm_event()
        cli.resolve_route()
        ev = cmid.CMEvent(ch)
        self.assertEqual(ev.event_str(), 'RDMA_CM_EVENT_ROUTE_RESOLVED')
        ev.ack_cm_event()
        cli.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
        cli.connect(cmid.ConnParam())
        ev = cmid.CMEvent(ch)
        self.assertEqual(ev.event_str(), 'RDMA_CM_EVENT_CONNECT_REQUEST')
        child = cmid.CMID(creator=ev, listen_id=srv)
        ev.ack_cm_event()
        child.reject(b'not today')
        ev = cmid.CMEvent(ch)
        self.assertEqual(ev.event_str(), 'RDMA_CM_EVENT_REJECTED')
        self.assertTrue(ev.private_data.startswith(b'not today'))
        ev.ack_cm_event()
        for o in (child, cli, srv):
            o.close()
        ch.close()

    def test_private_data_larger_than_the_message_is_einval(self):
        sch, srv, port = self.listener()
        cch, cli = self.resolved_client('127.0.0.1', port)
        with self.assertRaises(c.CmError) as cm:
            cli.connect(b'x' * 57)  # a REQ carries 56 bytes for the consumer
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        cli.connect(b'x' * 56)
        req = self.expect(sch, 'CONNECT_REQUEST')
        child = self.adopt(sch, req.id)
        with self.assertRaises(c.CmError) as cm:
            child.reject(b'y' * 149)
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        child.reject(b'y' * 148)
        self.expect(cch, 'REJECTED', 28)


class NowhereTest(CmTestCase):

    def test_connect_where_nothing_listens_is_rejected_with_invalid_service_id(self):
        port = c.free_port()
        cch, cli = self.resolved_client('127.0.0.1', port)
        cli.create_qp()
        cli.connect()
        self.expect(cch, 'REJECTED', 8)

    def test_bound_but_never_listening_is_rejected_too(self):
        ch = self.channel()
        srv = self.new_id(ch)
        srv.bind('127.0.0.1', 0)
        cch, cli = self.resolved_client('127.0.0.1', srv.src_port())
        cli.create_qp()
        cli.connect()  # waits a moment for a listen that never comes
        self.expect(cch, 'REJECTED', 8)

    def test_ud_lookup_where_nothing_listens_is_unreachable(self):
        cch, cli = self.resolved_client('127.0.0.1', c.free_port(), c.RDMA_PS_UDP)
        cli.create_qp(qp_type=IBV_QPT_UD)
        cli.connect()
        self.expect(cch, 'UNREACHABLE', 2)


class PeerDeathTest(CmTestCase):

    def start_server(self, mode):
        proc = base.start_python(f'MODE = {mode!r}\n' + SERVER)
        self.addCleanup(base.stop_child, proc)
        reader = base.LineReader(proc)
        self.addCleanup(reader.close)
        port = int(reader.readline().split()[1])
        return proc, reader, port

    def test_listener_killed_after_establishment_gives_disconnected(self):
        proc, reader, port = self.start_server('accept')
        cch, cli = self.resolved_client('127.0.0.1', port)
        cli.create_qp()
        cli.connect()
        self.expect(cch, 'ESTABLISHED')
        self.assertEqual(reader.readline(), 'CONNECT_REQUEST')
        self.assertEqual(reader.readline(), 'ESTABLISHED')
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.expect(cch, 'DISCONNECTED')
        self.assertEqual(c.qp_state(cli.fields.qp), IBV_QPS_ERR)

    def test_listener_killed_before_accepting_gives_unreachable(self):
        proc, reader, port = self.start_server('hold')
        cch, cli = self.resolved_client('127.0.0.1', port)
        cli.create_qp()
        cli.connect()
        self.assertEqual(reader.readline(), 'CONNECT_REQUEST')
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # The REQ is never answered: the IB CM's REQ timeout, reported as UNREACHABLE.
        self.expect(cch, 'UNREACHABLE', -errno.ETIMEDOUT)


if __name__ == '__main__':
    unittest.main()
