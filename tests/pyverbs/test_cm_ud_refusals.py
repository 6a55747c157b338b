"""UD through the CM (SIDR: rdma_connect on an RDMA_PS_UDP id → ESTABLISHED with ud_param:
the remote QPN, Q_Key and a RoCE address vector), multicast joins, and bad input: NULL / foreign / unresolved
identifiers and verbs in the wrong state get the man page's errno and, with SOFTVERBS_LOG=error,
exactly one line naming the verb, the identifier and the rule."""
import errno
import re
import socket
import textwrap
import unittest

import base
import cm_ctypes as c
from test_cm_events import CmTestCase

tearDownModule = base.tear_down_module
IBV_QPT_UD = 4
RDMA_UDP_QKEY = 0x01234567


class UdTest(CmTestCase):

    def test_ud_lookup_gives_established_with_ud_param(self):
        sch, srv, port = self.listener(ps=c.RDMA_PS_UDP)
        cch, cli = self.resolved_client('127.0.0.1', port, c.RDMA_PS_UDP)
        cli.create_qp(qp_type=IBV_QPT_UD)
        cli.connect(b'who are you')
        req = self.expect(sch, 'CONNECT_REQUEST')
        self.assertTrue(req.private_data.startswith(b'who are you'))
        child = self.adopt(sch, req.id)
        child.create_qp(qp_type=IBV_QPT_UD)
        child.accept()
        est = self.expect(cch, 'ESTABLISHED')
        self.assertEqual(est.ud['qp_num'], c.qp_num(child.fields.qp))
        self.assertEqual(est.ud['qkey'], RDMA_UDP_QKEY)
        self.assertEqual(est.ud['is_global'], 1)  # RoCE: a GRH in every address vector
        self.assertEqual(est.ud['port_num'], 1)
        mapped = b'\0' * 10 + b'\xff\xff' + socket.inet_aton('127.0.0.1')
        self.assertEqual(est.ud['dgid'], mapped)
        ctx = base.open_context()
        sgid = base.gid_address(ctx.query_gid(1, est.ud['sgid_index']))
        self.assertEqual(str(sgid.ipv4_mapped), '127.0.0.1')

    def test_ud_reject_is_unreachable_with_sidr_reject(self):
        sch, srv, port = self.listener(ps=c.RDMA_PS_UDP)
        cch, cli = self.resolved_client('127.0.0.1', port, c.RDMA_PS_UDP)
        cli.create_qp(qp_type=IBV_QPT_UD)
        cli.connect()
        req = self.expect(sch, 'CONNECT_REQUEST')
        self.adopt(sch, req.id).reject()
        self.expect(cch, 'UNREACHABLE', 1)


class MulticastTest(CmTestCase):

    def test_join_gives_the_group_address_vector_and_the_context(self):
        import ctypes
        ch = self.channel()
        i = self.new_id(ch, c.RDMA_PS_UDP)
        i.bind('127.0.0.1')
        i.create_qp(qp_type=IBV_QPT_UD)
        context = ctypes.c_void_p(0x1234)
        c.check(c.cm.rdma_join_multicast(i.ptr, c.sockaddr('239.9.9.9'), context),
                'rdma_join_multicast')
        ev = self.expect(ch, 'MULTICAST_JOIN')
        self.assertEqual(ev.private_data_ptr, 0x1234)
        self.assertEqual(ev.ud['qp_num'], 0xFFFFFF)
        self.assertEqual(ev.ud['qkey'], RDMA_UDP_QKEY)
        self.assertEqual(ev.ud['is_global'], 1)
        self.assertEqual(ev.ud['dgid'], b'\0' * 10 + b'\xff\xff' + socket.inet_aton('239.9.9.9'))
        with self.assertRaises(c.CmError) as cm:  # one membership per group and identifier
            c.check(c.cm.rdma_join_multicast(i.ptr, c.sockaddr('239.9.9.9'), None), 'join')
        self.assertEqual(cm.exception.errno, errno.EADDRINUSE)
        # The QP is attached: it cannot be destroyed under the group with ibv_destroy_qp, but
        # rdma_destroy_qp detaches it first.
        c.verbs.ibv_destroy_qp.argtypes = [ctypes.c_void_p]
        self.assertEqual(c.verbs.ibv_destroy_qp(i.fields.qp), errno.EBUSY)
        c.check(c.cm.rdma_leave_multicast(i.ptr, c.sockaddr('239.9.9.9')), 'rdma_leave_multicast')
        self.assertEqual(c.verbs.ibv_destroy_qp(i.fields.qp), 0)
        i.fields.qp = None

    def test_join_needs_a_bound_ud_identifier(self):
        ch = self.channel()
        unbound = self.new_id(ch, c.RDMA_PS_UDP)
        rc_id = self.new_id(ch)
        rc_id.bind('127.0.0.1')
        for i in (unbound, rc_id):
            with self.subTest(id=i):
                with self.assertRaises(c.CmError) as cm:
                    c.check(c.cm.rdma_join_multicast(i.ptr, c.sockaddr('239.9.9.8'), None), 'join')
                self.assertEqual(cm.exception.errno, errno.EINVAL)


