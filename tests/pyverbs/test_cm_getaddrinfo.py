"""rdma_getaddrinfo(3) and rdma_freeaddrinfo as rdma-core behaves, where libfabric's verbs
provider depends on it: neither node nor service resolves the hints' own addresses, and
rdma_freeaddrinfo frees any list of malloc'd entries (libfabric builds some itself)."""
import ctypes
import socket
import unittest

import base

import cm_ctypes as c  # noqa: E402

tearDownModule = base.tear_down_module
P = ctypes.c_void_p
RAI_PASSIVE = 1


class RdmaAddrinfo(ctypes.Structure):
    pass


RdmaAddrinfo._fields_ = [
    ('ai_flags', ctypes.c_int), ('ai_family', ctypes.c_int), ('ai_qp_type', ctypes.c_int),
    ('ai_port_space', ctypes.c_int), ('ai_src_len', ctypes.c_uint32), ('ai_dst_len', ctypes.c_uint32),
    ('ai_src_addr', P), ('ai_dst_addr', P), ('ai_src_canonname', P), ('ai_dst_canonname', P),
    ('ai_route_len', ctypes.c_size_t), ('ai_route', P), ('ai_connect_len', ctypes.c_size_t),
    ('ai_connect', P), ('ai_next', ctypes.POINTER(RdmaAddrinfo))]

getaddrinfo = c.cm.rdma_getaddrinfo
getaddrinfo.restype = ctypes.c_int
getaddrinfo.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(RdmaAddrinfo),
                        ctypes.POINTER(ctypes.POINTER(RdmaAddrinfo))]
freeaddrinfo = c.cm.rdma_freeaddrinfo
freeaddrinfo.restype = None
freeaddrinfo.argtypes = [ctypes.POINTER(RdmaAddrinfo)]
libc = ctypes.CDLL(None)
libc.calloc.restype = P
libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]


def address(ptr, length):
    return c.address_of(ctypes.string_at(ptr, length) + bytes(128 - length))


class HintsOnly(unittest.TestCase):
    def test_destination_from_hints(self):
        dst = c.sockaddr('127.0.0.1', 4791)
        hints = RdmaAddrinfo(ai_family=socket.AF_INET, ai_port_space=c.RDMA_PS_TCP,
                             ai_dst_addr=ctypes.cast(dst, P).value, ai_dst_len=16)
        res = ctypes.POINTER(RdmaAddrinfo)()
        c.check(getaddrinfo(None, None, ctypes.byref(hints), ctypes.byref(res)), 'rdma_getaddrinfo')
        r = res.contents
        self.assertEqual(address(r.ai_dst_addr, r.ai_dst_len), ('127.0.0.1', 4791))
        self.assertEqual(r.ai_port_space, c.RDMA_PS_TCP)
        self.assertTrue(r.ai_src_addr, 'an active result carries its source address')
        self.assertEqual(address(r.ai_src_addr, r.ai_src_len)[0], '127.0.0.1')
        self.assertFalse(r.ai_next)
        freeaddrinfo(res)

    def test_passive_source_from_hints(self):
        src = c.sockaddr('127.0.0.1', 7000)
        hints = RdmaAddrinfo(ai_flags=RAI_PASSIVE, ai_family=socket.AF_INET,
                             ai_src_addr=ctypes.cast(src, P).value, ai_src_len=16)
        res = ctypes.POINTER(RdmaAddrinfo)()
        c.check(getaddrinfo(None, None, ctypes.byref(hints), ctypes.byref(res)), 'rdma_getaddrinfo')
        self.assertEqual(address(res.contents.ai_src_addr, res.contents.ai_src_len), ('127.0.0.1', 7000))
        self.assertFalse(res.contents.ai_dst_addr)
        freeaddrinfo(res)

    def test_nothing_at_all_is_einval(self):
        res = ctypes.POINTER(RdmaAddrinfo)()
        self.assertEqual(getaddrinfo(None, None, None, ctypes.byref(res)), -1)
        self.assertEqual(ctypes.get_errno(), 22)


class FreeAnyList(unittest.TestCase):
    def test_frees_a_list_the_caller_allocated(self):
        # As libfabric's vrb_alloc_ib_addrinfo does: calloc'd entry and address, freed by
        # rdma_freeaddrinfo (a wrong free would crash this process).
        entry = libc.calloc(1, ctypes.sizeof(RdmaAddrinfo))
        ai = RdmaAddrinfo.from_address(entry)
        ai.ai_src_addr = libc.calloc(1, 28)
        ai.ai_src_len = 28
        freeaddrinfo(ctypes.cast(entry, ctypes.POINTER(RdmaAddrinfo)))

    def test_null_is_a_no_op(self):
        freeaddrinfo(None)


if __name__ == '__main__':
    unittest.main()
