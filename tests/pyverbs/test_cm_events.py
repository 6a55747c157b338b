"""The connection manager's event sequences (rdma_cm(7), rdma_get_cm_event(3)) over
librdmacm.so.1: client and server in one process on their own event channels, IPv4 and IPv6,
and the event channel's fd (readable exactly when an event is there, O_NONBLOCK → EAGAIN)."""
import errno
import fcntl
import os
import select
import socket
import unittest

import base
import cm_ctypes as c

tearDownModule = base.tear_down_module


def readable(fd, timeout=0.0):
    return bool(select.select([fd], [], [], timeout)[0])


class CmTestCase(unittest.TestCase):
    def setUp(self):
        self.objects = []

    def tearDown(self):
        for o in reversed(self.objects):
            try:
                o.destroy() if isinstance(o, c.Id) else o.close()
            except OSError:
                pass

    def channel(self):
        ch = c.EventChannel()
        self.objects.append(ch)
        return ch

    def new_id(self, ch, ps=c.RDMA_PS_TCP):
        i = c.Id(ch, ps)
        self.objects.append(i)
        return i

    def adopt(self, ch, ptr):
        i = c.Id(ch, ptr=ptr)
        self.objects.append(i)
        return i

    def expect(self, ch, kind, status=0):
        ev = ch.get()
        self.assertEqual((ev.type, ev.status), (kind, status), ev)
        return ev

    def listener(self, host='127.0.0.1', ps=c.RDMA_PS_TCP):
        sch = self.channel()
        srv = self.new_id(sch, ps)
        srv.bind(host, 0)
        srv.listen()
        return sch, srv, srv.src_port()

    def resolved_client(self, host, port, ps=c.RDMA_PS_TCP):
        cch = self.channel()
        cli = self.new_id(cch, ps)
        cli.resolve_addr(host, port)
        self.expect(cch, 'ADDR_RESOLVED')
        cli.resolve_route()
        self.expect(cch, 'ROUTE_RESOLVED')
        return cch, cli

    def connect_pair(self, host='127.0.0.1'):
        """REQ → CONNECT_REQUEST, accept → ESTABLISHED on both sides, with QPs."""
        sch, srv, port = self.listener(host)
        cch, cli = self.resolved_client(host, port)
        cli.create_qp()
        cli.connect(b'req-data', resources=2, depth=3)
        req = self.expect(sch, 'CONNECT_REQUEST')
        self.assertEqual(req.listen_id, srv.ptr)
        # The peer's resources as this side sees them: its depth is our responder resources.
        self.assertEqual((req.conn['responder_resources'], req.conn['initiator_depth']), (3, 2))
        self.assertEqual(len(req.private_data), 56)  # a REQ's private data area (rdma_cm over IB CM)
        self.assertTrue(req.private_data.startswith(b'req-data'))
        child = self.adopt(sch, req.id)
        child.create_qp()
        child.accept(b'rep-data', resources=2, depth=2)
        est = self.expect(cch, 'ESTABLISHED')
        self.assertTrue(est.private_data.startswith(b'rep-data'))
        self.assertEqual(len(est.private_data), 196)
        self.expect(sch, 'ESTABLISHED')
        return sch, srv, child, cch, cli


