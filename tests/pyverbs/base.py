"""Shared set-up of the pyverbs-based tests of softverbs.

Import this module before pyverbs: it gives the test process (and every subprocess it starts) a
private host registry (SOFTVERBS_HOST=pyverbs-tests-<pid>), so the tests neither see nor disturb
the QP numbers and keys of other softverbs programs of the user.

Run the suite with our libraries first on the loader path:
    cd tests/pyverbs && LD_LIBRARY_PATH=<build>/lib /usr/bin/python3 -m unittest -v
The build directory defaults to <repo>/build/lib; SOFTVERBS_BUILD_LIB overrides it.
"""
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
from pyverbs.addr import AHAttr, GlobalRoute  # noqa: E402
from pyverbs.cq import CQ  # noqa: E402
from pyverbs.device import Context, get_device_list  # noqa: E402
from pyverbs.pd import PD  # noqa: E402
from pyverbs.pyverbs_error import PyverbsRDMAError  # noqa: E402
from pyverbs.qp import QP, QPCap, QPInitAttr, QPInitAttrEx  # noqa: E402

DEV_NAME = 'softverbs0'
PORT = 1

# The limits softverbs0 documents (ibv_query_device).
MAX_QP_WR = 32768
MAX_SGE = 32
MAX_INLINE = 1024
MAX_CQE = 4194303
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


def start_python(code):
    """Starts `code` in a child with pipes on stdin/stdout/stderr (binary, unbuffered)."""
    return subprocess.Popen([PYTHON, '-u', '-c', code], env=child_env(), cwd=HERE,
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


def cleanup_shm():
    """Removes the registry of this test run and those left by dead test runs."""
    for path in glob.glob(f'/dev/shm/softverbs-*-{HOST_PREFIX}*'):
        m = _SHM_RE.match(os.path.basename(path))
        if not m:
            continue
        pid = int(m.group(1))
        alive = pid != os.getpid() and os.path.exists(f'/proc/{pid}')
        if alive:
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def tear_down_module():
    cleanup_shm()
