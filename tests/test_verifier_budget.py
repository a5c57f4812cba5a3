"""Every program of the project stays inside its share of the verifier's budget.

The kernel's verifier processes at most 1M instructions per program
(bpf_syscall.VERIFIER_INSN_LIMIT, all paths and subprograms counted). The
switch program sat at ~26% of it before the baseline schemes (issue 9), held
there by always-inline code, opaque comparisons and a one-call-site rule
(bpf/include/talb/parsing_helpers.h); with RPS, LetFlow and DRILL inlined
beside TaLB it no longer loaded (> 1M), so each scheme now has a program of
its own, tail-called from the main one (docs/schemes.md), and each is held
to the budget here. A change that grows it past
VERIFIER_BUDGET_SHARE (datapath/program.py) fails here, long before the load
itself fails on a kernel that prunes less.
"""
from __future__ import annotations

import tempfile

import pytest

from conftest import new_prefix, skip_or_fail

pytestmark = pytest.mark.bpf


def _loaded_programs(cls, netns_name):
    """{program name: ProgInfo} of a fresh load of ``cls`` in ``netns_name``."""
    dp = cls(netns_name, tempfile.gettempdir() + "/unused-pins").load()
    try:
        return dp.programs()
    finally:
        dp.close()


@pytest.fixture(scope="module")
def programs(bcc):
    from pyroute2 import netns

    from datapath.host_loader import HostDatapath
    from datapath.loader import SwitchDatapath
    from netns_topology import create_namespace

    name = f"{new_prefix()}-vb"
    try:
        create_namespace(name)
    except Exception as exc:
        skip_or_fail(f"cannot create network namespace: {exc}")
    try:
        out = {}
        for cls in (SwitchDatapath, HostDatapath):
            out.update(_loaded_programs(cls, name))
        # the XDP entry point's programs (switch_xdp.c: the same scheme
        # program names, prog type XDP)
        from datapath.xdp import XdpSwitchDatapath

        out.update({f"xdp:{n}": p for n, p in _loaded_programs(XdpSwitchDatapath, name).items()})
        return out
    finally:
        netns.remove(name)


def test_every_program_within_verifier_budget(programs):
    from datapath.bpf_syscall import VERIFIER_INSN_LIMIT
    from datapath.program import VERIFIER_BUDGET_SHARE

    from datapath.loader import SCHEME_PROGS

    budget = int(VERIFIER_BUDGET_SHARE * VERIFIER_INSN_LIMIT)
    want = {"talb_switch_tc", "talb_host_tc", *SCHEME_PROGS.values(),
            "xdp:talb_switch_xdp", *(f"xdp:{n}" for n in SCHEME_PROGS.values())}
    assert want <= set(programs), programs     # the main and every scheme's program
    report = {n: p.verified_insns for n, p in programs.items()}
    print(f"verified_insns (budget {budget}): {report}")
    for name, info in programs.items():
        # 0 means the kernel did not report it (before 5.16): nothing checked.
        assert info.verified_insns > 0, f"{name}: kernel reports no verified_insns"
        assert info.verified_insns <= budget, (
            f"{name}: {info.verified_insns} instructions verified, more than "
            f"{VERIFIER_BUDGET_SHARE:.0%} of the verifier's {VERIFIER_INSN_LIMIT}")


def test_sendmsg_tagger_within_verifier_budget(bcc):
    """The kernel-side tagger of unmodified processes (bpf/host_sendmsg.c):
    its three raw tracepoint programs, loaded (and attached: a tagger with
    no host registered returns at its first lookup)."""
    from datapath.bpf_syscall import VERIFIER_INSN_LIMIT, prog_info
    from datapath.program import VERIFIER_BUDGET_SHARE
    from datapath.sendmsg_tagger import SendmsgTagger

    budget = int(VERIFIER_BUDGET_SHARE * VERIFIER_INSN_LIMIT)
    with SendmsgTagger() as tagger:
        report = {name.decode(): prog_info(f.fd).verified_insns for name, f in tagger.bpf.funcs.items()}
    print(f"verified_insns (budget {budget}): {report}")
    assert {"raw_tracepoint__tcp_sendmsg_locked", "raw_tracepoint__sys_exit",
            "raw_tracepoint__inet_sock_set_state"} <= set(report), report
    for name, insns in report.items():
        assert 0 < insns <= budget, (name, insns, budget)
