#!/usr/bin/env python3
"""Every symbol of libibverbs' version map is named in docs/support-matrix.md, and the generated
matrices of the other libraries are current. Usage: check_support_matrix.py <source dir>"""
import re
import subprocess
import sys
from pathlib import Path


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    doc = (root / "docs/support-matrix.md").read_text()
    names = set(re.findall(r"^\s+(\w+);$", (root / "abi/verbs/libibverbs.map").read_text(), re.M))
    missing = sorted(n for n in names if f"`{n}`" not in doc and f"`{n}@" not in doc)
    for n in missing:
        print(f"docs/support-matrix.md does not mention `{n}`")
    gen = subprocess.run([sys.executable, str(root / "tools/dev/gen_support_matrix.py"), "--check"],
                         capture_output=True, text=True)
    if gen.returncode != 0:
        print(gen.stdout + gen.stderr)
    ok = not missing and gen.returncode == 0
    print(f"{'1 passed, 0 failed' if ok else '0 passed, 1 failed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
