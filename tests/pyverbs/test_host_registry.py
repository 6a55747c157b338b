"""Host-wide numbers (DESIGN.md sections 3 and 5.4): QP numbers and memory keys are unique across
the processes of a host, and a process killed while holding them does not block anyone."""
import errno
import json
import os
import signal
import textwrap
import unittest

import base

tearDownModule = base.tear_down_module

# A child that opens softverbs0, says "ready", waits for "go", creates N QPs (alternating RC, UC,
# UD) and N MRs interleaved, prints their numbers as JSON and holds them until stdin closes.
HOLDER = textwrap.dedent('''
    import json, sys
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPCap, QPInitAttr
    N = int(sys.argv[1])
    ctx = Context(name='softverbs0')
    pd = PD(ctx)
    cq = CQ(ctx, 64, None, None, 0)
    types = (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD)
    print('ready', flush=True)
    sys.stdin.readline()
    qps, mrs = [], []
    for k in range(N):
        qps.append(QP(pd, QPInitAttr(qp_type=types[k % 3], scq=cq, rcq=cq,
                                     cap=QPCap(max_send_wr=4, max_recv_wr=4))))
        mrs.append(MR(pd, 64, e.IBV_ACCESS_LOCAL_WRITE))
    print(json.dumps({'qpn': [q.qp_num for q in qps], 'lkey': [m.lkey for m in mrs],
                      'rkey': [m.rkey for m in mrs]}), flush=True)
    sys.stdin.readline()
''')


# A child that creates UD QPs until ibv_create_qp fails (bounded by max_qp + 1 attempts) and prints
# how many it got and the errno of the failure.
FILLER = textwrap.dedent('''
    import json
    import pyverbs.enums as e
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsRDMAError
    from pyverbs.qp import QP, QPCap, QPInitAttr
    ctx = Context(name='softverbs0')
    max_qp = ctx.query_device().max_qp
    pd = PD(ctx)
    cq = CQ(ctx, 4, None, None, 0)
    attr = QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(max_send_wr=1, max_recv_wr=1,
                                                                       max_send_sge=1, max_recv_sge=1))
    qps, error = [], None
    for _ in range(max_qp + 1):
        try:
            qps.append(QP(pd, attr))
        except PyverbsRDMAError as ex:
            error = abs(ex.error_code)
            break
    print(json.dumps({'max_qp': max_qp, 'created': len(qps), 'errno': error,
                      'unique': len({q.qp_num for q in qps})}), flush=True)
''')


class Holder:
    """A HOLDER child process."""

    def __init__(self, n):
        self.proc = base.start_python(HOLDER.replace('int(sys.argv[1])', str(int(n))))
        self.reader = base.LineReader(self.proc)

    def expect(self, text, timeout=20):
        line = self.reader.readline(timeout)
        if line != text:
            raise AssertionError(f'child said {line!r}, expected {text!r}')

    def go(self):
        self.proc.stdin.write(b'go\n')

    def numbers(self, timeout=20):
        return json.loads(self.reader.readline(timeout))

    def finish(self):
        """Lets the child exit normally; returns its exit status and stderr."""
        self.proc.stdin.close()
        self.proc.stdin = None
        rc = self.proc.wait(20)
        err = self.proc.stderr.read().decode(errors='replace')
        self.close()
        return rc, err

    def close(self):
        self.reader.close()
        base.stop_child(self.proc)


class HostRegistryTest(unittest.TestCase):

    def test_two_processes_allocate_concurrently_without_duplicates(self):
        holders = [Holder(50), Holder(50)]
        try:
            for h in holders:
                h.expect('ready')
            for h in holders:  # both start allocating at the same moment
                h.go()
            results = [h.numbers() for h in holders]
            qpns = results[0]['qpn'] + results[1]['qpn']
            keys = results[0]['lkey'] + results[1]['lkey']
            self.assertEqual(len(qpns), 100)
            self.assertEqual(len(set(qpns)), 100, 'a QP number was given to both processes')
            self.assertEqual(len(keys), 100)
            self.assertEqual(len(set(keys)), 100, 'a memory key was given to both processes')
            for r in results:
                self.assertEqual(r['lkey'], r['rkey'])
            self.assertTrue(all(0x100 <= n < 1 << 24 for n in qpns))
            for h in holders:
                rc, err = h.finish()
                self.assertEqual(rc, 0, err)
                self.assertEqual(err, '')
        finally:
            for h in holders:
                h.close()

    def test_sigkilled_holder_does_not_block_new_allocations(self):
        victim = Holder(60)
        try:
            victim.expect('ready')
            victim.go()
            dead = victim.numbers()
            self.assertEqual(len(set(dead['qpn'])), 60)
            os.kill(victim.proc.pid, signal.SIGKILL)
            self.assertEqual(victim.proc.wait(10), -signal.SIGKILL)
        finally:
            victim.close()
        # A new process of the same host allocates freely, while the registry still holds the
        # slots of the killed one (they are reclaimed when needed).
        survivor = Holder(200)
        try:
            survivor.expect('ready')
            survivor.go()
            fresh = survivor.numbers()
            self.assertEqual(len(set(fresh['qpn'])), 200)
            self.assertEqual(len(set(fresh['lkey'])), 200)
            rc, err = survivor.finish()
            self.assertEqual(rc, 0, err)
            self.assertEqual(err, '')
        finally:
            survivor.close()

    def test_slots_of_a_sigkilled_holder_are_reclaimed(self):
        # The killed process still owns its slots in the registry. A process that then fills the
        # whole QP table gets all max_qp numbers only if those slots are reclaimed.
        victim = Holder(60)
        try:
            victim.expect('ready')
            victim.go()
            victim.numbers()
            os.kill(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait(10)
        finally:
            victim.close()
        r = base.run_python(FILLER, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out['max_qp'], 65536)
        self.assertEqual(out['created'], out['max_qp'], out)
        self.assertEqual(out['unique'], out['max_qp'])
        # One more than max_qp is refused, as the device limit says.
        self.assertEqual(out['errno'], errno.ENOMEM)

    def test_numbers_freed_by_an_exited_process_are_not_blocking(self):
        # Processes that come and go (normal exit) must not exhaust anything either.
        for _ in range(3):
            h = Holder(30)
            try:
                h.expect('ready')
                h.go()
                self.assertEqual(len(set(h.numbers()['qpn'])), 30)
                rc, err = h.finish()
                self.assertEqual(rc, 0, err)
            finally:
                h.close()


if __name__ == '__main__':
    unittest.main()
