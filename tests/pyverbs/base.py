"""Shared set-up of the pyverbs-based tests of softverbs.

Import this module before pyverbs: it gives the test process (and every subprocess it starts) a
private host registry (SOFTVERBS_HOST=pyverbs-tests-<pid>), so the tests neither see nor disturb
the QP numbers and keys of other softverbs programs of the user.

Run the suite with our libraries first on the loader path:
    cd tests/pyverbs && LD_LIBRARY_PATH=<build>/lib /usr/bin/python3 -m unittest -v
The build directory defaults to <repo>/build/lib; SOFTVERBS_BUILD_LIB overrides it.
"""
import atexit
import ctypes
import errno
import glob
import ipaddress
import os
import re
import selectors
import subprocess
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))
BUILD_LIB = os.path.realpath(os.environ.get('SOFTVERBS_BUILD_LIB', os.path.join(REPO, 'build', 'lib')))
PYTHON = '/usr/bin/python3'  # the interpreter python3-pyverbs is installed for

HOST_PREFIX = 'pyverbs-tests-'
if not os.environ.get('SOFTVERBS_HOST', '').startswith(HOST_PREFIX):
    os.environ['SOFTVERBS_HOST'] = f'{HOST_PREFIX}{os.getpid()}'
HOST = os.environ['SOFTVERBS_HOST']

# Library logging is a per-test decision (test_refusals_log); a user's setting must not leak in.
for _var in ('SOFTVERBS_LOG', 'SOFTVERBS_LOG_FILE'):
    os.environ.pop(_var, None)

import pyverbs.enums as e  # noqa: E402  (after SOFTVERBS_HOST is set)
from pyverbs.addr import AH, AHAttr, GlobalRoute  # noqa: E402
from pyverbs.cq import CQ, CompChannel  # noqa: E402
from pyverbs.device import Context, get_device_list  # noqa: E402
from pyverbs.mr import MR  # noqa: E402
from pyverbs.pd import PD  # noqa: E402
from pyverbs.pyverbs_error import PyverbsRDMAError  # noqa: E402
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr, QPInitAttrEx  # noqa: E402
from pyverbs.wr import SGE, RecvWR, SendWR  # noqa: E402


def expected_active_mtu():
    """The ibv_mtu softverbs0's port reports in this network namespace, by rxe's rule
    (core::ActiveMtu): the smallest MTU among the up, non-loopback interfaces holding an IPv4 or
    global IPv6 address, less 80 bytes, rounded down to an IB MTU; 4096 if there is none."""
    import json
    links = json.loads(subprocess.run(['ip', '-j', 'addr', 'show', 'up'], capture_output=True, text=True,
                                      check=True).stdout)
    smallest = 4096 + 80
    for link in links:
        if 'LOOPBACK' in link.get('flags', []):
            continue
        if any(a['family'] == 'inet' or (a['family'] == 'inet6' and a.get('scope') == 'global')
               for a in link.get('addr_info', [])):
            smallest = min(smallest, link['mtu'])
    for size, mtu in ((4096, e.IBV_MTU_4096), (2048, e.IBV_MTU_2048), (1024, e.IBV_MTU_1024),
                      (512, e.IBV_MTU_512)):
        if smallest >= size + 80:
            return mtu
    return e.IBV_MTU_256

DEV_NAME = 'softverbs0'
PORT = 1

# The limits softverbs0 documents (ibv_query_device).
MAX_QP_WR = 32768
MAX_SGE = 32
MAX_INLINE = 1024
MAX_CQE = 1048575
MAX_RD_ATOM = 16

# Every attribute ibv_query_qp can report.
QUERY_ALL = (e.IBV_QP_STATE | e.IBV_QP_CUR_STATE | e.IBV_QP_EN_SQD_ASYNC_NOTIFY |
             e.IBV_QP_ACCESS_FLAGS | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY |
             e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
             e.IBV_QP_RNR_RETRY | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_ALT_PATH |
             e.IBV_QP_MIN_RNR_TIMER | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC |
             e.IBV_QP_PATH_MIG_STATE | e.IBV_QP_CAP | e.IBV_QP_DEST_QPN)