PRELUDE = textwrap.dedent('''
    import ctypes, os
    print('pid', os.getpid())
    import cm_ctypes as c
    def call(name, *args):
        rc = getattr(c.cm, name)(*args)
        print(name, rc, ctypes.get_errno() if rc != 0 else 0, flush=True)
    ch = c.EventChannel()
''')

CASES = {
    # (code, errno, log line pattern after "softverbs[pid] error: ")
    'null id': ("call('rdma_bind_addr', None, c.sockaddr('127.0.0.1'))", errno.EINVAL,
                r'rdma_bind_addr: id is NULL or not an rdma_cm_id of softverbs'),
    'foreign id': ("buf = ctypes.create_string_buffer(512)\n"
                   "call('rdma_connect', buf, None)", errno.EINVAL,
                   r'rdma_connect: id is NULL or not an rdma_cm_id of softverbs'),
    'route before address': ("i = c.Id(ch)\ncall('rdma_resolve_route', i.ptr, 100)", errno.EINVAL,
                             r'rdma_resolve_route\(id 0x[0-9a-f]+\): rdma_resolve_route is not '
                             r'valid in state "idle" \(rdma_cm\(7\)\)'),
    'connect unresolved': ("i = c.Id(ch)\ni.bind('127.0.0.1')\ncall('rdma_connect', i.ptr, None)",
                           errno.EINVAL, r'rdma_connect\(id 0x[0-9a-f]+\): rdma_connect is not '
                           r'valid in state "bound" \(rdma_cm\(7\)\)'),
    'accept without request': ("i = c.Id(ch)\ncall('rdma_accept', i.ptr, None)", errno.EINVAL,
                               r'rdma_accept\(id 0x[0-9a-f]+\): rdma_accept is not valid in '
                               r'state "idle" \(rdma_cm\(7\)\)'),
    'bind twice': ("i = c.Id(ch)\ni.bind('127.0.0.1')\n"
                   "call('rdma_bind_addr', i.ptr, c.sockaddr('127.0.0.1'))", errno.EINVAL,
                   r'rdma_bind_addr\(id 0x[0-9a-f]+\): rdma_bind_addr is not valid in state '
                   r'"bound" \(rdma_cm\(7\)\)'),
    'bind foreign address': ("i = c.Id(ch)\ncall('rdma_bind_addr', i.ptr, c.sockaddr('198.51.100.7'))",
                             errno.EADDRNOTAVAIL,
                             r'rdma_bind_addr\(id 0x[0-9a-f]+\): 198\.51\.100\.7 is not an '
                             r'address of this host'),
    'create qp unbound': ("i = c.Id(ch)\nattr = c.QpInitAttr(qp_type=2)\n"
                          "call('rdma_create_qp', i.ptr, None, ctypes.byref(attr))", errno.EINVAL,
                          r'rdma_create_qp\(id 0x[0-9a-f]+\): the identifier is not bound to a '
                          r'device.*'),
    'ack foreign event': ("buf = ctypes.create_string_buffer(80)\ncall('rdma_ack_cm_event', buf)",
                          errno.EINVAL, r'rdma_ack_cm_event: event was not returned by '
                          r'rdma_get_cm_event or is acked'),
    'join a unicast address': ("i = c.Id(ch, c.RDMA_PS_UDP)\ni.bind('127.0.0.1')\n"
                               "call('rdma_join_multicast', i.ptr, c.sockaddr('127.0.0.1'), None)",
                               errno.EINVAL, r'rdma_join_multicast\(id 0x[0-9a-f]+\): the address '
                               r'is not an IPv4 or IPv6 multicast address'),
    'leave a group not joined': ("i = c.Id(ch, c.RDMA_PS_UDP)\ni.bind('127.0.0.1')\n"
                                 "call('rdma_leave_multicast', i.ptr, c.sockaddr('239.1.2.3'))",
                                 errno.EADDRNOTAVAIL, r'rdma_leave_multicast\(id 0x[0-9a-f]+\): '
                                 r'239\.1\.2\.3 was not joined by this identifier'),
}


class RefusalTest(unittest.TestCase):

    def test_each_refusal_has_its_errno_and_one_log_line(self):
        for name, (code, err, pattern) in CASES.items():
            with self.subTest(case=name):
                r = base.run_python(PRELUDE + code + '\n', SOFTVERBS_LOG='error')
                self.assertEqual(r.returncode, 0, r.stderr)
                last = r.stdout.strip().splitlines()[-1].split()
                self.assertEqual((last[1], int(last[2])), ('-1', err), r.stdout)
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, f'expected one line, got {r.stderr!r}')
                pid = r.stdout.split('pid ')[1].split()[0]
                self.assertRegex(lines[0], rf'^softverbs\[{pid}\] error: {pattern}$')

    def test_no_log_line_without_softverbs_log(self):
        code, _, _ = CASES['route before address']
        r = base.run_python(PRELUDE + code + '\n')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, '')


if __name__ == '__main__':
    unittest.main()
