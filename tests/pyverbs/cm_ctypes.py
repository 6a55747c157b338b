"""librdmacm through ctypes, for what pyverbs.cmid does not expose: an event's status and
parameters (private data of REQ/REP, ud_param), the fields rdma_create_qp fills in the
rdma_cm_id (pd, CQs, completion channels), the channel's fd, and NULL arguments.

The structure layouts are rdma-core's <rdma/rdma_cma.h> and <infiniband/verbs.h> (x86_64);
test_cm_refusals checks the sizes against rdma-core's when a C compiler is present."""
import ctypes
import ctypes.util
import os
import socket
import struct

# Test modules import base (SOFTVERBS_HOST, library path) before this module; the children of
# test_cm_* import it alone, with the environment base.child_env() gave them.

RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB, RDMA_PS_IB = 0x0106, 0x0111, 0x0002, 0x013F
EVENTS = ['ADDR_RESOLVED', 'ADDR_ERROR', 'ROUTE_RESOLVED', 'ROUTE_ERROR', 'CONNECT_REQUEST',
          'CONNECT_RESPONSE', 'CONNECT_ERROR', 'UNREACHABLE', 'REJECTED', 'ESTABLISHED',
          'DISCONNECTED', 'DEVICE_REMOVAL', 'MULTICAST_JOIN', 'MULTICAST_ERROR', 'ADDR_CHANGE',
          'TIMEWAIT_EXIT']


class Gid(ctypes.Structure):
    _fields_ = [('raw', ctypes.c_uint64 * 2)]


class SockaddrStorage(ctypes.Structure):
    _fields_ = [('raw', ctypes.c_uint64 * 16)]


class IbAddr(ctypes.Structure):
    _fields_ = [('sgid', Gid), ('dgid', Gid), ('pkey', ctypes.c_uint16)]


class RdmaAddr(ctypes.Structure):
    _fields_ = [('src', SockaddrStorage), ('dst', SockaddrStorage), ('ib', IbAddr)]


class Route(ctypes.Structure):
    _fields_ = [('addr', RdmaAddr), ('path_rec', ctypes.c_void_p), ('num_paths', ctypes.c_int)]


class CmId(ctypes.Structure):
    _fields_ = [('verbs', ctypes.c_void_p), ('channel', ctypes.c_void_p),
                ('context', ctypes.c_void_p), ('qp', ctypes.c_void_p), ('route', Route),
                ('ps', ctypes.c_int), ('port_num', ctypes.c_uint8), ('event', ctypes.c_void_p),
                ('send_cq_channel', ctypes.c_void_p), ('send_cq', ctypes.c_void_p),
                ('recv_cq_channel', ctypes.c_void_p), ('recv_cq', ctypes.c_void_p),
                ('srq', ctypes.c_void_p), ('pd', ctypes.c_void_p), ('qp_type', ctypes.c_int)]


class ConnParam(ctypes.Structure):
    _fields_ = [('private_data', ctypes.c_void_p), ('private_data_len', ctypes.c_uint8),
                ('responder_resources', ctypes.c_uint8), ('initiator_depth', ctypes.c_uint8),
                ('flow_control', ctypes.c_uint8), ('retry_count', ctypes.c_uint8),
                ('rnr_retry_count', ctypes.c_uint8), ('srq', ctypes.c_uint8),
                ('qp_num', ctypes.c_uint32)]


class GlobalRoute(ctypes.Structure):
    _fields_ = [('dgid', Gid), ('flow_label', ctypes.c_uint32), ('sgid_index', ctypes.c_uint8),
                ('hop_limit', ctypes.c_uint8), ('traffic_class', ctypes.c_uint8)]


class AhAttr(ctypes.Structure):
    _fields_ = [('grh', GlobalRoute), ('dlid', ctypes.c_uint16), ('sl', ctypes.c_uint8),
                ('src_path_bits', ctypes.c_uint8), ('static_rate', ctypes.c_uint8),
                ('is_global', ctypes.c_uint8), ('port_num', ctypes.c_uint8)]


class UdParam(ctypes.Structure):
    _fields_ = [('private_data', ctypes.c_void_p), ('private_data_len', ctypes.c_uint8),
                ('ah_attr', AhAttr), ('qp_num', ctypes.c_uint32), ('qkey', ctypes.c_uint32)]


class Param(ctypes.Union):
    _fields_ = [('conn', ConnParam), ('ud', UdParam)]


class CmEvent(ctypes.Structure):
    _fields_ = [('id', ctypes.POINTER(CmId)), ('listen_id', ctypes.POINTER(CmId)),
                ('event', ctypes.c_int), ('status', ctypes.c_int), ('param', Param)]


