"""ibv_resolve_eth_l2_from_gid(3) against a real neighbour (issue 13): run by test_resolve_l2.py
inside a user + network namespace of its own (`unshare -rn`). Not collected on its own.

The pair: `sva` (10.67.0.1, fd67::1) here and its veth peer `svb` (10.67.0.2, fd67::2) in a
second network namespace, held by a `unshare -n sleep` child (killed by PID at the end), so that
svb is a neighbour that answers ARP / ND and not an address of this host. ARP retries every 100 ms on sva, so
an address nobody holds fails in a fraction of a second (the library's own bound is 3 s).
"""
import ctypes
import os
import re
import socket
import subprocess
import time
import unittest

import base  # environment first

os.environ['SOFTVERBS_LOG'] = 'error'
os.environ['SOFTVERBS_LOG_FILE'] = os.environ['RAW_CASES_LOG_FILE']
import raw  # noqa: E402
from cm_ctypes import AhAttr, Gid  # noqa: E402

EINVAL, EHOSTUNREACH = 22, 113
IP_A, IP_B, IP_NOBODY = '10.67.0.1', '10.67.0.2', '10.67.0.99'
IP6_A, IP6_B = 'fd67::1', 'fd67::2'
lib = raw.lib
lib.ibv_resolve_eth_l2_from_gid.restype = ctypes.c_int
lib.ibv_resolve_eth_l2_from_gid.argtypes = [ctypes.c_void_p, ctypes.POINTER(AhAttr), ctypes.c_char_p,
                                            ctypes.POINTER(ctypes.c_uint16)]
lib.ibv_query_gid.restype = ctypes.c_int
lib.ibv_query_gid.argtypes = [ctypes.c_void_p, ctypes.c_uint8, ctypes.c_int, ctypes.POINTER(Gid)]


def sh(*cmd, peer=None):
    if peer is not None:
        cmd = ('nsenter', '-t', str(peer.pid), '-n', '--preserve-credentials') + cmd
    return subprocess.run(cmd, check=True, timeout=10, capture_output=True, text=True).stdout


def v4_gid(ip):
    return bytes(10) + b'\xff\xff' + bytes(map(int, ip.split('.')))


def mac_of(ifname, peer=None):
    return bytes.fromhex(re.search(r'link/ether ([0-9a-f:]{17})', sh('ip', 'link', 'show', 'dev', ifname, peer=peer))
                         .group(1).replace(':', ''))


