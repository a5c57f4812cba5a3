#!/usr/bin/env python3
"""What the kernel's verifier does with every program the project loads.

For each program -- the switch's TC entry point and each scheme's
tail-called program, the same for the XDP entry point (bpf/switch_xdp.c),
the hosts' TC tagger and XDP_PASS, and the kernel-side sendmsg tagger's
raw tracepoints -- a fresh load with the verifier's statistics log
(``BPF_LOG_STATS``) and maps of its own, printing the statistics line's
figures:

  insns            instructions processed, all paths counted (what
                   bpf_prog_info.verified_insns reports; the verifier
                   gives up at 1,000,000)
  total_states     states stored for pruning
  peak_states      the most states kept at once
  max/insn         the most states stored at one instruction
  ms               the verification's time by the kernel's clock (the
                   CPU a switch's build spends on it; noisy on a busy machine)

A program whose paths multiply (a loop walked once per path, a branch on a
value the verifier tracks exactly, a parse repeated per branch) shows here
first; tests/test_verifier_budget.py holds each program near its count.

``--hot PROGRAM`` loads that one program with the full log (every
instruction processed) and prints the instruction ranges the verifier
walked most often -- where the state explosion is.

    sudo .venv/bin/python -m bench.verifier_states [--json FILE] [--hot talb_switch_tc]

Needs root and bcc. Nothing is attached (the sendmsg tagger's bcc object
is compiled only to take its instructions) and nothing is left behind.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: program set -> the data path class whose programs it loads (datapath.*)
SETS = ("switch-tc", "switch-xdp", "host-tc", "host-xdp", "host-sendmsg")


def _datapath_class(kind: str):
    if kind == "switch-tc":
        from datapath.loader import SwitchDatapath
        return SwitchDatapath
    if kind == "switch-xdp":
        from datapath.xdp import XdpSwitchDatapath
        return XdpSwitchDatapath
    if kind == "host-tc":
        from datapath.host_loader import HostDatapath
        return HostDatapath
    if kind == "host-xdp":
        from datapath.xdp import HostXdpPass
        return HostXdpPass
    raise ValueError(kind)


def _compiled_programs(kind: str):
    """(program name, instructions with map fds, prog type, license, fds to
    close) of one program set, each program's maps fresh."""
    from datapath import bpf_syscall as sc

    cls = _datapath_class(kind)
    obj = cls.compiled()
    fds = {name: m.create() for name, m in obj.maps.items()}
    progs = [(name, obj.linked(name, fds), cls.PROG_TYPE, obj.license)
             for name in obj.insns]
    return progs, list(fds.values())


def _sendmsg_programs():
    """The sendmsg tagger's raw tracepoint programs: bcc's compile (its maps
    and its own load), the instructions taken to load again with a log."""
    import ctypes  # noqa: F401  (bcc needs it loaded)

    from common.bcc_bindings import import_bcc
    from datapath import bpf_syscall as sc
    from datapath.sendmsg_tagger import SENDMSG_SRC, INCLUDE_DIR, _offsets, _syscall_flags, cpu_bits
    from datapath.source import expand_source

    BPF = import_bcc().BPF
    flags = [f"-I{INCLUDE_DIR}", f"-DSENDMSG_CPU_BITS={cpu_bits()}", *_offsets(),
             *_syscall_flags()]
    # the raw_tracepoint__ prefix would make bcc attach them: compile under
    # other names (-D renames), then take each function's instructions
    names = ("tcp_sendmsg_locked", "sys_exit", "inet_sock_set_state")
    renames = [f"-Draw_tracepoint__{n}=vs_{n}" for n in names]
    bpf = BPF(text=expand_source(SENDMSG_SRC).encode(), cflags=flags + renames)
    progs = [(f"raw_tracepoint__{n}", bytes(bpf.dump_func(f"vs_{n}".encode())),
              sc.BPF_PROG_TYPE_RAW_TRACEPOINT, "GPL") for n in names]
    return progs, bpf


