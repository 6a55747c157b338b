"""Direct calls into the loaded libibverbs.so.1 through ctypes.

pyverbs destroys objects in dependency order (closing a PD first closes its MRs and QPs), and it
does not expose file descriptors of completion channels or the context's async fd. The refusals
that only a raw call can reach (ibv_dealloc_pd of a PD in use -> EBUSY, ...) are tested here
with the exported C entry points and the public structure layouts of <infiniband/verbs.h>.
"""
import ctypes
import importlib
import os

import base  # environment first

# Makes sure the process has loaded libibverbs.so.1 (from LD_LIBRARY_PATH) before we look it up.
importlib.import_module('pyverbs.device')


def loaded_library_path(soname):
    """The file the dynamic loader mapped for `soname` in this process, or None."""
    with open('/proc/self/maps') as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and os.path.basename(parts[5]).startswith(soname):
                return parts[5]
    return None


def _peek(fd, addr, n):
    try:
        return os.pread(fd, n, addr) if 0 < addr < 2 ** 63 else None
    except OSError:
        return None


def pyverbs_pointer(obj, offset, value):
    """The C object (struct ibv_pd *, struct ibv_cq *, ...) a pyverbs object keeps but does not
    expose, for the verbs_context ops pyverbs does not wrap: the word of the Cython object that
    points at a struct whose first field is a context of softverbs0 and whose u32 at `offset` is
    `value` (ibv_pd.handle at 8, ibv_cq.cqe at 28). Memory is read through /proc/self/mem, so a
    word that is no pointer cannot fault."""
    fd = os.open('/proc/self/mem', os.O_RDONLY)
    try:
        for off in range(16, 160, 8):
            w = _peek(fd, id(obj) + off, 8)
            p = int.from_bytes(w, 'little') if w else 0
            head = _peek(fd, p, offset + 4)
            if not head or int.from_bytes(head[offset:offset + 4], 'little') != value & 0xffffffff:
                continue
            dev = _peek(fd, int.from_bytes(head[:8], 'little'), 8)  # ibv_context.device
            name = _peek(fd, int.from_bytes(dev, 'little') + 24, 11) if dev else None  # ibv_device.name
            if name == base.DEV_NAME.encode() + b'\0':
                return p
    finally:
        os.close(fd)
    raise AssertionError(f'no C object found inside the pyverbs {type(obj).__name__}')


# offsetof(struct verbs_context, context), the struct ibv_context applications hold, in
# rdma-core 44 on x86-64; verbs_op() calls the op at another offset of the same verbs_context.
VCTX_CONTEXT = 320


def verbs_op(ctx_ptr, offset, restype, *argtypes):
    vctx = ctypes.cast(ctx_ptr, ctypes.c_void_p).value - VCTX_CONTEXT
    fn = ctypes.c_void_p.from_address(vctx + offset).value
    return ctypes.CFUNCTYPE(restype, *argtypes, use_errno=True)(fn)


class IbvContext(ctypes.Structure):
    # struct ibv_context: device, struct ibv_context_ops (32 function pointers), cmd_fd, ...
    _fields_ = [('device', ctypes.c_void_p),
                ('ops', ctypes.c_void_p * 32),
                ('cmd_fd', ctypes.c_int),
                ('async_fd', ctypes.c_int),
                ('num_comp_vectors', ctypes.c_int)]


class IbvCompChannel(ctypes.Structure):
    _fields_ = [('context', ctypes.c_void_p), ('fd', ctypes.c_int), ('refcnt', ctypes.c_int)]


class IbvQpCap(ctypes.Structure):
    _fields_ = [('max_send_wr', ctypes.c_uint32), ('max_recv_wr', ctypes.c_uint32),
                ('max_send_sge', ctypes.c_uint32), ('max_recv_sge', ctypes.c_uint32),
                ('max_inline_data', ctypes.c_uint32)]


class IbvQpInitAttr(ctypes.Structure):
    _fields_ = [('qp_context', ctypes.c_void_p), ('send_cq', ctypes.c_void_p),
                ('recv_cq', ctypes.c_void_p), ('srq', ctypes.c_void_p), ('cap', IbvQpCap),
                ('qp_type', ctypes.c_int), ('sq_sig_all', ctypes.c_int)]


class IbvQp(ctypes.Structure):
    _fields_ = [('context', ctypes.c_void_p), ('qp_context', ctypes.c_void_p),
                ('pd', ctypes.c_void_p), ('send_cq', ctypes.c_void_p),
                ('recv_cq', ctypes.c_void_p), ('srq', ctypes.c_void_p),
                ('handle', ctypes.c_uint32), ('qp_num', ctypes.c_uint32),
                ('state', ctypes.c_int), ('qp_type', ctypes.c_int)]


class IbvAsyncEvent(ctypes.Structure):
    _fields_ = [('element', ctypes.c_void_p), ('event_type', ctypes.c_int)]


