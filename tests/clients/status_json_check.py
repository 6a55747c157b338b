"""`softverbs status --json` against a known setup (issue 15 item 7): two processes holding QPs in
known states (status_holder.py); the document must parse with Python's json module and report each
QP's process, type, state and connected peer, each process's counts, and the device; the readable
format must still list the same. Every process started here is ended (by PID) at the end.
Usage: status_json_check.py <build dir>"""
import json
import os
import select
import signal
import subprocess
import sys

build = sys.argv[1]
sv = os.path.join(build, 'bin', 'softverbs')
here = os.path.dirname(os.path.abspath(__file__))
os.environ['SOFTVERBS_HOST'] = f'pyverbs-tests-status-{os.getpid()}'  # (base.py's prefix: kept)
signal.alarm(90)  # the bound of the whole check; ctest's timeout is the backstop
passed = failed = 0


def check(what, ok, detail=''):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print(('ok   ' if ok else 'FAIL ') + what + ('' if ok or not detail else f' ({detail})'), flush=True)


def line_of(proc, timeout=30):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f'pid {proc.pid} said nothing for {timeout} s')
    return proc.stdout.readline()


holders = []
try:
    for role in ('a', 'b'):
        holders.append(subprocess.Popen(['/usr/bin/python3', os.path.join(here, 'status_holder.py'), role],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    a, b = (json.loads(line_of(h)) for h in holders)
    holders[0].stdin.write(f"{b['qps']['x']}\n"), holders[0].stdin.flush()
    holders[1].stdin.write(f"{a['qps']['x']}\n"), holders[1].stdin.flush()
    for h in holders:
        assert line_of(h).strip() == 'ready'

    out = subprocess.run([sv, 'status', '--json'], capture_output=True, text=True, timeout=30)
    check('status --json exits 0', out.returncode == 0, out.stderr)
    doc = json.loads(out.stdout)
    check('schema 1', doc.get('schema') == 1, doc.get('schema'))
    check('the device is softverbs0 with its GIDs and libraries',
          doc['device']['name'] == 'softverbs0' and any(g['gid'] == '::ffff:127.0.0.1' for g in doc['device']['gids'])
          and os.path.isfile(os.path.join(doc['device']['libraries'], 'libibverbs.so.1'))
          and doc['device']['ports'][0]['max_mtu'] == 4096
          and doc['device']['ports'][0]['active_mtu'] in (256, 512, 1024, 2048, 4096), doc['device'])
    check('the registry is this test\'s host', doc['registry']['name'].endswith(os.environ['SOFTVERBS_HOST']),
          doc['registry'])
    procs = {p['pid']: p for p in doc['processes']}
    check('both holders are listed with their QP counts',
          procs.get(a['pid'], {}).get('qps') == len(a['qps']) and procs.get(b['pid'], {}).get('qps') == 1, procs)
    check('neither holds memory keys, SRQs or XRC domains',
          all(procs[p]['memory_keys'] == 0 and procs[p]['srqs'] == 0 and procs[p]['xrc_domains'] == 0
              for p in (a['pid'], b['pid'])), procs)
    qps = {q['qpn']: q for q in doc['qps']}
    check('exactly the holders\' QPs are listed', sorted(qps) == sorted(list(a['qps'].values()) + [b['qps']['x']]),
          sorted(qps))
    expect = {  # name: (type, state, dest, peer pid)
        'rc_pair_a': ('RC', 'RTS', a['qps']['rc_pair_b'], a['pid']),
        'rc_pair_b': ('RC', 'RTS', a['qps']['rc_pair_a'], a['pid']),
        'ud': ('UD', 'RTS', None, None),
        'uc_reset': ('UC', 'RESET', None, None),
        'rc_init': ('RC', 'INIT', None, None),
        'x': ('RC', 'RTS', b['qps']['x'], b['pid']),
    }
    for name, (qpt, state, dest, peer) in expect.items():
        q = qps.get(a['qps'][name], {})
        got = (q.get('pid'), q.get('type'), q.get('state'), q.get('dest_qpn'), q.get('peer_pid'))
        check(f'{name}: {qpt} {state} peer {dest} (pid {peer})', got == (a['pid'], qpt, state, dest, peer), got)
    q = qps.get(b['qps']['x'], {})
    got = (q.get('pid'), q.get('type'), q.get('state'), q.get('dest_qpn'), q.get('peer_pid'))
    check('b\'s x: RC RTS connected back to a\'s x', got == (b['pid'], 'RC', 'RTS', a['qps']['x'], a['pid']), got)
    # Everything here stays on the host: a process that answers for the wire has sent and received
    # nothing there, and no QP has wire counters.
    check('nothing went on the wire: zero device counters, no per-QP wire counters',
          all(p['wire'] is None or (p['wire']['counters'].get('sent') == 0 and p['wire']['counters'].get('received') == 0)
              for p in doc['processes']) and all(q['counters'] == {} for q in doc['qps'])
          and doc['wire_error'] is None, doc['processes'])
    # ... so neither spends a receive system call per empty ibv_poll_cq (busy polling, docs/wire.md).
    check('no busy polling of the wire in processes that stay on the host',
          all(p['wire'] is None or p['wire']['counters'].get('busy_polling') == 0 for p in doc['processes']),
          doc['processes'])

    # The readable format: the same tables and QPs.
    text = subprocess.run([sv, 'status'], capture_output=True, text=True, timeout=30).stdout
    qps_line = next((l for l in text.splitlines() if l.startswith('  QPs ')), '')
    check('readable: the QP table counts both holders',
          f"pid {a['pid']}: {len(a['qps'])}" in qps_line and f"pid {b['pid']}: 1" in qps_line, qps_line)
    x = f"  qp {a['qps']['x']:#x}  pid {a['pid']}  RC RTS  peer qp {b['qps']['x']:#x} (pid {b['pid']})"
    check('readable: a QP line with type, state and peer', x in text.splitlines(), text)
    check('readable: the wire section', any(l.startswith('wire (RoCEv2)') for l in text.splitlines()), text)
finally:
    # Closing their stdin ends them normally: the last one removes the host's registry.
    for h in holders:
        try:
            h.stdin.close()
            h.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            h.kill()
            h.wait()
print(f'status_json: {passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