QPT_NAMES = {e.IBV_QPT_RC: 'RC', e.IBV_QPT_UC: 'UC', e.IBV_QPT_UD: 'UD'}
STATE_NAMES = {e.IBV_QPS_RESET: 'RESET', e.IBV_QPS_INIT: 'INIT', e.IBV_QPS_RTR: 'RTR',
               e.IBV_QPS_RTS: 'RTS', e.IBV_QPS_SQD: 'SQD', e.IBV_QPS_SQE: 'SQE',
               e.IBV_QPS_ERR: 'ERR'}

# The two QP creation verbs under test. pyverbs calls ibv_create_qp for QP(pd, QPInitAttr) and
# ibv_create_qp_ex for QP(ctx, QPInitAttrEx).
CREATE_QP = 'ibv_create_qp'
CREATE_QP_EX = 'ibv_create_qp_ex'
CREATE_CALLS = (CREATE_QP, CREATE_QP_EX)
# verbs.h's inline ibv_create_qp_ex() forwards comp_mask == IBV_QP_INIT_ATTR_PD to ibv_create_qp;
# an explicit (empty) CREATE_FLAGS bit makes it reach the provider's create_qp_ex op.
EX_MASK = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS


def open_context():
    """Opens softverbs0, explaining the usual reason when it is missing."""
    try:
        names = [d.name.decode() for d in get_device_list()]
    except PyverbsRDMAError:
        names = []  # rdma-core's own library raises when no RDMA device exists
    if DEV_NAME not in names:
        raise AssertionError(f'{DEV_NAME} not found (devices: {names}); run with '
                             f'LD_LIBRARY_PATH={BUILD_LIB}')
    return Context(name=DEV_NAME)


def gid_address(gid):
    """A pyverbs GID (or its string form) as an ipaddress.IPv6Address."""
    text = gid if isinstance(gid, str) else gid.gid
    return ipaddress.IPv6Address(bytes.fromhex(text.replace(':', '')))


def global_route(ctx, sgid_index=1, dgid_index=1):
    """A GRH naming the GID at `dgid_index` (by default 127.0.0.1's) from `sgid_index`."""
    return GlobalRoute(dgid=ctx.query_gid(PORT, dgid_index), sgid_index=sgid_index, hop_limit=64)


def global_ah_attr(ctx, sgid_index=1, dgid_index=1, port_num=PORT):
    return AHAttr(port_num=port_num, is_global=1, gr=global_route(ctx, sgid_index, dgid_index))


def default_cap(**kw):
    values = dict(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=2, max_inline_data=0)
    values.update(kw)
    return QPCap(**values)


def init_attr(qpt, cq, srq=None, cap=None, sq_sig_all=0):
    return QPInitAttr(qp_type=qpt, scq=cq, rcq=cq, srq=srq, cap=cap or default_cap(),
                      sq_sig_all=sq_sig_all)


def init_attr_ex(qpt, cq, pd, srq=None, cap=None, sq_sig_all=0, comp_mask=EX_MASK, **kw):
    return QPInitAttrEx(qp_type=qpt, scq=cq, rcq=cq, srq=srq, cap=cap or default_cap(),
                        sq_sig_all=sq_sig_all, comp_mask=comp_mask, pd=pd, **kw)


def create_qp(call, ctx, pd, cq, qpt, srq=None, cap=None, sq_sig_all=0, **ex_kw):
    """Creates a QP through `call` (CREATE_QP or CREATE_QP_EX). Returns (qp, init_attr)."""
    if call == CREATE_QP:
        assert not ex_kw, ex_kw
        attr = init_attr(qpt, cq, srq, cap, sq_sig_all)
        return QP(pd, attr), attr
    attr = init_attr_ex(qpt, cq, pd, srq, cap, sq_sig_all, **ex_kw)
    return QP(ctx, attr), attr


