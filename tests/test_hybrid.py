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


def test_table1_vgg19_fc6_in_poseidons_deployment():
    """Poseidon's own set-up (every machine a server and a worker), VGG19's
    fc6 (25088 x 4096), batch 32, 8 machines: PS moves 2MN(P1+P2-2)/P2 =
    2*25088*4096*14/8 = 359,661,568 values per machine, SFB 2K(P1-1)(M+N)
    = 2*32*7*29184 = 13,074,432 -- 27.5x fewer, so Algorithm 1 sends it by
    SFB; as separate hosts a worker moves 2MN = 205,520,896, a server
    2*8*MN/8 the same."""
    c = hybrid.costs(25088, 4096, 32, 8, 8)
    assert c["ps_colocated"] == 359_661_568
    assert c["sfb_worker"] == 13_074_432
    assert c["ps_worker"] == c["ps_server"] == 205_520_896
    row = next(r for r in hybrid.choose(get_profile("vgg19"), "hybrid", 8, 8)
               if r["name"] == "classifier.0")
    assert row["scheme"] == "sfb" and row["sfb_if_colocated"]


@pytest.mark.parametrize("model, workers, sfb", [
    # separate hosts, P1 = P2 = P: SFB iff K(P-1)(M+N) <= MN
    # VGG19 fc8 4096x1000, K 32: (P-1) <= 4,096,000 / 163,072 = 25.1
    ("vgg19", 26, ["classifier.0", "classifier.3", "classifier.6"]),
    ("vgg19", 27, ["classifier.0", "classifier.3"]),
    # fc7 4096x4096: 32 * 64 * 8192 = 16,777,216 = MN exactly at P = 65: a tie, SFB (<=)
    ("vgg19", 65, ["classifier.0", "classifier.3"]),
    ("vgg19", 66, ["classifier.0"]),
    # AlexNet, K 64: fc8 (P-1) <= 4,096,000 / 326,144 = 12.6; fc7 a tie at P = 33
    ("alexnet", 13, ["classifier.1", "classifier.4", "classifier.6"]),
    ("alexnet", 14, ["classifier.1", "classifier.4"]),
    ("alexnet", 33, ["classifier.1", "classifier.4"]),
    ("alexnet", 34, ["classifier.1"]),
    # ResNet-50's fc 2048x1000, K 128: (P-1) <= 2,048,000 / 390,144 = 5.2
    ("resnet50", 6, ["fc"]),
    ("resnet50", 7, []),
])
def test_hybrid_switches_where_table1_crosses(model, workers, sfb):
    rows = hybrid.choose(get_profile(model), "hybrid", workers, workers)
    assert [r["name"] for r in rows if r["scheme"] == "sfb"] == sfb


def test_colocated_rule_is_recorded_beside_ours():
    """Algorithm 1 as Poseidon runs it (server & worker column): VGG19's fc8
    by SFB while K(M+N) <= 2MN/P, P <= 8,192,000 / 163,072 = 50.2 -- twice
    as far as with separate servers (the machine's own shard stays home)."""
    def colocated(P):
        rows = hybrid.choose(get_profile("vgg19"), "hybrid", P, P)
        return next(r for r in rows if r["name"] == "classifier.6")
    assert colocated(50)["sfb_if_colocated"] and not colocated(51)["sfb_if_colocated"]
    assert colocated(50)["scheme"] == "ps"        # ours: separate servers


def test_hybrid_at_the_presets_shape():
    """4 workers, 1 server (the papers-* presets): every fully connected
    layer of VGG19, AlexNet and ResNet-50 by SFB, the convolutions by PS."""
    for model, fc in (("vgg19", ["classifier.0", "classifier.3", "classifier.6"]),
                      ("alexnet", ["classifier.1", "classifier.4", "classifier.6"]),
                      ("resnet50", ["fc"])):
        rows = hybrid.choose(get_profile(model), "hybrid", 4, 1)
        assert [r["name"] for r in rows if r["scheme"] == "sfb"] == fc


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
