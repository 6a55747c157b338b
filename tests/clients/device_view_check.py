"""Run inside `softverbs run`: the device view says what libibverbs says (device_view_test.sh).

Reads the files a stack reads (through the same libc calls Python makes: stat, open, listdir,
access) and compares them with what pyverbs, over our libibverbs, reports. Prints one line per
check and 'N passed, N failed'; exits non-zero on a failure.
"""
import errno
import os
import socket
import stat
import sys

import pyverbs.device as d
import pyverbs.enums as e

IB = '/sys/class/infiniband/softverbs0'
passed = failed = 0


def check(what, ok, detail=''):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f'FAIL {what} {detail}')


def read(path):
    with open(path) as f:
        return f.read().rstrip('\n')


def groups(raw):  # 16-bit groups as the kernel prints GUIDs and GIDs
    return ':'.join(raw[i:i + 4] for i in range(0, len(raw), 4))


check('/sys/class/infiniband lists softverbs0', os.listdir('/sys/class/infiniband') == ['softverbs0'])
ctx = d.Context(name='softverbs0')
attr = ctx.query_device()
# node_guid is the __be64 as the struct holds it: its bytes in memory order are the GUID's.
guid = attr.node_guid.to_bytes(8, sys.byteorder).hex()
check('node_guid matches ibv_query_device', read(IB + '/node_guid') == groups(guid),
      f"{read(IB + '/node_guid')} vs {guid}")
check('node_type is CA', read(IB + '/node_type') == '1: CA')
port = ctx.query_port(1)
check('port state ACTIVE', read(IB + '/ports/1/state') == '4: ACTIVE' and port.state == e.IBV_PORT_ACTIVE)
check('phys_state LinkUp', read(IB + '/ports/1/phys_state') == f'{port.phys_state}: LinkUp')
check('link_layer Ethernet', read(IB + '/ports/1/link_layer') == 'Ethernet'
      and port.link_layer == e.IBV_LINK_LAYER_ETHERNET)
check('lid', int(read(IB + '/ports/1/lid'), 16) == port.lid)
check('cap_mask', int(read(IB + '/ports/1/cap_mask'), 16) == port.port_cap_flags)
check('rate names 4X EDR', read(IB + '/ports/1/rate') == '100 Gb/sec (4X EDR)'
      and port.active_width == 2 and port.active_speed == 32)

valid = 0
for i in range(port.gid_tbl_len):
    gid = ctx.query_gid(1, i)
    check(f'gids/{i}', read(f'{IB}/ports/1/gids/{i}') == groups(gid.gid.replace(':', '')))
    try:
        entry = ctx.query_gid_ex(1, i)
    except Exception:  # an empty entry: ENODATA, and no gid_attrs either
        check(f'gid_attrs/types/{i} absent', not os.path.exists(f'{IB}/ports/1/gid_attrs/types/{i}'))
        continue
    valid += 1
    want = 'RoCE v2' if entry.gid_type == e.IBV_GID_TYPE_ROCE_V2 else 'IB/RoCE v1'
    check(f'gid_attrs/types/{i}', read(f'{IB}/ports/1/gid_attrs/types/{i}') == want)
    if entry.ndev_ifindex:
        ndev = read(f'{IB}/ports/1/gid_attrs/ndevs/{i}')
        check(f'gid_attrs/ndevs/{i}', socket.if_nametoindex(ndev) == entry.ndev_ifindex)
        check(f'device/net/{ndev}', ndev in os.listdir(IB + '/device/net'))
check('at least 127.0.0.1 and the link-local GID', valid >= 2)

uv = '/sys/class/infiniband_verbs/uverbs0'
check('uverbs0/ibdev', read(uv + '/ibdev') == 'softverbs0')
check('uverbs0/abi_version', read(uv + '/abi_version') == '6')
for node in ('/dev/infiniband/uverbs0', '/dev/infiniband/rdma_cm'):
    st = os.stat(node)
    check(f'{node} is a character device', stat.S_ISCHR(st.st_mode))
    check(f'{node} is readable and writable', os.access(node, os.R_OK | os.W_OK))
    fd = os.open(node, os.O_RDWR)
    os.close(fd)
    check(f'{node} opens read-write', fd >= 0)
# Only the three trees are mapped: the rest of /sys and /dev is the machine's.
check('/dev/null is untouched', stat.S_ISCHR(os.stat('/dev/null').st_mode))
try:
    os.stat('/sys/class/infiniband_nosuch')
    check('neighbouring paths are not mapped', False)
except OSError as err:
    check('neighbouring paths are not mapped', err.errno == errno.ENOENT)

print(f'device view: {passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