def qp_snapshot(qp):
    """Every attribute ibv_query_qp reports, as a dict (comparable before/after a refusal)."""
    a, i = qp.query(QUERY_ALL)
    ah = a.ah_attr
    return {
        'qp_state': a.qp_state, 'cur_qp_state': a.cur_qp_state, 'path_mtu': a.path_mtu,
        'path_mig_state': a.path_mig_state, 'qkey': a.qkey, 'rq_psn': a.rq_psn,
        'sq_psn': a.sq_psn, 'dest_qp_num': a.dest_qp_num, 'qp_access_flags': a.qp_access_flags,
        'pkey_index': a.pkey_index, 'port_num': a.port_num, 'timeout': a.timeout,
        'retry_cnt': a.retry_cnt, 'rnr_retry': a.rnr_retry, 'min_rnr_timer': a.min_rnr_timer,
        'max_rd_atomic': a.max_rd_atomic, 'max_dest_rd_atomic': a.max_dest_rd_atomic,
        'en_sqd_async_notify': a.en_sqd_async_notify, 'rate_limit': a.rate_limit,
        'ah.is_global': ah.is_global, 'ah.port_num': ah.port_num, 'ah.sgid_index': ah.sgid_index,
        'ah.dgid': ah.dgid, 'ah.hop_limit': ah.hop_limit, 'ah.sl': ah.sl,
        'ah.static_rate': ah.static_rate,
        'cap': (i.max_send_wr, i.max_recv_wr, i.max_send_sge, i.max_recv_sge, i.max_inline_data),
        'sq_sig_all': i.sq_sig_all, 'qp_type': i.qp_type,
    }


class SoftverbsTestCase(unittest.TestCase):
    """A context, a PD and a CQ on softverbs0 for every test."""

    def setUp(self):
        self.ctx = open_context()
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256, None, None, 0)

    def tearDown(self):
        # pyverbs closes the objects of the context first, in dependency order.
        self.ctx.close()

    def assertRDMAError(self, code, fn, *args, **kwargs):
        """fn(*args, **kwargs) must fail with PyverbsRDMAError carrying errno `code`.

        pyverbs reports the verb's own return value: a negative errno for the verbs of the
        negative convention, so the sign is ignored.
        """
        with self.assertRaises(PyverbsRDMAError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(abs(cm.exception.error_code), code,
                         f'expected {errno.errorcode.get(code, code)}, got: {cm.exception}')
        return cm.exception


# --- data path ----------------------------------------------------------------------------------

ACCESS_ALL = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
              e.IBV_ACCESS_REMOTE_ATOMIC)
QKEY = 0x1a2b3c4d
GRH_LEN = 40         # every UD receive buffer starts with the 40-byte GRH area
UD_MAX_MSG = 4096    # a UD message is one packet of at most the port MTU
POLL_TIMEOUT = 5.0   # a bound on any completion a test waits for (never a timing assertion)

WC_STATUS_NAMES = {getattr(e, n): n for n in dir(e)
                   if n.startswith('IBV_WC_') and (n.endswith('_ERR') or n == 'IBV_WC_SUCCESS')}


def connect_qp(ctx, qp, remote_qpn=0, access=ACCESS_ALL, qkey=QKEY, path_mtu=e.IBV_MTU_4096,
               timeout=14, retry_cnt=7, rnr_retry=7, min_rnr_timer=1, sgid_index=1, dgid_index=1,
               to=e.IBV_QPS_RTS):
    """Walks `qp` from RESET up to `to` (INIT, RTR or RTS) with the attributes ibv_modify_qp(3)
    requires for its type; an RC/UC QP is connected to `remote_qpn` through the GID at
    `dgid_index`."""
    qpt = qp.qp_type
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index = 0
    a.port_num = PORT
    mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
    if qpt == e.IBV_QPT_UD:
        a.qkey = qkey
        mask |= e.IBV_QP_QKEY
    else:
        a.qp_access_flags = access
        mask |= e.IBV_QP_ACCESS_FLAGS
    qp.modify(a, mask)
    if to == e.IBV_QPS_INIT:
        return qp

    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    mask = e.IBV_QP_STATE
    if qpt != e.IBV_QPT_UD:
        a.ah_attr = global_ah_attr(ctx, sgid_index, dgid_index)
        a.path_mtu = path_mtu
        a.dest_qp_num = remote_qpn
        a.rq_psn = 0
        mask |= e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
    if qpt == e.IBV_QPT_RC:
        a.max_dest_rd_atomic = MAX_RD_ATOM
        a.min_rnr_timer = min_rnr_timer
        mask |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
    qp.modify(a, mask)
    if to == e.IBV_QPS_RTR:
        return qp

    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.sq_psn = 0
    mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
    if qpt == e.IBV_QPT_RC:
        a.max_rd_atomic = MAX_RD_ATOM
        a.timeout = timeout
        a.retry_cnt = retry_cnt
        a.rnr_retry = rnr_retry
        mask |= (e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
                 e.IBV_QP_RNR_RETRY)
    qp.modify(a, mask)
    return qp


