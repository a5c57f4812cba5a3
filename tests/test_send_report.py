"""`talb send`'s split check over its two views (talb/send.py): captures
of the senders' uplinks and the leaves' own record (tensor_egress). What
it concludes from what each saw -- the live runs are in
tests/test_send_integrity_live.py and tests/test_integrity_live.py."""
from __future__ import annotations

import io

from talb.send import SendReport, TensorResult


def tensor(i, uplinks=None, recorded=None, local=False, unrecorded=""):
    return TensorResult(worker=0, src="h0", seq=i, tensor_id=0x100 + i, layer=0, bytes=10,
                        len_pkts=1, fct_s=0.001, ok=True, uplinks=uplinks or {},
                        src_ip="10.0.0.1", recorded=recorded, local=local, leaf="leaf0",
                        unrecorded=unrecorded)


def printed(report) -> str:
    from rich.console import Console

    from talb import cli

    out = io.StringIO()
    saved, cli.console = cli.console, Console(file=out, width=200, no_color=True)
    try:
        cli._print_send(report)
    finally:
        cli.console = saved
    return out.getvalue()


def test_views_agree_one_uplink_each():
    rep = SendReport([tensor(0, {"spine0": 3}, ["spine0"]), tensor(1, {}, ["spine1"]),
                      tensor(2, {"spine1": 2}, None)], None, False)
    assert rep.ok and not rep.split and not rep.unchecked and not rep.disagree
    assert rep.integrity()["seen_by"] == {"capture+record": 1, "record": 1, "capture": 1}
    assert "3/3 tensors verified; 0 split across uplinks" in printed(rep)


def test_a_split_in_either_view_is_a_split():
    rep = SendReport([tensor(0, {"spine0": 3}, ["spine0", "spine1"]),
                      tensor(1, {"spine0": 1, "spine1": 1}, None)], None, False)
    assert [t.ports for t in rep.split] == [["spine0", "spine1"]] * 2 and not rep.ok
    assert "2 split across uplinks" in printed(rep)


def test_captures_seeing_a_port_the_record_lacks_fail_the_run():
    t = tensor(0, {"spine1": 4}, ["spine0"])
    rep = SendReport([t], None, False)
    assert t.disagrees and t.split and not rep.ok
    text = printed(rep)
    assert "1 where captures and record disagree" in text
    assert "captures saw spine1, its leaf recorded spine0" in text


def test_unseen_tensors_are_not_checked_never_unsplit():
    rep = SendReport([tensor(0, recorded=["spine0"]),
                      tensor(1, unrecorded="leaf0's entry began before the tensor")],
                     None, False)
    n = rep.integrity()
    assert (n["checked"], n["not_checked"], n["split"]) == (1, 1, 0)
    text = printed(rep)
    assert "0 split across uplinks (seen by: record 1), 1 not checked" in text
    assert "not checked: leaf0's entry began before the tensor" in text
    none = SendReport([tensor(0), tensor(1)], None, False, captured=False,
                      no_record={"leaf0": "no switch data path pinned"})
    text = printed(none)
    assert "split across uplinks not checked" in text and "0 split" not in text
    assert "leaf0 has no record of its tensors' uplinks: no switch data path pinned" in text


def test_local_tensors_take_no_uplink():
    rep = SendReport([tensor(0, local=True)], None, True)
    assert rep.ok and not rep.unchecked and rep.integrity()["seen_by"] == {"local": 1}
