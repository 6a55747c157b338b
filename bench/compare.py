#!/usr/bin/python3
"""softverbs vs UCX, side by side in one run on this machine.

Runs Debian's perftest (unmodified) over softverbs0 and UCX's ucx_perftest over shared memory,
each as a server and a client process on localhost, plus memcpy (the physical limit) and two
QP-lifecycle programs of this folder; prints a table (metric, softverbs, UCX, ratio, target)
and writes results/latest.csv, results/latest.log and results/latest.png.

Usage: bench/run.sh [--lib DIR] [--quick] [--repeat N] [--ucx-tls TLS] [--no-pin] [--no-plot]
Installs nothing: it says what is missing. See bench/README.md.
"""

import argparse
import atexit
import csv
import datetime
import glob
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PID = os.getpid()
HOST = f"bench-{PID}"  # SOFTVERBS_HOST: a host of our own, removed from /dev/shm at the end

SIZES = [8, 64, 512, 4096, 32768, 262144, 1048576]
MIB = 1048576

# Targets from the issue. kind: "max_ratio" (softverbs/UCX must be <=), "min_ratio" (>=),
# "max_abs" / "min_abs" / "below_abs" (the softverbs value itself: <=, >=, <).
TARGETS = {
    # Issue 16: default perftest buffers (private memalign memory, moved into a memfd at
    # registration), against UCX over shared memory in the same run.
    "send_lat": ("max_ratio", 1.5, "<= 1.5x UCX"),
    "write_lat": ("max_ratio", 1.5, "<= 1.5x UCX"),
    "write_bw": ("min_ratio", 0.9, ">= 0.9x UCX"),
    "read_bw": ("min_ratio", 0.9, ">= 0.9x UCX"),
    "atomic_fadd": ("min_ratio", 0.5, ">= 0.5x UCX fadd"),
    # perftest's buffers in a shared file (--mmap): must not regress (issue 16).
    "write_lat_mmap": ("max_ratio", 4.0, "<= 4x UCX"),
    "write_lat_mmap_abs": ("max_abs", 1.0, "<= 1.0 us"),
    "write_bw_mmap": ("min_ratio", 0.8, ">= 0.8x UCX"),
    "read_bw_mmap": ("min_ratio", 0.8, ">= 0.8x UCX"),
    "qp_lifecycle": ("min_abs", 200000, ">= 200,000/s"),
    "qp_scale": ("below_abs", 2.0, "< 2 s"),
}

# ---------------------------------------------------------------------------------------------
# Processes: every one we start is remembered by PID and killed by PID (TERM, then KILL).

LIVE = {}  # pid -> Popen
LOG = []   # lines for results/latest.log
WORK = None  # temporary folder of this run (outputs, compiled programs), made in main()


def log(line):
    LOG.append(line)


def kill_pid(p):
    if p.poll() is not None:
        LIVE.pop(p.pid, None)
        return
    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    LIVE.pop(p.pid, None)


def cleanup():
    for p in list(LIVE.values()):
        kill_pid(p)
    for path in glob.glob(f"/dev/shm/softverbs-*-{HOST}") + glob.glob(f"/dev/shm/{HOST}-mmap-*"):
        try:
            os.unlink(path)
        except OSError:
            pass
    if WORK:
        shutil.rmtree(WORK, ignore_errors=True)


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def start(cmd, env, out_path):
    f = open(out_path, "w")
    p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    f.close()
    LIVE[p.pid] = p
    return p


def finish(p, deadline):
    """Waits for p until the absolute deadline; kills it by PID if it is late. Returns rc or None."""
    try:
        rc = p.wait(timeout=max(0.1, deadline - time.monotonic()))
        LIVE.pop(p.pid, None)
        return rc
    except subprocess.TimeoutExpired:
        kill_pid(p)
        return None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Ports: a free TCP port per run, in a range apart from perftest's and UCX's defaults.

USED_PORTS = set()


def free_port():
    for _ in range(200):
        port = random.randint(30000, 45000)
        if port in USED_PORTS:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            continue
        finally:
            s.close()
        USED_PORTS.add(port)
        return port
    raise RuntimeError("no free TCP port found")