class Peer:
    """One end of a conversation: a QP with a CQ of its own, so the completions of the two ends
    stay apart."""

    def __init__(self, ctx, pd, qpt, cap=None, sq_sig_all=0, srq=None, channel=None, cqe=256,
                 cq=None):
        self.ctx, self.pd, self.qpt = ctx, pd, qpt
        self.cq = cq or CQ(ctx, cqe, None, channel, 0)
        cap = cap or default_cap(max_send_wr=128, max_recv_wr=128, max_send_sge=4, max_recv_sge=4)
        self.qp = QP(pd, init_attr(qpt, self.cq, srq, cap, sq_sig_all))
        self.qpn = self.qp.qp_num

    def connect(self, remote_qpn=0, **attrs):
        connect_qp(self.ctx, self.qp, remote_qpn, **attrs)
        return self

    def ah(self, sgid_index=1, dgid_index=1):
        """An address handle for UD sends (to this host's GID at `dgid_index`)."""
        return AH(self.pd, attr=global_ah_attr(self.ctx, sgid_index, dgid_index))

    def post_send(self, wr):
        self.qp.post_send(wr)

    def post_recv(self, *sges, wr_id=0):
        self.qp.post_recv(recv_wr(sges, wr_id))

    def poll(self, n=1, timeout=POLL_TIMEOUT):
        return poll(self.cq, n, timeout)

    def drain(self, wait=0.05):
        return drain(self.cq, wait)


def stop_retries(*peers):
    """Moves QPs whose WRs still wait for an RNR or transport retry to ERR, flushing those WRs,
    so a test ends without retries in flight (destroying them directly is covered on its own by
    test_data_errors.DestroyTest)."""
    for p in peers:
        p.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)


def connected_pair(ctx, pd, qpt, b_ctx=None, b_pd=None, a_attrs=None, b_attrs=None, **kw):
    """Two Peers of type `qpt` (the second one on b_ctx/b_pd if given) connected to each other
    (UD: both in RTS with QKEY). `kw` goes to both Peers, a_attrs/b_attrs to connect_qp."""
    a = Peer(ctx, pd, qpt, **kw)
    b = Peer(b_ctx or ctx, b_pd or pd, qpt, **kw)
    a.connect(b.qpn, **(a_attrs or {}))
    b.connect(a.qpn, **(b_attrs or {}))
    return a, b


class Buffer:
    """A memory region registered in the middle of a larger buffer: GUARD bytes of GUARD_BYTE on
    each side show any write outside the region."""
    GUARD = 64
    GUARD_BYTE = 0xa5

    def __init__(self, pd, size, access=ACCESS_ALL, fill=0):
        self.size = size
        self.raw = ctypes.create_string_buffer(bytes([self.GUARD_BYTE]) * (2 * self.GUARD + size))
        self.addr = ctypes.addressof(self.raw) + self.GUARD
        ctypes.memset(self.addr, fill, size)
        self.mr = MR(pd, size, access, address=self.addr)
        self.lkey, self.rkey = self.mr.lkey, self.mr.rkey

    def read(self, offset=0, length=None):
        length = self.size - offset if length is None else length
        return ctypes.string_at(self.addr + offset, length)

    def write(self, data, offset=0):
        assert offset + len(data) <= self.size
        ctypes.memmove(self.addr + offset, bytes(data), len(data))

    def sge(self, offset=0, length=None, lkey=None):
        return SGE(self.addr + offset, self.size - offset if length is None else length,
                   self.lkey if lkey is None else lkey)

    def snapshot(self):
        """Everything, guards included (compare before/after an operation that must not write)."""
        return self.raw.raw[:2 * self.GUARD + self.size]

    def guards_intact(self):
        s = self.snapshot()
        g = bytes([self.GUARD_BYTE]) * self.GUARD
        return s[:self.GUARD] == g and s[self.GUARD + self.size:] == g

    def u64(self, offset=0):
        return int.from_bytes(self.read(offset, 8), 'little')

    def set_u64(self, value, offset=0):
        self.write(value.to_bytes(8, 'little'), offset)


