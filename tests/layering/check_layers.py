#!/usr/bin/env python3
"""The layering of DESIGN.md section 4, checked on every #include of the tree.

Dependencies point down (abi -> core -> transport -> fabric -> base; cm -> base), a transport
role never knows which fabric moves its bytes, the wire and host fabrics of fabric/ do not know
each other, and only abi/ sees rdma-core's headers. Every source includes project headers by
their path from the root ("layer/sub/file.h"), so the first folders of that path name the
layer; this check fails the build's test run on any include the rules below do not allow.

Usage: check_layers.py <source root>
"""
import os
import re
import sys

# Folder of the including file (longest prefix wins) -> include prefixes it may use.
TRANSPORT_TOP = r'transport/[a-z_]+\.h'
RULES = {
    'base/': [r'base/'],
    'fabric/packet/': [r'base/', r'fabric/packet/'],
    'fabric/host/': [r'base/', r'fabric/host/'],
    'fabric/wire/': [r'base/', r'fabric/wire/', r'fabric/packet/'],
    'fabric/raw/': [r'base/', r'fabric/raw/', r'fabric/packet/'],
    # The transport's shared layouts and key module live in shared memory (fabric/host); its
    # fabrics each see their own fabric/ folder; none sees another's.
    'transport/': [r'base/', r'fabric/host/', TRANSPORT_TOP],
    'transport/host/': [r'base/', r'fabric/host/', TRANSPORT_TOP, r'transport/host/'],
    # The wire runs the same responder on a QP found in the host registry (transport/README.md).
    'transport/wire/': [r'base/', r'fabric/', TRANSPORT_TOP, r'transport/wire/', r'transport/host/host_target\.h'],
    'transport/raw/': [r'base/', r'fabric/host/', r'fabric/raw/', TRANSPORT_TOP, r'transport/raw/'],
    'core/': [r'base/', r'fabric/', r'transport/', r'core/'],
    'cm/': [r'base/', r'cm/'],
    'abi/': [r'base/', r'fabric/', r'transport/', r'core/', r'cm/', r'abi/'],
    'tools/': [r'base/', r'fabric/', r'transport/', r'core/', r'tools/'],
}
# The roles (one per file) talk to the fabrics only through link.h / target_qp.h.
ROLES = ('transport/requester.', 'transport/responder.', 'transport/completer.')
ROLE_ALLOWED = [r'base/', TRANSPORT_TOP,
                # Known, to be replaced by a key-module interface in transport/ (a requester
                # resolves its local keys through the host registry today).
                r'fabric/host/host_directory\.h']
RDMA_CORE = re.compile(r'#\s*include\s*<(infiniband|rdma)/')
PROJECT = re.compile(r'#\s*include\s*"([^"]+)"')


def rule_for(path):
    best = None
    for folder in RULES:
        if path.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return best


def check(root):
    problems = []
    for top in RULES:
        if '/' in top.rstrip('/'):
            continue
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith(('.h', '.cc', '.c')):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                allowed = ROLE_ALLOWED if path.startswith(ROLES) else RULES[rule_for(path)]
                with open(os.path.join(root, path), encoding='utf-8') as f:
                    for n, line in enumerate(f, 1):
                        if RDMA_CORE.match(line) and not path.startswith('abi/'):
                            problems.append(f'{path}:{n}: rdma-core header outside abi/: {line.strip()}')
                        m = PROJECT.match(line)
                        if not m or '/' not in m.group(1):
                            continue  # a system header, or a sibling by bare name
                        inc = m.group(1)
                        if not any(re.match(a, inc) for a in allowed):
                            problems.append(f'{path}:{n}: {inc} may not be included from {rule_for(path)} '
                                            '(DESIGN.md section 4)')
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    problems = check(root)
    for p in problems:
        print(p)
    print(f'{len(problems)} include(s) against the layering')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