def listening(port):
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def client_server(name, server_cmd, client_cmd, env, port, timeout):
    """Starts the server, waits until it listens on port, runs the client; both bounded by timeout.
    Returns (ok, client output)."""
    tag = f"{name}-{port}".replace("/", "_")  # names files: a path in an option (--mmap) must not
    s_out, c_out = os.path.join(WORK, tag + ".server"), os.path.join(WORK, tag + ".client")
    deadline = time.monotonic() + timeout
    server = start(server_cmd, env, s_out)
    while not listening(port):
        if server.poll() is not None or time.monotonic() > deadline:
            kill_pid(server)
            log(f"FAIL {name}: server did not listen on port {port}\n  $ {' '.join(server_cmd)}\n"
                + indent(read(s_out)))
            return False, ""
        time.sleep(0.01)
    client = start(client_cmd, env, c_out)
    crc = finish(client, deadline)
    src = finish(server, deadline if crc is not None else time.monotonic() + 3)
    out = read(c_out)
    ok = crc == 0 and src == 0
    if not ok:
        why = "timed out" if crc is None or src is None else f"client rc={crc}, server rc={src}"
        log(f"FAIL {name} ({why})\n  $ {' '.join(client_cmd)}\n  client:\n{indent(out)}\n"
            f"  server:\n{indent(read(s_out))}")
    return ok, out


def indent(text, n=30):
    lines = text.rstrip().splitlines()[-n:]
    return "\n".join("    " + l for l in lines)


# ---------------------------------------------------------------------------------------------
# softverbs over Debian's perftest.

def pin(cmd, cpu, args):
    if args.no_pin or cpu is None:
        return cmd
    return ["taskset", "-c", str(cpu)] + cmd


def perftest_iters(test, size, quick):
    if test.endswith("_lat"):
        n = 10000 if size <= 4096 else 5000 if size <= 262144 else 2000
    elif test == "ib_atomic_bw":
        n = 200000  # as many as ucx_perftest's ucp_add / ucp_fadd: a short run is mostly ramp
    else:
        n = 5000 if size < MIB else 2000
    return max(100, n // 5) if quick else n


def parse_perftest(out, size):
    """Result row of perftest whose first column is size: list of floats."""
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] == str(size) and parts[1].isdigit():
            try:
                return [float(x) for x in parts]
            except ValueError:
                continue
    return None


PERFTEST_API = set()


def run_perftest(test, size, args, env, extra=()):
    """`extra` options are given to both sides; "{side}" in one becomes "server" or "client"."""
    port = free_port()
    n = perftest_iters(test, size, args.quick)
    base = [test, "-d", "softverbs0", "-x", "1", "-p", str(port), "-s", str(size), "-n", str(n), "-F"]
    label = " ".join([test] + list(extra))  # names the run in the log
    server = base + [x.replace("{side}", "server") for x in extra]
    client = base + [x.replace("{side}", "client") for x in extra] + ["127.0.0.1"]
    ok, out = client_server(f"{label} -s {size}", pin(server, 0, args), pin(client, 1, args),
                            env, port, args.timeout)
    if not ok:
        return None
    for line in out.splitlines():
        if "ibv_wr* API" in line:
            PERFTEST_API.add(line.split(":", 1)[1].strip())
    row = parse_perftest(out, size)
    if row is None:
        log(f"FAIL {label} -s {size}: no result row\n{indent(out)}")
        return None
    log(f"ok   {label} -s {size} -n {n}: {' '.join(f'{x:g}' for x in row)}")
    if test.endswith("_lat"):
        return row[4]  # t_typical (median), usec
    if test == "ib_atomic_bw":
        return row[4]  # MsgRate, Mpps
    return row[3] * MIB / 1e9  # BW average, MiB/s -> GB/s


# ---------------------------------------------------------------------------------------------
# UCX ucx_perftest over shared memory.

UCX_TEST = {"ib_send_lat": "tag_lat", "ib_write_lat": "ucp_put_lat", "ib_write_bw": "ucp_put_bw",
            "ib_read_bw": "ucp_get", "ib_atomic_bw": "ucp_add"}


