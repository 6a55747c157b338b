"""Issue 17 item 10: another user can neither intercept nor block this user's CM connections.
The CM's abstract AF_UNIX names are global in the network namespace and computable by anyone
(docs/cm.md, "Other users"); a second user (uid 65534, so root only) binds them first."""
import os
import subprocess
import sys
import textwrap
import unittest

import base
import cm_ctypes as c
from test_cm_events import CmTestCase, readable

tearDownModule = base.tear_down_module
NOBODY = 65534

# The squatter: binds (and, when LISTEN, listens on) the given abstract name, says 'ready', then
# says whether anything connected to it within the time it is given ('accepted' / 'none').
SQUATTER = textwrap.dedent('''
    import select, socket, sys
    name, listen = sys.argv[1], sys.argv[2] == '1'
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind('\\0' + name)
    if listen:
        s.listen(8)
    print('ready', flush=True)
    sys.stdin.readline()  # the test is done
    r, _, _ = select.select([s], [], [], 0)
    print('accepted' if r and listen else 'none', flush=True)
''')


def cm_name(key, port):
    return f'softverbs-cm-{os.getuid()}-{base.HOST}-{key}-{port}'


@unittest.skipUnless(os.getuid() == 0, 'needs root to run a second user (setresuid to 65534)')
class OtherUserTest(CmTestCase):

    def squat(self, key, port, listen=True):
        proc = subprocess.Popen([sys.executable, '-c', SQUATTER, cm_name(key, port), '1' if listen else '0'],
                                user=NOBODY, group=NOBODY, extra_groups=[], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, bufsize=0)
        self.addCleanup(base.stop_child, proc)
        reader = base.LineReader(proc)
        self.addCleanup(reader.close)
        self.assertEqual(reader.readline(10), 'ready')
        return proc, reader

    def squatter_saw(self, squatter):
        proc, reader = squatter
        proc.stdin.write(b'done\n')
        return reader.readline(10)

    def bounded_expect(self, ch, kind, timeout=10):
        # A client that reached the squatter gets REJECTED and the listener nothing: no hang.
        self.assertTrue(readable(ch.fd, timeout), f'no {kind} within {timeout} s')
        return self.expect(ch, kind)

    def establish(self, sch, cch, cli):
        cli.create_qp()
        cli.connect()
        if readable(cch.fd, 0.5):
            self.fail(f'the client got {cch.get()} before any CONNECT_REQUEST')
        req = self.bounded_expect(sch, 'CONNECT_REQUEST')
        child = self.adopt(sch, req.id)
        child.create_qp()
        child.accept()
        self.bounded_expect(cch, 'ESTABLISHED')
        self.bounded_expect(sch, 'ESTABLISHED')

    def test_a_squatted_listener_name_neither_blocks_the_listener_nor_gets_its_clients(self):
        port = c.free_port()
        squatter = self.squat('127.0.0.1', port)
        sch = self.channel()
        srv = self.new_id(sch)
        srv.bind('127.0.0.1', port)  # would fail with EADDRINUSE if the squatter could block it
        srv.listen()
        cch, cli = self.resolved_client('127.0.0.1', port)
        self.establish(sch, cch, cli)
        self.assertEqual(self.squatter_saw(squatter), 'none')

    def test_a_squatted_exact_name_does_not_hide_the_wildcard_listener(self):
        port = c.free_port()
        sch = self.channel()
        srv = self.new_id(sch)
        srv.bind('0.0.0.0', port)
        srv.listen()
        squatter = self.squat('127.0.0.1', port)  # the name a client tries first
        cch, cli = self.resolved_client('127.0.0.1', port)
        self.establish(sch, cch, cli)
        self.assertEqual(self.squatter_saw(squatter), 'none')

    def test_a_bound_but_silent_squatter_does_not_hold_the_port(self):
        port = c.free_port()
        self.squat('any4', port, listen=False)
        sch = self.channel()
        srv = self.new_id(sch)
        srv.bind('0.0.0.0', port)
        srv.listen()
        cch, cli = self.resolved_client('127.0.0.1', port)
        self.establish(sch, cch, cli)

    def test_the_port_stays_exclusive_among_this_users_identifiers(self):
        port = c.free_port()
        self.squat('127.0.0.1', port)
        first = self.new_id(self.channel())
        first.bind('127.0.0.1', port)
        second = self.new_id(self.channel())
        with self.assertRaises(c.CmError) as cm:
            second.bind('127.0.0.1', port)
        self.assertEqual(cm.exception.errno, 98)  # EADDRINUSE, as bind(2)


if __name__ == '__main__':
    unittest.main()