class EventSequenceTest(CmTestCase):

    def test_rc_connect_and_disconnect_ipv4(self):
        sch, srv, child, cch, cli = self.connect_pair('127.0.0.1')
        # Both QPs are in RTS, connected to each other (RoCE GRH from the addresses).
        self.assertEqual(c.qp_state(cli.fields.qp), 3)  # IBV_QPS_RTS
        self.assertEqual(c.qp_state(child.fields.qp), 3)
        self.assertEqual(c.address_of(cli.fields.route.addr.dst)[1], srv.src_port())
        self.assertEqual(c.address_of(child.fields.route.addr.src)[0], '127.0.0.1')
        cli.disconnect()
        self.expect(sch, 'DISCONNECTED')
        self.expect(cch, 'DISCONNECTED')
        # rdma_disconnect(3): "transitions any associated QP to the error state".
        self.assertEqual(c.qp_state(cli.fields.qp), 6)  # IBV_QPS_ERR
        self.assertEqual(c.qp_state(child.fields.qp), 6)
        child.disconnect()  # a second disconnect of a disconnected id is harmless
        # rdma_get_cm_event(3): each QP then leaves its timewait, reported once.
        self.expect(cch, 'TIMEWAIT_EXIT')
        self.expect(sch, 'TIMEWAIT_EXIT')
        for ch in (cch, sch):
            self.assertFalse(select.select([ch.fd], [], [], 0.3)[0])

    def test_rc_connect_ipv6_loopback(self):
        sch, srv, child, cch, cli = self.connect_pair('::1')
        self.assertEqual(c.address_of(cli.fields.route.addr.src)[0], '::1')

    def test_connect_without_qp_needs_establish(self):
        sch, srv, port = self.listener()
        cch, cli = self.resolved_client('127.0.0.1', port)
        cli.connect(qp_num=0x123)
        req = self.expect(sch, 'CONNECT_REQUEST')
        self.assertEqual(req.conn['qp_num'], 0x123)
        child = self.adopt(sch, req.id)
        child.accept(qp_num=0x456)
        rep = self.expect(cch, 'CONNECT_RESPONSE')
        self.assertEqual(rep.conn['qp_num'], 0x456)
        self.assertFalse(readable(sch.fd, 0.05), 'ESTABLISHED before the active side established')
        c.check(c.cm.rdma_establish(cli.ptr), 'rdma_establish')
        self.expect(sch, 'ESTABLISHED')

    def test_every_host_address_resolves_to_softverbs0(self):
        # Every address of the host is a RoCE v2 GID of port 1 (IPv4 as ::ffff:a.b.c.d); the
        # link-local ones need a scope id and are left out.
        ctx = base.open_context()
        hosts = []
        for i in range(1, 64):
            a = base.gid_address(ctx.query_gid(1, i))
            if a.is_unspecified or a.is_link_local:
                continue
            hosts.append(str(a.ipv4_mapped) if a.ipv4_mapped else str(a))
        self.assertIn('127.0.0.1', hosts)
        self.assertIn('::1', hosts)
        for host in hosts:
            with self.subTest(host=host):
                ch = self.channel()
                i = self.new_id(ch)
                i.resolve_addr(host, 4791)
                self.expect(ch, 'ADDR_RESOLVED')
                self.assertIsNotNone(i.fields.verbs)
                self.assertEqual(i.fields.port_num, 1)
                self.assertEqual(c.address_of(i.fields.route.addr.src)[0], host)
                self.assertEqual(c.address_of(i.fields.route.addr.dst), (host, 4791))

    def test_address_of_another_host_resolves_through_the_route(self):
        # TEST-NET-2: never an address of this host. Another host is reached from the address
        # the routing picks (docs/cm.md, "Across hosts"): with no route, ADDR_ERROR -ENETUNREACH
        # as the kernel's route lookup fails; with one (a default route), ADDR_RESOLVED, as the
        # source is an interface address and so a GID of softverbs0.
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.connect(('198.51.100.7', 4791))
            routed = True
        except OSError:
            routed = False
        finally:
            probe.close()
        ch = self.channel()
        i = self.new_id(ch)
        i.resolve_addr('198.51.100.7', 4791)
        if routed:
            self.expect(ch, 'ADDR_RESOLVED')
        else:
            self.expect(ch, 'ADDR_ERROR', -errno.ENETUNREACH)


class ChannelFdTest(CmTestCase):

    def test_fd_is_readable_exactly_when_an_event_waits(self):
        sch, srv, port = self.listener()
        self.assertFalse(readable(sch.fd))
        cch = self.channel()
        cli = self.new_id(cch)
        self.assertFalse(readable(cch.fd))
        cli.resolve_addr('127.0.0.1', port)
        self.assertTrue(readable(cch.fd, 1))
        self.expect(cch, 'ADDR_RESOLVED')
        self.assertFalse(readable(cch.fd))
        cli.resolve_route()
        self.expect(cch, 'ROUTE_RESOLVED')
        cli.create_qp()
        cli.connect()
        # The REQ makes the listener's channel readable without any call on it.
        self.assertTrue(readable(sch.fd, 2))
        self.expect(sch, 'CONNECT_REQUEST')

    def test_nonblocking_fd_gives_eagain(self):
        ch = self.channel()
        fcntl.fcntl(ch.fd, fcntl.F_SETFL, fcntl.fcntl(ch.fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        with self.assertRaises(c.CmError) as cm:
            ch.get()
        self.assertEqual(cm.exception.errno, errno.EAGAIN)
        i = self.new_id(ch)
        i.resolve_addr('127.0.0.1', 4791)
        self.expect(ch, 'ADDR_RESOLVED')

    def test_migrate_id_moves_pending_events(self):
        a, b = self.channel(), self.channel()
        i = self.new_id(a)
        i.resolve_addr('127.0.0.1', 4791)
        c.check(c.cm.rdma_migrate_id(i.ptr, b.ptr), 'rdma_migrate_id')
        self.assertFalse(readable(a.fd))
        self.expect(b, 'ADDR_RESOLVED')
        self.assertEqual(i.fields.channel, ctypes_addr(b.ptr))


def ctypes_addr(p):
    import ctypes
    return ctypes.cast(p, ctypes.c_void_p).value


if __name__ == '__main__':
    unittest.main()