def send_wr(opcode=e.IBV_WR_SEND, sges=(), wr_id=0, imm_data=0, flags=e.IBV_SEND_SIGNALED,
            rdma=None, atomic=None, ud=None):
    """A SendWR. rdma=(rkey, remote_addr); atomic=(rkey, remote_addr, compare_add, swap);
    ud=(ah, remote_qpn, remote_qkey). No SGEs gives num_sge 0."""
    sges = list(sges)
    wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=max(1, len(sges)), imm_data=imm_data,
                sg=sges or [SGE(0, 0, 0)], send_flags=flags)
    if not sges:
        wr.num_sge = 0  # pyverbs insists on an SGE at construction
    if rdma:
        wr.set_wr_rdma(*rdma)
    if atomic:
        wr.set_wr_atomic(*atomic)
    if ud:
        wr.set_wr_ud(*ud)
    return wr


def recv_wr(sges, wr_id=0):
    sges = list(sges)
    wr = RecvWR(wr_id=wr_id, num_sge=max(1, len(sges)), sg=sges or [SGE(0, 0, 0)])
    if not sges:
        wr.num_sge = 0
    return wr


def wc_str(wc):
    return (f'<wc wr_id={wc.wr_id} status={WC_STATUS_NAMES.get(wc.status, wc.status)} '
            f'opcode={wc.opcode} byte_len={wc.byte_len} qp_num={wc.qp_num} src_qp={wc.src_qp} '
            f'wc_flags={wc.wc_flags:#x} imm_data={wc.imm_data:#x}>')


def poll(cq, n=1, timeout=POLL_TIMEOUT):
    """The next `n` completions of `cq`; fails unless all of them arrive within `timeout` s."""
    wcs = []
    deadline = time.monotonic() + timeout
    while len(wcs) < n:
        k, got = cq.poll(n - len(wcs))
        if k > 0:
            wcs.extend(got[:k])
            continue
        if time.monotonic() > deadline:
            raise AssertionError(f'{len(wcs)} of {n} completions within {timeout} s: '
                                 f'{[wc_str(w) for w in wcs]}')
        time.sleep(0.0002)
    return wcs


def drain(cq, wait=0.05):
    """Every completion `cq` reports within `wait` s (to check that nothing arrives)."""
    wcs = []
    deadline = time.monotonic() + wait
    while True:
        k, got = cq.poll(16)
        wcs.extend(got[:k])
        if k == 0:
            if time.monotonic() > deadline:
                return wcs
            time.sleep(0.001)


def _eventfds():
    fds = set()
    for name in os.listdir('/proc/self/fd'):
        try:
            if os.readlink(f'/proc/self/fd/{name}') == 'anon_inode:[eventfd]':
                fds.add(int(name))
        except OSError:
            pass
    return fds


def comp_channel(ctx):
    """A CompChannel and its fd, which pyverbs does not expose: the eventfd the channel added."""
    before = _eventfds()
    ch = CompChannel(ctx)
    new = _eventfds() - before
    if len(new) != 1:
        raise AssertionError(f'ibv_create_comp_channel added eventfds {sorted(new)}, not one')
    return ch, new.pop()