def _load():
    path = loaded_library_path('libibverbs.so.1') or 'libibverbs.so.1'
    lib = ctypes.CDLL(path, use_errno=True)
    vp, i = ctypes.c_void_p, ctypes.c_int
    sigs = {
        'ibv_get_device_list': (ctypes.POINTER(vp), [ctypes.POINTER(i)]),
        'ibv_free_device_list': (None, [ctypes.POINTER(vp)]),
        'ibv_get_device_name': (ctypes.c_char_p, [vp]),
        'ibv_open_device': (ctypes.POINTER(IbvContext), [vp]),
        'ibv_close_device': (i, [ctypes.POINTER(IbvContext)]),
        'ibv_alloc_pd': (vp, [ctypes.POINTER(IbvContext)]),
        'ibv_dealloc_pd': (i, [vp]),
        'ibv_reg_mr': (vp, [vp, vp, ctypes.c_size_t, i]),
        'ibv_reg_mr_iova': (vp, [vp, vp, ctypes.c_size_t, ctypes.c_uint64, i]),
        'ibv_dereg_mr': (i, [vp]),
        'ibv_create_comp_channel': (ctypes.POINTER(IbvCompChannel), [ctypes.POINTER(IbvContext)]),
        'ibv_destroy_comp_channel': (i, [ctypes.POINTER(IbvCompChannel)]),
        'ibv_create_cq': (vp, [ctypes.POINTER(IbvContext), i, vp,
                               ctypes.POINTER(IbvCompChannel), i]),
        'ibv_destroy_cq': (i, [vp]),
        'ibv_get_cq_event': (i, [ctypes.POINTER(IbvCompChannel), ctypes.POINTER(vp),
                                 ctypes.POINTER(vp)]),
        'ibv_create_qp': (ctypes.POINTER(IbvQp), [vp, ctypes.POINTER(IbvQpInitAttr)]),
        'ibv_destroy_qp': (i, [ctypes.POINTER(IbvQp)]),
        'ibv_attach_mcast': (i, [ctypes.POINTER(IbvQp), ctypes.c_char_p, ctypes.c_uint16]),
        'ibv_detach_mcast': (i, [ctypes.POINTER(IbvQp), ctypes.c_char_p, ctypes.c_uint16]),
        'ibv_get_async_event': (i, [ctypes.POINTER(IbvContext), ctypes.POINTER(IbvAsyncEvent)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()


class RawError(Exception):
    def __init__(self, verb, code):
        super().__init__(f'{verb} failed: {os.strerror(code)} ({code})')
        self.verb = verb
        self.error_code = code


def _check_ptr(verb, p):
    if not p:
        raise RawError(verb, ctypes.get_errno())
    return p


class RawContext:
    """softverbs0 opened through the C API; closes what it created on close()."""

    def __init__(self):
        n = ctypes.c_int(0)
        devs = _check_ptr('ibv_get_device_list', lib.ibv_get_device_list(ctypes.byref(n)))
        try:
            dev = None
            for k in range(n.value):
                if lib.ibv_get_device_name(devs[k]) == base.DEV_NAME.encode():
                    dev = devs[k]
            if dev is None:
                raise AssertionError(f'{base.DEV_NAME} not in the device list')
            self.ctx = _check_ptr('ibv_open_device', lib.ibv_open_device(dev))
        finally:
            lib.ibv_free_device_list(devs)
        self._objects = []  # (destroy function, handle), destroyed in reverse order

    def _track(self, destroy, handle):
        self._objects.append((destroy, handle))
        return handle

    def forget(self, handle):
        self._objects = [(d, h) for d, h in self._objects if h is not handle and h != handle]

    def alloc_pd(self):
        return self._track(lib.ibv_dealloc_pd, _check_ptr('ibv_alloc_pd', lib.ibv_alloc_pd(self.ctx)))

    def reg_mr(self, pd, buf, access):
        mr = lib.ibv_reg_mr(pd, ctypes.cast(buf, ctypes.c_void_p), ctypes.sizeof(buf), access)
        return self._track(lib.ibv_dereg_mr, _check_ptr('ibv_reg_mr', mr))

    def reg_mr_iova(self, pd, buf, iova, access):
        mr = lib.ibv_reg_mr_iova(pd, ctypes.cast(buf, ctypes.c_void_p), ctypes.sizeof(buf), iova, access)
        return self._track(lib.ibv_dereg_mr, _check_ptr('ibv_reg_mr_iova', mr))

    def create_comp_channel(self):
        ch = _check_ptr('ibv_create_comp_channel', lib.ibv_create_comp_channel(self.ctx))
        return self._track(lib.ibv_destroy_comp_channel, ch)

    def create_cq(self, cqe=16, channel=None):
        cq = lib.ibv_create_cq(self.ctx, cqe, None, channel, 0)
        return self._track(lib.ibv_destroy_cq, _check_ptr('ibv_create_cq', cq))

    def create_qp(self, pd, cq, qp_type):
        attr = IbvQpInitAttr(send_cq=cq, recv_cq=cq, qp_type=qp_type,
                             cap=IbvQpCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1,
                                          max_recv_sge=1))
        qp = lib.ibv_create_qp(pd, ctypes.byref(attr))
        return self._track(lib.ibv_destroy_qp, _check_ptr('ibv_create_qp', qp))

    def destroy(self, destroy, handle):
        """Calls a destroy verb; on success the object is no longer tracked. Returns its result."""
        rc = destroy(handle)
        if rc == 0:
            self.forget(handle)
        return rc

    def close(self):
        for destroy, handle in reversed(self._objects):
            destroy(handle)
        self._objects = []
        if self.ctx:
            lib.ibv_close_device(self.ctx)
            self.ctx = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