class ResolveL2Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.peer = subprocess.Popen(['unshare', '-n', 'sleep', '60'])
        time.sleep(0.2)
        sh('ip', 'link', 'set', 'lo', 'up')
        sh('ip', 'link', 'add', 'sva', 'type', 'veth', 'peer', 'name', 'svb')
        sh('ip', 'link', 'set', 'svb', 'netns', str(cls.peer.pid))
        sh('ip', 'addr', 'add', IP_A + '/24', 'dev', 'sva')
        sh('ip', 'link', 'set', 'sva', 'up')
        sh('ip', 'addr', 'add', IP_B + '/24', 'dev', 'svb', peer=cls.peer)
        sh('ip', 'link', 'set', 'svb', 'up', peer=cls.peer)
        sh('ip', 'addr', 'add', IP6_A + '/64', 'dev', 'sva', 'nodad')
        sh('ip', 'addr', 'add', IP6_B + '/64', 'dev', 'svb', 'nodad', peer=cls.peer)
        with open('/proc/sys/net/ipv4/neigh/sva/retrans_time_ms', 'w') as f:
            f.write('100')
        cls.ctx = raw.RawContext()
        cls.sgid_index = cls.gid_index(v4_gid(IP_A))

    @classmethod
    def tearDownClass(cls):
        cls.ctx.close()
        cls.peer.kill()
        cls.peer.wait()

    @classmethod
    def gid_index(cls, raw_gid):
        for i in range(64):
            g = Gid()
            if lib.ibv_query_gid(cls.ctx.ctx, 1, i, ctypes.byref(g)) == 0 and bytes(g) == raw_gid:
                return i
        raise AssertionError('GID not in the table')

    def resolve(self, dgid, sgid_index=None, is_global=1):
        attr = AhAttr(is_global=is_global, port_num=1)
        ctypes.memmove(ctypes.addressof(attr.grh.dgid), dgid, 16)
        attr.grh.sgid_index = self.sgid_index if sgid_index is None else sgid_index
        mac, vid = ctypes.create_string_buffer(6), ctypes.c_uint16(0x1234)
        ctypes.set_errno(0)
        rc = lib.ibv_resolve_eth_l2_from_gid(self.ctx.ctx, ctypes.byref(attr), mac, ctypes.byref(vid))
        return rc, mac.raw, vid.value, ctypes.get_errno()

    def test_neighbour_mac_is_the_peers(self):
        start = time.monotonic()
        rc, mac, vid, _ = self.resolve(v4_gid(IP_B))
        self.assertEqual(rc, 0)
        self.assertEqual(mac, mac_of('svb', self.peer))
        self.assertEqual(vid, 0xffff)  # sva has no VLAN
        self.assertLess(time.monotonic() - start, 3)
        self.assertEqual(self.resolve(v4_gid(IP_B))[:3], (0, mac, 0xffff))  # now from the table

    def test_ipv6_neighbour_and_link_local(self):
        sgid6 = self.gid_index(socket.inet_pton(socket.AF_INET6, IP6_A))
        peer_mac = mac_of('svb', self.peer)
        self.assertEqual(self.resolve(socket.inet_pton(socket.AF_INET6, IP6_B), sgid6)[:3], (0, peer_mac, 0xffff))
        # svb's link-local address (modified EUI-64 of its MAC) gives its MAC without asking.
        eui = bytes([peer_mac[0] ^ 2]) + peer_mac[1:3] + b'\xff\xfe' + peer_mac[3:]
        self.assertEqual(self.resolve(bytes.fromhex('fe800000000000000000000000000000')[:8] + eui, sgid6)[:2],
                         (0, peer_mac))

    def test_local_gid_is_the_interfaces_own_mac(self):
        self.assertEqual(self.resolve(v4_gid(IP_A))[:2], (0, mac_of('sva')))

    def test_multicast_needs_no_neighbour(self):
        self.assertEqual(self.resolve(v4_gid('239.1.2.3'))[:2], (0, bytes.fromhex('01005e010203')))
        self.assertEqual(self.resolve(bytes.fromhex('ff020000000000000000000000000001'))[:2],
                         (0, bytes.fromhex('333300000001')))

    def test_unreachable_address_fails_in_bounded_time(self):
        start = time.monotonic()
        rc = self.resolve(v4_gid(IP_NOBODY))[0]
        self.assertEqual(rc, -EHOSTUNREACH)
        self.assertLess(time.monotonic() - start, 3.5)
        self.assertIn('ibv_resolve_eth_l2_from_gid(sgid_index', raw_log())
        self.assertEqual(self.resolve(v4_gid('192.0.2.1'))[0], -EHOSTUNREACH)  # no route at all

    def test_bad_input(self):
        # libibverbs reads the GRH whatever is_global says: the same answer (never stricter).
        self.assertEqual(self.resolve(v4_gid(IP_B), is_global=0)[:3], (0, mac_of('svb', self.peer), 0xffff))
        rc, _, _, err = self.resolve(v4_gid(IP_B), sgid_index=200)  # ibv_query_gid's -1 and errno
        self.assertEqual((rc, err), (-1, EINVAL))
        self.assertIn('outside the GID table', raw_log())
        # GID 0 is the device's own link-local GID: no interface of the namespace holds it.
        self.assertEqual(self.resolve(v4_gid(IP_B), sgid_index=0)[0], -EINVAL)
        self.assertIn('no network interface holds the address of the source GID', raw_log())


def raw_log():
    with open(os.environ['RAW_CASES_LOG_FILE']) as f:
        return f.read()