class QpCap(ctypes.Structure):
    _fields_ = [('max_send_wr', ctypes.c_uint32), ('max_recv_wr', ctypes.c_uint32),
                ('max_send_sge', ctypes.c_uint32), ('max_recv_sge', ctypes.c_uint32),
                ('max_inline_data', ctypes.c_uint32)]


class QpInitAttr(ctypes.Structure):
    _fields_ = [('qp_context', ctypes.c_void_p), ('send_cq', ctypes.c_void_p),
                ('recv_cq', ctypes.c_void_p), ('srq', ctypes.c_void_p), ('cap', QpCap),
                ('qp_type', ctypes.c_int), ('sq_sig_all', ctypes.c_int)]


class Channel(ctypes.Structure):
    _fields_ = [('fd', ctypes.c_int)]


cm = ctypes.CDLL('librdmacm.so.1', use_errno=True)
verbs = ctypes.CDLL('libibverbs.so.1', use_errno=True)
P = ctypes.c_void_p
_sigs = {
    'rdma_create_event_channel': (ctypes.POINTER(Channel), []),
    'rdma_destroy_event_channel': (None, [P]),
    'rdma_create_id': (ctypes.c_int, [P, ctypes.POINTER(ctypes.POINTER(CmId)), P, ctypes.c_int]),
    'rdma_destroy_id': (ctypes.c_int, [P]),
    'rdma_bind_addr': (ctypes.c_int, [P, P]),
    'rdma_resolve_addr': (ctypes.c_int, [P, P, P, ctypes.c_int]),
    'rdma_resolve_route': (ctypes.c_int, [P, ctypes.c_int]),
    'rdma_listen': (ctypes.c_int, [P, ctypes.c_int]),
    'rdma_connect': (ctypes.c_int, [P, P]),
    'rdma_accept': (ctypes.c_int, [P, P]),
    'rdma_reject': (ctypes.c_int, [P, P, ctypes.c_uint8]),
    'rdma_disconnect': (ctypes.c_int, [P]),
    'rdma_establish': (ctypes.c_int, [P]),
    'rdma_get_cm_event': (ctypes.c_int, [P, ctypes.POINTER(ctypes.POINTER(CmEvent))]),
    'rdma_ack_cm_event': (ctypes.c_int, [P]),
    'rdma_create_qp': (ctypes.c_int, [P, P, P]),
    'rdma_destroy_qp': (None, [P]),
    'rdma_get_src_port': (ctypes.c_uint16, [P]),
    'rdma_get_dst_port': (ctypes.c_uint16, [P]),
    'rdma_migrate_id': (ctypes.c_int, [P, P]),
    'rdma_set_option': (ctypes.c_int, [P, ctypes.c_int, ctypes.c_int, P, ctypes.c_size_t]),
    'rdma_join_multicast': (ctypes.c_int, [P, P, P]),
    'rdma_leave_multicast': (ctypes.c_int, [P, P]),
}
for _name, (_res, _args) in _sigs.items():
    _f = getattr(cm, _name)
    _f.restype, _f.argtypes = _res, _args
verbs.ibv_query_qp.argtypes = [P, P, ctypes.c_int, P]


class CmError(OSError):
    pass


def check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise CmError(err, f'{what}: {os.strerror(err)}')


def sockaddr(host, port=0):
    """A sockaddr_in / sockaddr_in6 for `host` as a ctypes buffer."""
    if ':' in host:
        raw = struct.pack('=HHI16sI', socket.AF_INET6, socket.htons(port), 0,
                          socket.inet_pton(socket.AF_INET6, host), 0)
    else:
        raw = struct.pack('=HH4s8x', socket.AF_INET, socket.htons(port),
                          socket.inet_pton(socket.AF_INET, host))
    return ctypes.create_string_buffer(raw, 128)


def address_of(storage):
    """(host, port) of a sockaddr_storage."""
    raw = bytes(storage)
    family, port = struct.unpack_from('=HH', raw)
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[4:8]), socket.ntohs(port)
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, raw[8:24]), socket.ntohs(port)
    return None, 0


class Event:
    """A received event, copied out and acknowledged."""

    def __init__(self, ptr):
        ev = ptr.contents
        self.type = EVENTS[ev.event] if 0 <= ev.event < len(EVENTS) else ev.event
        self.status = ev.status
        self.id = ctypes.cast(ev.id, P).value
        self.listen_id = ctypes.cast(ev.listen_id, P).value
        conn, ud = ev.param.conn, ev.param.ud
        self.conn = {k: getattr(conn, k) for k, _ in ConnParam._fields_ if k != 'private_data'}
        self.private_data = ctypes.string_at(conn.private_data, conn.private_data_len) \
            if conn.private_data else b''
        self.private_data_ptr = conn.private_data  # MULTICAST_JOIN: the join's context
        self.ud = {'qp_num': ud.qp_num, 'qkey': ud.qkey, 'is_global': ud.ah_attr.is_global,
                   'dgid': bytes(ud.ah_attr.grh.dgid), 'sgid_index': ud.ah_attr.grh.sgid_index,
                   'port_num': ud.ah_attr.port_num}
        check(cm.rdma_ack_cm_event(ptr), 'rdma_ack_cm_event')

    def __repr__(self):
        return f'<{self.type} status {self.status}>'


