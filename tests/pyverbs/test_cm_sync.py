"""The synchronous mode (rdma_create_id(3) with a NULL channel, rdma_create_ep(3),
rdma_get_request(3)) and the rdma_verbs.h helpers, through pyverbs.cmid as rdma-core's own tests
drive them: a server process and a client, a message each way, then a disconnect."""
import textwrap
import unittest

import base

import pyverbs.cm_enums as ce  # noqa: E402
import pyverbs.cmid as cmid  # noqa: E402
from pyverbs.qp import QPCap, QPInitAttr  # noqa: E402

tearDownModule = base.tear_down_module

SERVER = textwrap.dedent('''
    import sys
    import pyverbs.cm_enums as ce, pyverbs.cmid as cmid
    from pyverbs.qp import QPCap, QPInitAttr
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    ai = cmid.AddrInfo(src='127.0.0.1', src_service=PORT, port_space=ce.RDMA_PS_TCP,
                       flags=ce.RAI_PASSIVE)
    listen_id = cmid.CMID(creator=ai, qp_init_attr=QPInitAttr(cap=cap))
    listen_id.listen()
    print('listening', flush=True)
    conn = listen_id.get_request()      # the new id comes with the rdma_create_ep QP
    mr = conn.reg_msgs(64)
    conn.post_recv(mr, 64)
    conn.accept()                       # waits for ESTABLISHED
    wc = conn.get_recv_comp()
    print('got', mr.read(wc.byte_len, 0).decode(), flush=True)
    mr.write(b'pong', 4)
    conn.post_send(mr, 0, 4)
    conn.get_send_comp()
    sys.stdin.readline()                # the client disconnects first
    conn.disconnect()
    conn.close()
    listen_id.close()
    print('done', flush=True)
''')


class SyncModeTest(unittest.TestCase):

    def test_request_accept_send_and_disconnect(self):
        import random
        port = str(random.randint(20000, 30000))
        proc = base.start_python(f'PORT = {port!r}\n' + SERVER)
        self.addCleanup(base.stop_child, proc)
        reader = base.LineReader(proc)
        self.addCleanup(reader.close)
        self.assertEqual(reader.readline(), 'listening')
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        ai = cmid.AddrInfo(src='127.0.0.1', dst='127.0.0.1', dst_service=port,
                           port_space=ce.RDMA_PS_TCP)
        cid = cmid.CMID(creator=ai, qp_init_attr=QPInitAttr(cap=cap))
        mr = cid.reg_msgs(64)
        cid.post_recv(mr, 64)
        cid.connect()                   # synchronous: returns once ESTABLISHED
        mr.write(b'ping', 4)
        cid.post_send(mr, 0, 4)
        cid.get_send_comp()
        self.assertEqual(reader.readline(), 'got ping')
        wc = cid.get_recv_comp()
        self.assertEqual(mr.read(wc.byte_len, 0), b'pong')
        cid.disconnect()                # waits for DISCONNECTED (the server's DREP)
        proc.stdin.write(b'\n')
        proc.stdin.flush()
        self.assertEqual(reader.readline(), 'done')
        cid.close()
        self.assertEqual(proc.wait(10), 0)


if __name__ == '__main__':
    unittest.main()
