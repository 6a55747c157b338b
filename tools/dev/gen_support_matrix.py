#!/usr/bin/env python3
"""Writes docs/support/{rdmacm,mlx5dv,efa}.md from the code of the drop-in libraries.

The matrix is derived, not hand-kept: every (symbol, version) of a library's version map must be
defined in its sources exactly once, either by a refusal macro (the macro names the C convention
and the errno) or by a function carrying a comment

    // support: <symbol>[@<version>] | <status> | <note>

Anything unaccounted for, or accounted for twice, is an error. With --check the files are not
written; the script fails if they are stale (for CI).

    tools/dev/gen_support_matrix.py [--check]
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Refusal macros: name -> (status, note). The note states the C convention the caller sees.
MACROS = {
    "SV_MLX5_NULL": ("EOPNOTSUPP", "NULL + errno"),
    "SV_MLX5_ERRNO": ("EOPNOTSUPP", "returns EOPNOTSUPP (positive errno)"),
    "SV_MLX5_NEG_ERRNO": ("EOPNOTSUPP", "returns -EOPNOTSUPP"),
    "SV_MLX5_MINUS_ONE": ("EOPNOTSUPP", "{minus_one} + errno"),
    "SV_MLX5_VOID": ("EOPNOTSUPP", "returns nothing; logs the refusal, touches nothing"),
    "SV_CM_NULL": ("EOPNOTSUPP", "NULL + errno"),
    "SV_CM_MINUS_ONE": ("EOPNOTSUPP", "-1 + errno"),
    "SV_CM_VOID": ("EOPNOTSUPP", "returns nothing; logs the refusal, touches nothing"),
    "SV_RSOCKET": ("ENOSYS", "{minus_one} + errno ENOSYS: rsockets are not provided by softverbs"),
}

LIBS = {
    "efa": {
        "title": "libefa.so.1 (efadv)",
        "dir": "abi/efa",
        "map": "abi/efa/libefa.map",
        "intro": "softverbs0 is never an EFA device. The library exists so that programs and "
                 "pyverbs (`pyverbs.providers.efa`) that link it load; every entry point refuses "
                 "with `EOPNOTSUPP` and logs \"softverbs0 is not an EFA device\".",
    },
    "mlx5dv": {
        "title": "libmlx5.so.1 (mlx5 direct verbs)",
        "dir": "abi/mlx5dv",
        "map": "abi/mlx5dv/libmlx5.map",
        "intro": "`mlx5dv_create_qp` (RC/UC/UD and DC: DCT, DCI, DCI streams), "
                 "`mlx5dv_qp_ex_from_ibv_qp_ex` (`mlx5dv_wr_set_dc_addr`, "
                 "`mlx5dv_wr_set_dc_addr_stream`, `mlx5dv_wr_mr_list`, `mlx5dv_wr_mr_interleaved`, "
                 "`mlx5dv_wr_mkey_configure` with its access and layout setters), "
                 "`mlx5dv_dci_stream_id_reset`, `mlx5dv_map_ah_to_qp`, indirect mkeys "
                 "(`mlx5dv_create_mkey`, `mlx5dv_mkey_check`), `mlx5dv_open_device` and "
                 "`mlx5dv_query_device` work on softverbs0; `mlx5dv_is_supported` is true only "
                 "with `SOFTVERBS_MLX5_IDENTITY=1` ([device.md](../device.md)). Every other entry "
                 "point refuses with `EOPNOTSUPP` through the convention of its man page: signature "
                 "mkeys are not offered (`sig_caps` reads 0: the block signatures are computed, no "
                 "data path applies them yet); `mlx5dv_create_flow_matcher` / `mlx5dv_create_flow` "
                 "(their match criteria and values are mlx5's PRM `fte_match_param` bit layout, not "
                 "decoded here) and `mlx5dv_create_wq` (its striding RQ has no software use) are "
                 "refused: raw QPs take the same rules through `ibv_create_flow` and their WQs through "
                 "`ibv_create_wq` ([raw-packet.md](../raw-packet.md)); DEVX, steering (`mlx5dv_dr_*`), "
                 "crypto and VFIO will stay unsupported.",
    },
    "rdmacm": {
        "title": "librdmacm.so.1 (RDMA connection manager, rsockets)",
        "dir": "abi/rdmacm",
        "map": "abi/rdmacm/librdmacm.map",
        "intro": "The connection manager runs between the processes of one host "
                 "([cm.md](../cm.md)): event channels, identifiers, address and route "
                 "resolution, `rdma_create_qp`, connections (RC, UC) and UD lookups (SIDR), "
                 "`rdma_getaddrinfo`, `rdma_create_ep`, basic SRQs, multicast joins and the "
                 "synchronous mode are implemented. ECE refuses with `EOPNOTSUPP`; rsockets "
                 "are not provided: every `r*` call returns -1 with errno `ENOSYS`.",
    },
}

LEGEND = """\
Status: **implemented** — does its whole job; **stub** — safe on every argument it can receive
today, but not the real function yet; **EOPNOTSUPP** / **ENOSYS** — refuses with that errno
through the C convention in the note. With `SOFTVERBS_LOG=error` every refusal logs one line
naming the function and the rule."""


def version_key(v):
    return [int(n) for n in re.findall(r"\d+", v)]


def read_map(path):
    """(symbol, version) pairs of a linker version map."""
    pairs = []
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    for m in re.finditer(r"(\w+(?:\.\w+)*)\s*\{(.*?)\}", text, flags=re.S):
        version, body = m.group(1), m.group(2)
        body = body.split("local:")[0].replace("global:", "")
        for sym in re.findall(r"(\w+)\s*;", body):
            pairs.append((sym, version))
    return pairs


def read_sources(libdir):
    """symbol[@version] -> (status, note, area) from the macros and support comments."""
    found = {}
    # name, then the second argument: the return type for the macros that take one.
    macro_re = re.compile(r"^(" + "|".join(MACROS) + r")\(\s*(\w+)\s*,\s*([^,)]*)", re.M)
    note_re = re.compile(r"//\s*support:\s*([\w@.]+)\s*\|\s*([^|]+?)\s*\|\s*(.+?)\s*$", re.M)
    for src in sorted(libdir.glob("*.cc")):
        text = src.read_text()
        area = src.stem
        entries = []
        for m in macro_re.finditer(text):
            status, note = MACROS[m.group(1)]
            rtype = m.group(3).strip()
            # -1 converted to the return type: riomap's off_t, riowrite's size_t (SIZE_MAX).
            minus_one = "-1" if rtype in ("int", "ssize_t") else f"({rtype})-1"
            entries.append((m.group(2), status, note.format(minus_one=minus_one)))
        entries += [(m.group(1), m.group(2), m.group(3)) for m in note_re.finditer(text)]
        for key, status, note in entries:
            if key in found:
                sys.exit(f"{src}: {key} is defined twice (also in {found[key][2]}.cc)")
            found[key] = (status, note, area)
    return found


def render(lib, cfg):
    pairs = read_map(ROOT / cfg["map"])
    found = read_sources(ROOT / cfg["dir"])
    names = {s for s, _ in pairs}
    multi = {s for s in names if sum(1 for t, _ in pairs if t == s) > 1}
    rows, used = [], set()
    for sym, version in sorted(pairs, key=lambda p: (version_key(p[1]), p[0])):
        key = f"{sym}@{version}" if sym in multi else sym
        if key not in found:
            sys.exit(f"{cfg['dir']}: {key} is exported by the map but not accounted for")
        used.add(key)
        status, note, area = found[key]
        rows.append((sym, version, status, area, note))
    extra = set(found) - used
    if extra:
        sys.exit(f"{cfg['dir']}: defined but not in the map: {', '.join(sorted(extra))}")

    counts = {}
    for r in rows:
        counts[r[2]] = counts.get(r[2], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    out = [
        f"# {cfg['title']} — support matrix",
        "",
        f"<!-- Generated by tools/dev/gen_support_matrix.py from {cfg['dir']}/*.cc and "
        f"{cfg['map']}; do not edit. -->",
        "",
        cfg["intro"],
        "",
        LEGEND,
        "",
        f"{len(rows)} exported (symbol, version) pairs: {summary}.",
        "",
        "| symbol | version | status | file | note |",
        "|---|---|---|---|---|",
    ]
    for sym, version, status, area, note in rows:
        out.append(f"| `{sym}` | {version} | {status} | {area}.cc | {note.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for lib, cfg in LIBS.items():
        path = ROOT / "docs" / "support" / f"{lib}.md"
        text = render(lib, cfg)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        sys.exit("stale, run tools/dev/gen_support_matrix.py: " + ", ".join(stale))


if __name__ == "__main__":
    main()
