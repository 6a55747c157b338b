"""A DCI in another process, driven by JSON lines like agent.py (same protocol and Agent class).

Commands (DCIs are dc.Dci objects, named by "id"):
  dci(timeout, retry_cnt)               -> {id, qpn, addr, lkey}
  post(id, op, dctn, key, offset, length, rkey, raddr, imm, compare_add, swap, wr_id)
                                        -> the completions of that one WR, as dicts
  read(id, offset, length) -> hex;  write(id, offset, hex) -> null;  state(id) -> qp_state
  traffic(id, dctn, key, rkey, raddr, max_wrs)
      keeps up to 8 RDMA WRITEs of a running counter outstanding until one completes in error
      (or max_wrs were posted), then collects every completion: {posted, statuses}.
"""

import agent
import base  # environment first
import dc
import pyverbs.enums as e
from pyverbs.pd import PD


class Child:

    def __init__(self):
        self.ctx = base.open_context()
        self.pd = PD(self.ctx)
        self.dcis = []

    def dci(self, timeout=14, retry_cnt=7):
        self.dcis.append(dc.Dci(self.ctx, self.pd, timeout=timeout, retry_cnt=retry_cnt))
        d = self.dcis[-1]
        return {'id': len(self.dcis) - 1, 'qpn': d.qpn, 'addr': d.buf.addr, 'lkey': d.buf.lkey}

    def post(self, id, op, dctn, key=dc.DC_KEY, wr_id=0, **kw):
        d = self.dcis[id]
        d.post(op, dctn, key, wr_id=wr_id, **kw)
        return [{k: int(getattr(w, k)) for k in agent.WC_FIELDS} for w in d.poll(1, timeout=10)]

    def read(self, id, offset=0, length=8):
        return self.dcis[id].buf.read(offset, length).hex()

    def write(self, id, offset, data):
        self.dcis[id].buf.write(bytes.fromhex(data), offset)

    def state(self, id):
        return int(self.dcis[id].state())

    def traffic(self, id, dctn, key, rkey, raddr, max_wrs=1000000):
        d = self.dcis[id]
        posted, statuses, outstanding, failed = 0, [], 0, False
        while True:
            while not failed and outstanding < 8 and posted < max_wrs:
                posted += 1
                d.buf.set_u64(posted, 8 * (posted % 8))
                d.post('write', dctn, key, offset=8 * (posted % 8), rkey=rkey, raddr=raddr, wr_id=posted)
                outstanding += 1
            if outstanding == 0:
                break
            for wc in d.poll(1, timeout=10):
                outstanding -= 1
                statuses.append(int(wc.status))
                failed = failed or wc.status != e.IBV_WC_SUCCESS
        return {'posted': posted, 'statuses': statuses}


def main():
    agent.main(Child)


class DcAgent(agent.Agent):
    """The parent's handle on a child running dc_agent.main()."""

    def __init__(self):
        self.proc = base.start_python('import dc_agent; dc_agent.main()')
        self.reader = base.LineReader(self.proc)
        self.pid = self.proc.pid
        self._reply(20)