class EventChannel:
    def __init__(self):
        self.ptr = cm.rdma_create_event_channel()
        if not self.ptr:
            raise CmError(ctypes.get_errno(), 'rdma_create_event_channel')
        self.fd = self.ptr.contents.fd

    def get(self):
        out = ctypes.POINTER(CmEvent)()
        check(cm.rdma_get_cm_event(self.ptr, ctypes.byref(out)), 'rdma_get_cm_event')
        return Event(out)

    def close(self):
        if self.ptr:
            cm.rdma_destroy_event_channel(self.ptr)
            self.ptr = None


class Id:
    def __init__(self, channel, ps=RDMA_PS_TCP, ptr=None):
        self.channel = channel
        if ptr is None:
            out = ctypes.POINTER(CmId)()
            check(cm.rdma_create_id(channel.ptr if channel else None, ctypes.byref(out), None, ps),
                  'rdma_create_id')
            ptr = ctypes.cast(out, P).value
        self.ptr = ptr

    @property
    def fields(self):
        return ctypes.cast(self.ptr, ctypes.POINTER(CmId)).contents

    def bind(self, host, port=0):
        check(cm.rdma_bind_addr(self.ptr, sockaddr(host, port)), 'rdma_bind_addr')

    def resolve_addr(self, host, port, src=None):
        check(cm.rdma_resolve_addr(self.ptr, sockaddr(src) if src else None, sockaddr(host, port),
                                   2000), 'rdma_resolve_addr')

    def resolve_route(self):
        check(cm.rdma_resolve_route(self.ptr, 2000), 'rdma_resolve_route')

    def listen(self, backlog=8):
        check(cm.rdma_listen(self.ptr, backlog), 'rdma_listen')

    def src_port(self):
        return socket.ntohs(cm.rdma_get_src_port(self.ptr))

    def create_qp(self, qp_type=2, pd=None, send_cq=None, recv_cq=None, wr=8):
        attr = QpInitAttr(send_cq=send_cq, recv_cq=recv_cq, qp_type=qp_type,
                          cap=QpCap(max_send_wr=wr, max_recv_wr=wr, max_send_sge=1,
                                    max_recv_sge=1))
        check(cm.rdma_create_qp(self.ptr, pd, ctypes.byref(attr)), 'rdma_create_qp')
        return attr

    @staticmethod
    def _param(private_data=b'', resources=1, depth=1, **kw):
        p = ConnParam(responder_resources=resources, initiator_depth=depth, retry_count=7,
                      rnr_retry_count=7, **kw)
        buf = ctypes.create_string_buffer(private_data, max(len(private_data), 1))
        p.private_data = ctypes.cast(buf, P).value if private_data else None
        p.private_data_len = len(private_data)
        return p, buf

    def connect(self, private_data=b'', **kw):
        p, buf = self._param(private_data, **kw)
        check(cm.rdma_connect(self.ptr, ctypes.byref(p)), 'rdma_connect')

    def accept(self, private_data=b'', **kw):
        p, buf = self._param(private_data, **kw)
        check(cm.rdma_accept(self.ptr, ctypes.byref(p)), 'rdma_accept')

    def reject(self, private_data=b''):
        buf = ctypes.create_string_buffer(private_data, max(len(private_data), 1))
        check(cm.rdma_reject(self.ptr, buf if private_data else None, len(private_data)),
              'rdma_reject')

    def disconnect(self):
        check(cm.rdma_disconnect(self.ptr), 'rdma_disconnect')

    def destroy(self):
        if self.ptr:
            if self.fields.qp:
                cm.rdma_destroy_qp(self.ptr)
            check(cm.rdma_destroy_id(self.ptr), 'rdma_destroy_id')
            self.ptr = None


def qp_state(qp_ptr):
    """ibv_query_qp(qp, IBV_QP_STATE).qp_state: the first int of struct ibv_qp_attr."""
    attr = ctypes.create_string_buffer(512)
    init = ctypes.create_string_buffer(512)
    check(verbs.ibv_query_qp(qp_ptr, attr, 1, init), 'ibv_query_qp')
    return struct.unpack_from('=i', attr.raw)[0]


def qp_num(qp_ptr):
    """struct ibv_qp: context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num."""
    return struct.unpack_from('=I', ctypes.string_at(qp_ptr, 56), 52)[0]


def free_port():
    """A port nothing on this host's CM uses (the CM's names are per port, like TCP's)."""
    import random
    return random.randint(20000, 30000)