def ucx_iters(test, size, quick):
    if test.endswith("_lat"):
        n = 10000 if size <= 4096 else 5000 if size <= 262144 else 2000
    elif test in ("ucp_add", "ucp_fadd"):
        n = 200000
    else:
        n = 20000 if size <= 4096 else 5000 if size < MIB else 2000
    return max(100, n // 5) if quick else n


def run_ucx(test, size, args, env):
    port = free_port()
    n = ucx_iters(test, size, args.quick)
    base = ["ucx_perftest", "-t", test, "-s", str(size), "-n", str(n), "-w", str(max(10, n // 10)),
            "-p", str(port), "-f"]
    ok, out = client_server(f"ucx {test} -s {size}", pin(base, 0, args),
                            pin(["ucx_perftest", "127.0.0.1"] + base[1:], 1, args), env, port, args.timeout)
    if not ok:
        return None
    row = None
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 8:
            try:
                row = [float(x) for x in parts]
            except ValueError:
                pass
    if row is None:
        log(f"FAIL ucx {test} -s {size}: no result row\n{indent(out)}")
        return None
    log(f"ok   ucx {test} -s {size} -n {n}: {' '.join(f'{x:g}' for x in row)}")
    if test.endswith("_lat"):
        return row[1]  # 50%ile latency, usec (one-way, like perftest's)
    if test in ("ucp_add", "ucp_fadd"):
        return row[7] / 1e6  # overall message rate -> Mops/s
    return row[5] * MIB / 1e9  # overall bandwidth, MiB/s -> GB/s


# ---------------------------------------------------------------------------------------------
# The C programs of this folder.

def compile_c(name, libs, args):
    exe = os.path.join(WORK, name)
    cmd = [args.cc, "-O2", "-Wall", "-Wextra", "-o", exe, os.path.join(HERE, name + ".c")] + libs
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        log(f"FAIL compile {name}\n  $ {' '.join(cmd)}\n{indent(r.stdout + r.stderr)}")
        print(f"  compiling {name}.c failed (see results/latest.log)")
        return None
    return exe


def run_program(cmd, env, timeout, name):
    out_path = os.path.join(WORK, name + ".out")
    p = start(cmd, env, out_path)
    rc = finish(p, time.monotonic() + timeout)
    out = read(out_path)
    if rc != 0:
        log(f"FAIL {name} ({'timed out' if rc is None else f'rc={rc}'})\n  $ {' '.join(cmd)}\n{indent(out)}")
        return None
    log(f"ok   {name}: " + " ".join(l.strip() for l in out.splitlines()))
    return out


def keyvals(out):
    kv = {}
    for line in (out or "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            kv[k.strip()] = v.strip()
    return kv


# ---------------------------------------------------------------------------------------------
# Requirements: say what is missing, install nothing.

def check_requirements(args):
    fatal, soft = [], []
    lib = args.lib
    if not os.path.exists(os.path.join(lib, "libibverbs.so.1")):
        fatal.append(f"softverbs libraries: {lib}/libibverbs.so.1 not found — build first: "
                     f"cmake -S {REPO} -B {REPO}/build && cmake --build {REPO}/build -j  (or pass --lib DIR)")
    missing_pt = [t for t in UCX_TEST if not shutil.which(t)]
    if missing_pt:
        fatal.append(f"perftest ({', '.join(missing_pt)}): apt-get install -y perftest")
    if not shutil.which(args.cc):
        fatal.append(f"C compiler '{args.cc}': apt-get install -y gcc")
    if not os.path.exists("/usr/include/infiniband/verbs.h"):
        fatal.append("rdma-core headers: apt-get install -y libibverbs-dev")
    if not args.no_pin and not shutil.which("taskset"):
        soft.append("taskset (util-linux) not found: processes run unpinned")
        args.no_pin = True
    have_ucx = bool(shutil.which("ucx_perftest"))
    if not have_ucx:
        soft.append("ucx_perftest not found: the UCX column stays empty — apt-get install -y ucx-utils")
    have_mpl = False
    if not args.no_plot:
        import importlib.util
        have_mpl = importlib.util.find_spec("matplotlib") is not None
        if not have_mpl:
            soft.append("matplotlib not found: no plot — apt-get install -y python3-matplotlib "
                        "(and run with /usr/bin/python3)")
    return fatal, soft, have_ucx, have_mpl


# ---------------------------------------------------------------------------------------------

def machine_info(args):
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        rev += " (+local changes)" if dirty else ""
    except (OSError, subprocess.SubprocessError):
        rev = "?"
    ucx = "?"
    if shutil.which("ucx_info"):
        try:
            ucx = subprocess.run(["ucx_info", "-v"], capture_output=True, text=True,
                                 timeout=10).stdout.splitlines()[0].lstrip("# ").strip()
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    try:
        built = datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(args.lib, "libibverbs.so.1"))
                                                ).astimezone().strftime("%Y-%m-%d %H:%M")
    except OSError:
        built = "?"
    return {
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "cpus": str(os.cpu_count()),
        "cpu": cpu,
        "kernel": platform.release(),
        "softverbs": f"repo at {rev}, libraries from {args.lib} (built {built})",
        "ucx": f"{ucx}, UCX_TLS={args.ucx_tls}",
        "load_start": " ".join(open("/proc/loadavg").read().split()[:3]),
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v):
    if v is None:
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.3g}"


def cpu_busy(seconds=1.0):
    """Share of all CPUs busy over the next seconds (/proc/stat): what others use before we start."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    i0, t0 = sample()
    time.sleep(seconds)
    i1, t1 = sample()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def verdict(key, sv, ucx):
    if key not in TARGETS:
        return "", ""
    kind, bound, text = TARGETS[key]
    if kind.endswith("ratio"):
        if sv is None or ucx is None or ucx == 0:
            return text, "n/a"
        v = sv / ucx
    else:
        if sv is None:
            return text, "n/a"
        v = sv
    ok = v <= bound if kind.startswith("max") else v < bound if kind.startswith("below") else v >= bound
    return text, "PASS" if ok else "MISS"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("SOFTVERBS_LIB", os.path.join(REPO, "build", "lib")),
                    help="softverbs build/lib (default: $SOFTVERBS_LIB or <repo>/build/lib)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="output folder")
    ap.add_argument("--quick", action="store_true", help="fewer iterations, one repetition (smoke run)")
    ap.add_argument("--summary-only", action="store_true",
                    help="only the sizes of the summary table (8 B latencies, 1 MiB bandwidths): no sweep")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions of each point; the median is kept")
    ap.add_argument("--ucx-tls", default=os.environ.get("BENCH_UCX_TLS", "posix,self"),
                    help="UCX_TLS for ucx_perftest (default posix,self; sm,self also works)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server to CPU 0 and client to CPU 1")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--timeout", type=float, default=60, help="seconds allowed for one client+server run")
    ap.add_argument("--qps", type=int, default=10000, help="QPs of the scale run")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    args = ap.parse_args()
    args.lib = os.path.abspath(args.lib)
    if args.quick:
        args.repeat = 1
    if (os.cpu_count() or 1) < 2:
        args.no_pin = True

    global WORK
    atexit.register(cleanup)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    WORK = tempfile.mkdtemp(prefix=f"softverbs-bench-{PID}-")

    fatal, soft, have_ucx, have_mpl = check_requirements(args)
    for m in soft:
        print("note: " + m)
    if fatal:
        print("missing (this script installs nothing):")
        for m in fatal:
            print("  - " + m)
        return 2

    info = machine_info(args)
    info["cpu_busy_before"] = f"{cpu_busy():.0%}"
    print(f"softverbs bench — {info['date']}, {info['cpus']} CPUs ({info['cpu']}), kernel {info['kernel']}")
    print(f"  softverbs {info['softverbs']}, SOFTVERBS_HOST={HOST}")
    print(f"  UCX {info['ucx']}; pinning: {'off' if args.no_pin else 'server CPU 0, client CPU 1'}; "
          f"repeat {args.repeat}, median kept; load average at start {info['load_start']}")
    if float(info["cpu_busy_before"].rstrip("%")) > 10:
        print(f"  WARNING: other processes keep {info['cpu_busy_before']} of the CPUs busy: the numbers "
              "will be noisy (run on an idle machine)")

    sv_env = dict(os.environ, LD_LIBRARY_PATH=args.lib, SOFTVERBS_HOST=HOST)
    sv_env.pop("SOFTVERBS_LOG", None)
    ucx_env = dict(os.environ, UCX_TLS=args.ucx_tls)
    ucx_env.pop("LD_LIBRARY_PATH", None)

    t_start = time.monotonic()
    # ---- perftest vs ucx_perftest, interleaved so that load drift hits both alike.
    sizes = {"ib_send_lat": [8], "ib_write_lat": [8], "ib_write_bw": [MIB], "ib_read_bw": [MIB]}
    plan = [(t, s) for t in ("ib_send_lat", "ib_write_lat", "ib_write_bw", "ib_read_bw")
            for s in (sizes[t] if args.summary_only else SIZES)]
    plan.append(("ib_atomic_bw", 8))
    # Reported without a UCX pair (ucx_perftest has no get or atomic latency test).
    alone_plan = [("ib_read_lat", 8), ("ib_atomic_lat", 8)]
    # The process_vm path in the same run: private memory left where it is
    # (SOFTVERBS_PRIVATE_SHARE=0), as before issue 16.
    cma_plan = [("ib_write_lat", 8), ("ib_write_bw", MIB), ("ib_read_bw", MIB), ("ib_atomic_bw", 8)]
    cma_env = dict(sv_env, SOFTVERBS_PRIVATE_SHARE="0")
    # DC (perftest -c DC: DCIs and DCTs through mlx5dv) against RC, both under the mlx5 identity so
    # that perftest takes the same ibv_wr* posting path for both; UCX has no shared-memory DC.
    dc_plan = [("ib_send_lat", 8), ("ib_write_lat", 8), ("ib_write_bw", MIB), ("ib_read_bw", MIB),
               ("ib_atomic_bw", 8)]
    dc_env = dict(sv_env, SOFTVERBS_MLX5_IDENTITY="1")
    # perftest --mmap=<file>: buffers in a MAP_SHARED file (one per side, made here, 64 MiB, as
    # perftest maps but never creates it) instead of private memalign memory.
    mmap_plan = [("ib_write_lat", 8), ("ib_write_bw", MIB), ("ib_read_bw", MIB)]
    mmap_files = f"/dev/shm/{HOST}-mmap-{{side}}"
    for side in ("server", "client"):
        with open(mmap_files.replace("{side}", side), "wb") as f:
            f.truncate(64 * MIB)
    mm = {k: [] for k in mmap_plan}
    dc = {k: [] for k in dc_plan}
    rc_id = {k: [] for k in dc_plan}
    sv = {k: [] for k in plan}
    ux = {k: [] for k in plan}
    fadd = []
    alone = {k: [] for k in alone_plan}
    cma_runs = {k: [] for k in cma_plan}
    total = (len(plan) + 2 * len(dc_plan) + len(mmap_plan) + len(alone_plan) + len(cma_plan)) * args.repeat
    done = 0
    tty = sys.stdout.isatty()
    for rep in range(args.repeat):
        if not tty:
            print(f"  pass {rep + 1}/{args.repeat}: perftest and ucx_perftest, {len(plan)} points", flush=True)
        for key in plan:
            test, size = key
            done += 1
            if tty:
                print(f"\r  [{done}/{total}] {test} -s {size}            ", end="", flush=True)
            sv[key].append(run_perftest(test, size, args, sv_env))
            if have_ucx:
                ux[key].append(run_ucx(UCX_TEST[test], size, args, ucx_env))
                if test == "ib_atomic_bw":  # perftest's default atomic fetches: also the fetching UCX op
                    fadd.append(run_ucx("ucp_fadd", size, args, ucx_env))
        for key in dc_plan:
            test, size = key
            done += 2
            if tty:
                print(f"\r  [{done}/{total}] {test} -s {size} -c DC / RC   ", end="", flush=True)
            dc[key].append(run_perftest(test, size, args, dc_env, ["-c", "DC"]))
            rc_id[key].append(run_perftest(test, size, args, dc_env, ["-c", "RC"]))
        for key in mmap_plan:
            test, size = key
            done += 1
            if tty:
                print(f"\r  [{done}/{total}] {test} -s {size} --mmap      ", end="", flush=True)
            mm[key].append(run_perftest(test, size, args, sv_env, [f"--mmap={mmap_files}"]))
        for key in alone_plan:
            done += 1
            alone[key].append(run_perftest(key[0], key[1], args, sv_env))
        for key in cma_plan:
            test, size = key
            done += 1
            if tty:
                print(f"\r  [{done}/{total}] {test} -s {size} process_vm  ", end="", flush=True)
            cma_runs[key].append(run_perftest(test, size, args, cma_env))
    print(f"{chr(13) if tty else ''}  perftest and ucx_perftest: {total} points in "
          f"{time.monotonic() - t_start:.0f} s        ")
    print("  memcpy, QP lifecycle, QP scale", flush=True)
    svm = {k: median(v) for k, v in sv.items()}
    uxm = {k: median(v) for k, v in ux.items()}
    dcm = {k: median(v) for k, v in dc.items()}
    rcm = {k: median(v) for k, v in rc_id.items()}
    mmm = {k: median(v) for k, v in mm.items()}
    alm = {k: median(v) for k, v in alone.items()}
    cmm = {k: median(v) for k, v in cma_runs.items()}

    # ---- memcpy, QP lifecycle, QP scale.
    memcpy = {}
    exe = compile_c("memcpy_bw", [], args)
    if exe:
        out = run_program(pin([exe] + [str(s) for s in SIZES], 1, args), dict(os.environ), 120, "memcpy_bw")
        for line in (out or "").splitlines():
            s, bps = line.split()
            memcpy[int(s)] = float(bps) / 1e9
    cma = {}
    exe = compile_c("cma_floor", [], args)
    if exe:
        cma = keyvals(run_program(pin([exe], 1, args), dict(os.environ), 120, "cma_floor"))
    life = scale = {}
    exe = compile_c("qp_lifecycle", ["-libverbs"], args)
    if exe:
        life = keyvals(run_program(pin([exe, "0.5" if args.quick else "2"], 1, args), sv_env, 120,
                                   "qp_lifecycle"))
    exe = compile_c("qp_scale", ["-libverbs"], args)
    if exe:
        scale = keyvals(run_program(pin([exe, str(args.qps)], 1, args), sv_env, 300, "qp_scale"))
    info["load_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
    elapsed = time.monotonic() - t_start

    def f(d, k):
        try:
            return float(d[k])
        except (KeyError, ValueError, TypeError):
            return None

    # ---- the table.
    rows = []  # (key, metric, unit, sv, ucx, note)
    rows.append(("send_lat", "ib_send_lat 8 B vs tag_lat (t_typical / median)", "us",
                 svm[("ib_send_lat", 8)], uxm[("ib_send_lat", 8)]))
    rows.append(("write_lat", "ib_write_lat 8 B vs ucp_put_lat", "us",
                 svm[("ib_write_lat", 8)], uxm[("ib_write_lat", 8)]))
    rows.append(("write_lat_abs", "ib_write_lat 8 B, absolute", "us", svm[("ib_write_lat", 8)], None))
    rows.append(("write_bw", "ib_write_bw 1 MiB vs ucp_put_bw", "GB/s",
                 svm[("ib_write_bw", MIB)], uxm[("ib_write_bw", MIB)]))
    rows.append(("read_bw", "ib_read_bw 1 MiB vs ucp_get", "GB/s",
                 svm[("ib_read_bw", MIB)], uxm[("ib_read_bw", MIB)]))
    rows.append(("write_lat_mmap", "ib_write_lat --mmap 8 B vs ucp_put_lat", "us",
                 mmm[("ib_write_lat", 8)], uxm[("ib_write_lat", 8)]))
    rows.append(("write_lat_mmap_abs", "ib_write_lat --mmap 8 B, absolute", "us", mmm[("ib_write_lat", 8)], None))
    rows.append(("write_bw_mmap", "ib_write_bw --mmap 1 MiB vs ucp_put_bw", "GB/s",
                 mmm[("ib_write_bw", MIB)], uxm[("ib_write_bw", MIB)]))
    rows.append(("read_bw_mmap", "ib_read_bw --mmap 1 MiB vs ucp_get", "GB/s",
                 mmm[("ib_read_bw", MIB)], uxm[("ib_read_bw", MIB)]))
    rows.append(("atomic_bw", "ib_atomic_bw 8 B vs ucp_add", "Mops/s",
                 svm[("ib_atomic_bw", 8)], uxm[("ib_atomic_bw", 8)]))
    rows.append(("atomic_fadd", "ib_atomic_bw 8 B vs ucp_fadd (fetching, as perftest's default)",
                 "Mops/s", svm[("ib_atomic_bw", 8)], median(fadd)))
    rows.append(("read_lat", "ib_read_lat 8 B (reported)", "us", alm[("ib_read_lat", 8)], None))
    rows.append(("atomic_lat", "ib_atomic_lat 8 B (reported)", "us", alm[("ib_atomic_lat", 8)], None))
    for (test, size), unit in zip(cma_plan, ("us", "GB/s", "GB/s", "Mops/s")):
        twin = UCX_TEST[test] if test != "ib_atomic_bw" else "ucp_fadd"
        rows.append((f"cma_{test}", f"{test} {'8 B' if size == 8 else '1 MiB'} process_vm path "
                     f"(SOFTVERBS_PRIVATE_SHARE=0) vs {twin}", unit, cmm[(test, size)],
                     median(fadd) if test == "ib_atomic_bw" else uxm.get((test, size))))
    rows.append(("memcpy", "memcpy 1 MiB (physical limit)", "GB/s", memcpy.get(MIB), None))
    rows.append(("qp_lifecycle", "QP create+INIT+RTR+RTS+destroy, one core", "1/s",
                 f(life, "lifecycles_per_s"), None))
    rows.append(("qp_scale", f"{args.qps} RC QPs created + connected", "s", f(scale, "total_s"), None))
    rows.append(("qp_memory", "host memory per QP (VmRSS delta)", "B", f(scale, "bytes_per_qp"), None))

    table = []
    for key, metric, unit, a, b in rows:
        ratio = a / b if a is not None and b else None
        target, status = verdict(key, a, b)
        table.append([metric, unit, fmt(a), fmt(b) if key not in ("write_lat_abs", "write_lat_mmap_abs", "memcpy", "qp_lifecycle", "read_lat", "atomic_lat",
                                                                  "qp_scale", "qp_memory") else "",
                      f"{ratio:.2f}x" if ratio is not None else "", target, status, key, a, b, ratio])
    head = ["metric", "unit", "softverbs", "UCX", "ratio", "target", ""]
    widths = [max(len(str(r[i])) for r in table + [head]) for i in range(7)]
    print("\nratio = softverbs / UCX (latency: lower is better; bandwidth and rate: higher is better)")
    print("  ".join(str(h).ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for r in table:
        print("  ".join(str(c).ljust(w) if i in (0, 1, 5, 6) else str(c).rjust(w)
                        for i, (c, w) in enumerate(zip(r[:7], widths))))
    if memcpy.get(MIB):
        m = memcpy[MIB]
        parts = [f"{name} {v / m:.0%}" for name, v in (("ib_write_bw", svm[("ib_write_bw", MIB)]),
                                                       ("ib_write_bw --mmap", mmm[("ib_write_bw", MIB)]),
                                                       ("ucp_put_bw", uxm[("ib_write_bw", MIB)]),
                                                       ("ib_read_bw", svm[("ib_read_bw", MIB)]),
                                                       ("ib_read_bw --mmap", mmm[("ib_read_bw", MIB)]),
                                                       ("ucp_get", uxm[("ib_read_bw", MIB)])) if v]
        print(f"\n1 MiB as a share of memcpy ({m:.1f} GB/s): " + ", ".join(parts))
    if cma:
        # softverbs runs an RDMA WRITE / READ as one process_vm_writev / readv: its floor.
        wbw, rbw = svm[("ib_write_bw", MIB)], svm[("ib_read_bw", MIB)]
        share = (f"; ib_write_bw at {wbw / float(cma['write_1m_gbps']):.0%}, ib_read_bw at "
                 f"{rbw / float(cma['read_1m_gbps']):.0%} of it") if wbw and rbw else ""
        print(f"process_vm_writev floor (cma_floor.c): 8 B {cma.get('write_8_us')} us per call; 1 MiB "
              f"write {cma.get('write_1m_gbps')} GB/s, read {cma.get('read_1m_gbps')} GB/s{share}")
    if life:
        print(f"QP lifecycle per verb (us): create {life.get('create_us')}, INIT {life.get('init_us')}, "
              f"RTR {life.get('rtr_us')}, RTS {life.get('rts_us')}, destroy {life.get('destroy_us')}")
    if scale:
        print(f"QP scale: create {scale.get('create_s')} s, connect {scale.get('connect_s')} s, destroy "
              f"{scale.get('destroy_s')} s; VmRSS {scale.get('rss_before_kb')} -> "
              f"{scale.get('rss_connected_kb')} kB; RDMA WRITE on first and last pair "
              f"{scale.get('write_check', 'not checked')}")
    print("\nDC vs RC (perftest -c DC / -c RC, both with SOFTVERBS_MLX5_IDENTITY=1)")
    dc_rows = []
    for key in dc_plan:
        test, size = key
        unit = "us" if test.endswith("_lat") else "Mops/s" if test == "ib_atomic_bw" else "GB/s"
        a, b = dcm[key], rcm[key]
        dc_rows.append((f"{test} {size if size < MIB else '1 MiB'}{' B' if size < MIB else ''}", unit, a, b,
                        a / b if a is not None and b else None, test, size))
    dw = max(len(r[0]) for r in dc_rows)
    print(f"  {'metric'.ljust(dw)}  unit    {'DC':>8}  {'RC':>8}  DC/RC")
    for name, unit, a, b, ratio, _, _ in dc_rows:
        print(f"  {name.ljust(dw)}  {unit.ljust(6)}  {fmt(a):>8}  {fmt(b):>8}  "
              f"{f'{ratio:.2f}x' if ratio is not None else 'n/a'}")
    if PERFTEST_API:
        print(f"perftest reported 'ibv_wr* API: {', '.join(sorted(PERFTEST_API))}'")
    print(f"CPU busy before the run {info['cpu_busy_before']}; load average {info['load_start']} at start, "
          f"{info['load_end']} at end; {elapsed:.0f} s")
    failures = [l for l in LOG if l.startswith("FAIL")]
    if failures:
        print(f"\n{len(failures)} run(s) failed (details in results/latest.log):")
        for l in failures:
            print("  " + l.splitlines()[0])

    # ---- files.
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "latest.csv")
    with open(csv_path, "w", newline="") as fcsv:
        w = csv.writer(fcsv)
        w.writerow(["section", "metric", "size_bytes", "unit", "softverbs", "ucx", "ratio", "target", "status"])
        for r in table:
            w.writerow(["summary", r[7], "", r[1], r[8], r[9], r[10], r[5], r[6]])
        for key in plan:
            test, size = key
            unit = "us" if test.endswith("_lat") else "Mops/s" if test == "ib_atomic_bw" else "GB/s"
            a, b = svm[key], uxm[key]
            w.writerow(["sweep", f"{test} vs {UCX_TEST[test]}", size, unit, a, b,
                        a / b if a is not None and b else None, "", ""])
        for s, v in sorted(memcpy.items()):
            w.writerow(["sweep", "memcpy", s, "GB/s", v, "", "", "", ""])
        for key in mmap_plan:
            test, size = key
            unit = "us" if test.endswith("_lat") else "GB/s"
            a, b = mmm[key], uxm[key]
            w.writerow(["mmap", f"{test} --mmap vs {UCX_TEST[test]}", size, unit, a, b,
                        a / b if a is not None and b else None, "", ""])
        for name, unit, a, b, ratio, test, size in dc_rows:  # the "ucx" column holds RC here
            w.writerow(["dc_vs_rc", f"{test} -c DC vs -c RC", size, unit, a, b, ratio, "", ""])
        for k, v in cma.items():
            w.writerow(["cma_floor", k, "", "", v, "", "", "", ""])
        for k, v in life.items():
            w.writerow(["qp_lifecycle", k, "", "", v, "", "", "", ""])
        for k, v in scale.items():
            w.writerow(["qp_scale", k, "", "", v, "", "", "", ""])
        for k, v in info.items():
            w.writerow(["machine", k, "", "", v, "", "", "", ""])
    with open(os.path.join(args.out, "latest.log"), "w") as flog:
        flog.write("\n".join(f"{k}: {v}" for k, v in info.items()) + "\n\n" + "\n".join(LOG) + "\n")
    print(f"\nwrote {csv_path}")

    if have_mpl:
        plot(args, svm, uxm, memcpy, info)
    elif not args.no_plot:
        print("no plot: matplotlib missing (apt-get install -y python3-matplotlib)")
    return 1 if failures else 0


def plot(args, svm, uxm, memcpy, info):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    series = [
        (ax1, "ib_send_lat", "softverbs ib_send_lat", "UCX tag_lat", "tab:blue"),
        (ax1, "ib_write_lat", "softverbs ib_write_lat", "UCX ucp_put_lat", "tab:orange"),
        (ax2, "ib_write_bw", "softverbs ib_write_bw", "UCX ucp_put_bw", "tab:blue"),
        (ax2, "ib_read_bw", "softverbs ib_read_bw", "UCX ucp_get", "tab:orange"),
    ]
    for ax, test, sv_label, ux_label, color in series:
        xs = [s for s in SIZES if svm.get((test, s)) is not None]
        ax.plot(xs, [svm[(test, s)] for s in xs], "o-", color=color, label=sv_label)
        xs = [s for s in SIZES if uxm.get((test, s)) is not None]
        if xs:
            ax.plot(xs, [uxm[(test, s)] for s in xs], "s--", color=color, alpha=0.6, label=ux_label)
    if memcpy:
        xs = sorted(memcpy)
        ax2.plot(xs, [memcpy[s] for s in xs], ":", color="gray", label="memcpy (one core)")
    for ax, title, ylabel in ((ax1, "latency (median, one-way)", "µs"),
                              (ax2, "bandwidth", "GB/s (10^9 B/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"softverbs vs UCX ({info['ucx'].split(',')[0]}, UCX_TLS={args.ucx_tls}) — "
                 f"{info['date']}, {info['cpus']} CPUs", fontsize=10)
    fig.tight_layout()
    path = os.path.join(args.out, "latest.png")
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