def collect(sets=SETS, say=None) -> dict[str, dict[str, dict]]:
    """{set: {program: {"insns", "total_states", "peak_states",
    "max_states_per_insn", "seconds"}}} from fresh loads with the
    statistics log."""
    from datapath import bpf_syscall as sc

    out: dict[str, dict[str, dict]] = {}
    for kind in sets:
        keep = None
        if kind == "host-sendmsg":
            progs, keep = _sendmsg_programs()
            fds = []
        else:
            progs, fds = _compiled_programs(kind)
        try:
            out[kind] = {}
            for name, insns, ptype, lic in progs:
                t = time.monotonic()
                fd, st = sc.prog_verify(insns, prog_type=ptype, license=lic, name=name[:15])
                os.close(fd)
                out[kind][name] = {"insns": st.insns, "total_states": st.total_states,
                                   "peak_states": st.peak_states,
                                   "max_states_per_insn": st.max_states_per_insn,
                                   "verify_ms": (st.verify_us or 0) / 1000,
                                   "seconds": round(time.monotonic() - t, 3),
                                   "program_insns": len(insns) // 8}
                if say:
                    say(f"  {kind:<13} {name:<36} {st.insns:>9,} {st.total_states:>8,} "
                        f"{st.peak_states:>8,} {st.max_states_per_insn:>8} "
                        f"{(st.verify_us or 0) / 1000:>7.1f}")
        finally:
            for fd in fds:
                os.close(fd)
            if keep is not None:
                keep.cleanup()
    return out


def hot(program: str, top: int = 25, say=print) -> None:
    """Load one program (``set:name`` or a switch-tc program name) with the
    full verifier log and print where its instructions were processed."""
    from datapath import bpf_syscall as sc

    kind, _, name = program.rpartition(":")
    kind = kind or "switch-tc"
    progs, fds = _compiled_programs(kind)
    try:
        (insns, ptype, lic), = [(i, t, l) for n, i, t, l in progs if n == name]
        fd, st = sc.prog_verify(insns, prog_type=ptype, license=lic, name=name[:15],
                                log_level=sc.BPF_LOG_LEVEL2 | sc.BPF_LOG_STATS,
                                log_size=(1 << 30) - 1)
        os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)
    visits = collections.Counter(int(m.group(1)) for m in
                                 re.finditer(r"^(\d+): \(", st.log, re.M))
    n = len(insns) // 8
    say(f"{kind}:{name}: {st.insns:,} insns processed over {n:,} instructions, "
        f"{st.total_states:,} states, peak {st.peak_states:,}")
    # ranges of 32 instructions, most visited first
    buckets = collections.Counter()
    for i, c in visits.items():
        buckets[i // 32] += c
    for b, c in buckets.most_common(top):
        lo = b * 32
        say(f"  insns {lo:>6}-{lo + 31:<6} {c:>9,} visits ({c / max(st.insns, 1):.1%})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", dest="sets", action="append", choices=SETS,
                    help="only these program sets (repeatable; default: all)")
    ap.add_argument("--json", default=None, help="write the figures to this file too")
    ap.add_argument("--hot", default=None, metavar="[SET:]PROGRAM",
                    help="where the verifier spends its instructions in one program "
                         "(full log; e.g. talb_switch_tc, switch-xdp:talb_scheme_conga)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (BPF program loads)", file=sys.stderr)
        return 2
    if args.hot:
        hot(args.hot)
        return 0
    print(f"verifier, kernel {os.uname().release}, {time.strftime('%Y-%m-%d')}, "
          "fresh load with BPF_LOG_STATS")
    print(f"  {'set':<13} {'program':<36} {'insns':>9} {'states':>8} {'peak':>8} {'max/insn':>8} "
          f"{'ms':>7}")
    out = collect(tuple(args.sets or SETS), say=print)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
