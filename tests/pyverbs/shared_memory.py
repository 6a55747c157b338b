"""Registered memory that is already shared (docs/data-path.md, "Shared-backed registrations"):
buffers on a MAP_SHARED mapping of a /dev/shm file, of a memfd, or on a SysV shm segment --
and private memory for comparison -- with the guard bytes of base.Buffer; and an agent.py child
whose QPs use them (`SharedAgent`).

Commands of the child, besides agent.py's:
  qp(qpt, size, access, backing)  -> as agent.py's, the buffer on `backing`
  dereg(id)                       -> null: ibv_dereg_mr of the QP's buffer (the memory stays)
  unmap(id)                       -> null: munmap / shmdt of the buffer's memory, MR still registered
  truncate(id, length)            -> null: ftruncate of the buffer's file (file, memfd), MR still registered
  share(id)                       -> a new RC QP whose buffer is QP `id`'s (same MR): {id, qpn, rkey, ...}
  guards(id)                      -> whether the guard bytes around the MR are intact
  file_bytes(id, offset, length)  -> hex of the MR's bytes read from its file (pread), not memory
"""
import ctypes
import os

import agent
import base  # environment first
import pyverbs.enums as e
from pyverbs.mr import MR

BACKINGS = ('file', 'memfd', 'sysv', 'private')

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.shmdt.argtypes = [ctypes.c_void_p]
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
_libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]

PROT_RW = 0x1 | 0x2
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS = 0x01, 0x02, 0x20
IPC_PRIVATE, IPC_CREAT, IPC_RMID = 0, 0o1000, 0
PAGE = os.sysconf('SC_PAGESIZE')
_serial = 0


def _check(value, what):
    if value in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, f'{what}: {os.strerror(err)}')
    return value


class SharedBuffer(base.Buffer):
    """base.Buffer, but its memory (guards included) is a mapping of `backing`: 'file' (a file
    in /dev/shm, its descriptor kept open as perftest --mmap does), 'memfd', 'sysv' (shmget +
    shmat + IPC_RMID, as perftest --use_hugepages does) or 'private' (anonymous)."""

    def __init__(self, pd, size, access=base.ACCESS_ALL, fill=0, backing='file'):
        global _serial
        self.size, self.backing, self.fd, self.path = size, backing, -1, None
        self.total = (size + 2 * self.GUARD + PAGE - 1) // PAGE * PAGE
        if backing == 'file':
            _serial += 1
            self.path = f'/dev/shm/sv-pyverbs-{os.getpid()}-{_serial}'
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        elif backing == 'memfd':
            self.fd = os.memfd_create('sv-pyverbs')
        if self.fd >= 0:
            os.ftruncate(self.fd, self.total)
            self.base = _check(_libc.mmap(None, self.total, PROT_RW, MAP_SHARED, self.fd, 0), 'mmap')
        elif backing == 'sysv':
            shmid = _libc.shmget(IPC_PRIVATE, self.total, IPC_CREAT | 0o600)
            if shmid < 0:
                _check(None, 'shmget')
            self.base = _check(_libc.shmat(shmid, None, 0), 'shmat')
            _libc.shmctl(shmid, IPC_RMID, None)  # gone once nobody has it attached
        elif backing == 'private':
            self.base = _check(_libc.mmap(None, self.total, PROT_RW, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                               'mmap')
        else:
            raise ValueError(backing)
        self.mapped = True
        ctypes.memset(self.base, self.GUARD_BYTE, self.total)
        self.addr = self.base + self.GUARD
        ctypes.memset(self.addr, fill, size)
        self.mr = MR(pd, size, access, address=self.addr)
        self.lkey, self.rkey = self.mr.lkey, self.mr.rkey

    def snapshot(self):
        return ctypes.string_at(self.base, 2 * self.GUARD + self.size)

    def file_bytes(self, offset, length):
        """Bytes of the MR read from the file itself (not through this process's mapping)."""
        return os.pread(self.fd, length, self.GUARD + offset)

    def unmap(self):
        if self.mapped:
            if self.backing == 'sysv':
                _libc.shmdt(ctypes.c_void_p(self.base))
            else:
                _libc.munmap(ctypes.c_void_p(self.base), self.total)
            self.mapped = False

    def close(self):
        self.mr.close()
        self.unmap()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.path:
            os.unlink(self.path)
            self.path = None


class SharedChild(agent.Child):

    def qp(self, qpt, size=4096, access=base.ACCESS_ALL, backing='file'):
        self.peers.append(base.Peer(self.ctx, self.pd, qpt))
        self.bufs.append(SharedBuffer(self.pd, size, access, backing=backing))
        p, b = self.peers[-1], self.bufs[-1]
        return {'id': len(self.peers) - 1, 'qpn': p.qpn, 'rkey': b.rkey, 'lkey': b.lkey, 'addr': b.addr}

    def dereg(self, id):
        self.bufs[id].mr.close()

    def unmap(self, id):
        self.bufs[id].unmap()

    def truncate(self, id, length):
        os.ftruncate(self.bufs[id].fd, length)

    def share(self, id):
        self.peers.append(base.Peer(self.ctx, self.pd, e.IBV_QPT_RC))
        self.bufs.append(self.bufs[id])
        p, b = self.peers[-1], self.bufs[-1]
        return {'id': len(self.peers) - 1, 'qpn': p.qpn, 'rkey': b.rkey, 'lkey': b.lkey, 'addr': b.addr}

    def guards(self, id):
        return self.bufs[id].guards_intact()

    def file_bytes(self, id, offset, length):
        return self.bufs[id].file_bytes(offset, length).hex()

    def close_all(self):
        for b in {id(b): b for b in self.bufs}.values():  # a shared buffer once
            b.close()


class SharedAgent(agent.Agent):
    """The parent's handle on a SharedChild."""

    def __init__(self):
        self.proc = base.start_python('import agent, shared_memory; agent.main(shared_memory.SharedChild)')
        self.reader = base.LineReader(self.proc)
        self.pid = self.proc.pid
        self._reply(20)

    def close(self):
        try:
            self.call('close_all')  # removes the child's /dev/shm files
        except Exception:  # the child may be gone already; its files then stay for cleanup_files
            pass
        super().close()


def cleanup_files():
    """Removes /dev/shm files of buffers whose process died before closing them."""
    for name in os.listdir('/dev/shm'):
        if name.startswith('sv-pyverbs-'):
            pid = name.split('-')[2]
            if pid.isdigit() and not os.path.exists(f'/proc/{pid}'):
                try:
                    os.unlink(os.path.join('/dev/shm', name))
                except FileNotFoundError:
                    pass
