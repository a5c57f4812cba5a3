"""Poseidon's hybrid communication: the cost model, which layers go by SFB,
and the partitions a PS run sends (workload/hybrid.py, schedules.with_sfb)."""
from __future__ import annotations

import pytest

from workload import hybrid, schedules
from workload.models import get_profile
from workload.patterns import ps


def test_table1_by_hand():
    """M=4, N=3, K=2, 3 workers, 1 server: PS worker 2*12 = 24, server
    2*3*12/1 = 72, colocated 2*12*(3+1-2)/1 = 48; SFB 2*2*2*(4+3) = 56."""
    c = hybrid.costs(4, 3, 2, 3, 1)
    assert c == {"ps_worker": 24, "ps_server": 72.0, "ps_colocated": 48.0, "sfb_worker": 56}


def test_models_know_their_fully_connected_layers():
    vgg = get_profile("vgg19")
    assert [(l.name, l.fc_shape) for l in vgg.layers if l.fully_connected] == [
        ("classifier.0", (25088, 4096)), ("classifier.3", (4096, 4096)),
        ("classifier.6", (4096, 1000))]
    assert vgg.batch_size == 32
    assert [l.fc_shape for l in get_profile("resnet50").layers if l.fully_connected] == \
        [(2048, 1000)]


def test_hybrid_on_vgg19_sends_its_fc_layers_by_sfb():
    """4 workers, 1 server, batch 32: classifier.0's SFB cost 2*32*3*29184 =
    5.6 M values against PS's busiest node 2*4*25088*4096 = 822 M."""
    rows = hybrid.choose(get_profile("vgg19"), "hybrid", 4, 1)
    assert [r["name"] for r in rows if r["scheme"] == "sfb"] == \
        ["classifier.0", "classifier.3", "classifier.6"]
    fc0 = next(r for r in rows if r["name"] == "classifier.0")
    assert fc0["sfb_cost"] == 2 * 32 * 3 * (25088 + 4096)
    assert fc0["ps_cost"] == 2 * 4 * 25088 * 4096
    assert fc0["factor_bytes"] == 4 * 32 * (25088 + 4096)


def test_hybrid_keeps_ps_where_the_factors_cost_more():
    """A large batch over many workers makes the factors dearer than the
    matrix: ResNet-50's fc (2048 x 1000) at batch 128 with 16 workers and
    16 servers: SFB 2*128*15*3048 = 11.7 M > PS 2*2048*1000 = 4.1 M."""
    rows = hybrid.choose(get_profile("resnet50"), "hybrid", 16, 16)
    assert all(r["scheme"] == "ps" for r in rows)
    assert [r["scheme"] for r in hybrid.choose(get_profile("resnet50"), "sfb", 16, 16)
            if "shape" in r] == ["sfb"]


def test_sfb_partitions_replace_the_layer():
    prof = get_profile("vgg19")
    parts, _, _ = schedules.plan(prof, "bytescheduler", partition_bytes=4_000_000,
                                 credit_bytes=16_000_000, arch="ps", workers=4, servers=1,
                                 target_link_bps=10e9)
    rows = hybrid.choose(prof, "hybrid", 4, 1)
    out, sfb = schedules.with_sfb(prof, parts, rows)
    assert [p.pid for p in out] == list(range(len(out)))
    assert [out[i].layer for i in sfb] == [18, 17, 16]
    assert all(out[i].target_bytes == 4 * 32 * sum(prof.layers[out[i].layer].fc_shape)
               for i in sfb)
    conv = sum(l.nbytes for l in prof.layers if not l.fully_connected)
    assert sum(p.target_bytes for p in out if p.pid not in sfb) == conv
    exp = ps.bytes_per_iteration(out, 4, 1, sfb)
    factors = sum(out[i].nbytes for i in sfb)
    assert exp["total"] == 2 * 4 * conv + 4 * 3 * factors


def test_bad_comm_is_named():
    with pytest.raises(ValueError, match="--comm: one of ps, sfb, hybrid, got 'mesh'"):
        hybrid.check("mesh")
