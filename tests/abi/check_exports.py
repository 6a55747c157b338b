#!/usr/bin/env python3
"""The drop-in libraries export every (symbol, version) the installed rdma-core libraries export.

The installed libraries are the checklist (DESIGN.md section 2): any symbol or version they define
that ours lacks fails the test, hidden compatibility versions ("(IBVERBS_1.0)") included.
IBVERBS_PRIVATE_* symbols are provider-internal; of those only the ones real programs use must be
present. Usage: check_exports.py <our lib dir> [<rdma-core lib dir>]
"""
import subprocess
import sys
from pathlib import Path

LIBS = ["libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"]
REQUIRED_PRIVATE = {"libibverbs.so.1": {("IBVERBS_PRIVATE_34", "ibv_query_gid_type")}}


def exports(path):
    out = subprocess.run(["objdump", "-T", str(path)], check=True, capture_output=True, text=True).stdout
    result = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6 or "*UND*" in line:
            continue
        result.add((parts[-2], parts[-1]))  # ("IBVERBS_1.1" or "(IBVERBS_1.0)", name)
    return result


def main():
    ours_dir = Path(sys.argv[1])
    real_dir = Path(sys.argv[2] if len(sys.argv) > 2 else "/usr/lib/x86_64-linux-gnu")
    failures = 0
    for lib in LIBS:
        real = {e for e in exports(real_dir / lib) if "PRIVATE" not in e[0]}
        ours = exports(ours_dir / lib)
        missing = sorted(real - ours)
        missing += sorted(REQUIRED_PRIVATE.get(lib, set()) - ours)
        print(f"{lib}: rdma-core exports {len(real)} public (symbol, version) pairs; "
              f"softverbs misses {len(missing)}")
        for version, name in missing:
            print(f"  missing {name}@{version.strip('()')}{' (hidden compat)' if version.startswith('(') else ''}")
        failures += len(missing)
        soname = subprocess.run(["objdump", "-p", str(ours_dir / lib)], capture_output=True, text=True).stdout
        if f"SONAME               {lib}" not in soname:
            print(f"  wrong SONAME in {lib}")
            failures += 1
    passed = len(LIBS) if failures == 0 else 0
    print(f"{passed} passed, {len(LIBS) - passed} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