class DataTestCase(SoftverbsTestCase):
    """SoftverbsTestCase with completion assertions."""

    def assertWC(self, wc, **expected):
        """The named fields of `wc` equal `expected` (status compared by name)."""
        got = {k: getattr(wc, k) for k in expected}
        if 'status' in expected:
            got['status'] = WC_STATUS_NAMES.get(got['status'], got['status'])
            expected = dict(expected, status=WC_STATUS_NAMES.get(expected['status'],
                                                                 expected['status']))
        self.assertEqual(got, expected, wc_str(wc))

    def assertNoCompletion(self, peer_or_cq, wait=0.05):
        cq = peer_or_cq.cq if isinstance(peer_or_cq, Peer) else peer_or_cq
        self.assertEqual([wc_str(w) for w in drain(cq, wait)], [])


# --- subprocesses -------------------------------------------------------------------------------

def child_env(**overrides):
    """The environment of a child test process: our libraries, this test run's host registry,
    and no logging unless asked for. A value of None removes the variable."""
    env = dict(os.environ)
    paths = [p for p in env.get('LD_LIBRARY_PATH', '').split(':') if p]
    if BUILD_LIB not in [os.path.realpath(p) for p in paths]:
        paths.insert(0, BUILD_LIB)
    env['LD_LIBRARY_PATH'] = ':'.join(paths)
    env['SOFTVERBS_HOST'] = HOST
    env.pop('SOFTVERBS_LOG', None)
    env.pop('SOFTVERBS_LOG_FILE', None)
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_python(code, timeout=30, **env_overrides):
    """Runs `code` in a fresh /usr/bin/python3 and returns the CompletedProcess (text)."""
    return subprocess.run([PYTHON, '-c', code], env=child_env(**env_overrides),
                          capture_output=True, text=True, timeout=timeout, cwd=HERE)


def refused_once(test, code, marker):
    """Runs `code` (which prints 'refused' when the call it makes fails) in a child with
    SOFTVERBS_LOG=error; asserts the refusal and exactly one log line containing `marker`,
    and returns that line."""
    r = run_python(code, SOFTVERBS_LOG='error')
    test.assertEqual(r.returncode, 0, r.stderr)
    test.assertIn('refused', r.stdout)
    lines = [l for l in r.stderr.splitlines() if marker in l]
    test.assertEqual(len(lines), 1, r.stderr)
    return lines[0]


class LineReader:
    """Reads lines from a child's stdout with a deadline, so no test can hang on a child."""

    def __init__(self, proc):
        self.proc = proc
        self.buf = b''
        self.sel = selectors.DefaultSelector()
        self.sel.register(proc.stdout, selectors.EVENT_READ)

    def readline(self, timeout=20):
        deadline = time.monotonic() + timeout
        while b'\n' not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                raise TimeoutError(f'child {self.proc.pid} wrote no line within {timeout} s')
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                err = self.proc.stderr.read().decode(errors='replace') if self.proc.stderr else ''
                raise EOFError(f'child {self.proc.pid} closed stdout; stderr: {err}')
            self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        return line.decode()

    def close(self):
        self.sel.close()


def start_python(code, **env_overrides):
    """Starts `code` in a child with pipes on stdin/stdout/stderr (binary, unbuffered)."""
    return subprocess.Popen([PYTHON, '-u', '-c', code], env=child_env(**env_overrides), cwd=HERE,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)


def stop_child(proc, timeout=10):
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f:
            f.close()


# --- clean-up of host registries --------------------------------------------------------------

# /dev/shm/softverbs-<uid>-<netns>[-v<layout>]-<SOFTVERBS_HOST>: only the host part is ours to rely on.
_SHM_RE = re.compile(r'^softverbs-.*-' + re.escape(HOST_PREFIX) + r'(\d+)$')


def cleanup_shm(include_self=False):
    """Removes the registries left by dead test runs, and this run's own if `include_self`."""
    for path in glob.glob(f'/dev/shm/softverbs-*-{HOST_PREFIX}*'):
        m = _SHM_RE.match(os.path.basename(path))
        if not m:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() and not include_self:
            continue
        if pid != os.getpid() and os.path.exists(f'/proc/{pid}'):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def tear_down_module():
    # This run's registry stays until the run ends: the library in this process keeps using the
    # one it mapped, and the children of later modules (data path tests) must meet it there.
    cleanup_shm()


atexit.register(cleanup_shm, include_self=True)
