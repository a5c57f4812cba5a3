"""Errors show a short excerpt of a bad value, never a whole file
(common/excerpt.py ``shown``, used wherever a spec's or an option's value
is named in an error): one case per kind of value, from the file or call a
user gives."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.excerpt import EXCERPT, WHOLE, shown
from netns_topology.attach_spec import fabric_from_dict
from netns_topology.errors import TopologyError
from netns_topology.spec import topology_from_dict
from netns_topology.units import parse_rate

REPO = Path(__file__).resolve().parent.parent
#: a message names the field and the problem, with an excerpt: never more than this
MESSAGE_MAX = 200
LONG_TEXT = "root:x:0:0:root:/root:/bin/bash\n" * 60


def _error(fn, *args) -> str:
    with pytest.raises((TopologyError, ValueError)) as err:
        fn(*args)
    msg = str(err.value)
    assert len(msg) <= MESSAGE_MAX, msg
    return msg


def test_short_values_are_shown_whole_as_before():
    for value in ("10mbit", 3, 2.5, None, [1, 2], {"limit": "150kb"}, "x" * (WHOLE - 2)):
        assert shown(value) == repr(value)


def test_a_long_string_says_its_length_and_begins_as_the_value_does():
    text = shown("a" * 5000, "YAML")
    assert text.startswith("a YAML string of 5,000 characters: 'aaaa")
    assert text.endswith("…'") and len(text) < EXCERPT + 50


def test_talb_attach_on_a_non_yaml_file_says_what_it_found_not_the_file(tmp_path):
    """The issue's case, as a user runs it: a file that is not a fabric."""
    path = tmp_path / "passwd"
    path.write_text(LONG_TEXT)
    proc = subprocess.run([sys.executable, "-m", "talb.cli", "attach", "--fabric", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "file: must be a mapping, got a YAML string of" in out
    assert "'root:x:0:0:root" in out
    assert out.count("root:x:0:0") == 1                 # an excerpt, not the file
    assert len(out) < 600, out


def test_a_topology_whose_field_holds_a_long_list_names_it_by_its_size():
    msg = _error(topology_from_dict, {"spines": 2, "leaves": 2, "hosts_per_leaf": 2,
                                      "queue": list(range(500))})
    assert msg.startswith("queue: must be a mapping like")
    assert "a list of 500 items: [0, 1, 2" in msg


def test_a_topology_that_is_a_long_list_is_shown_by_its_size():
    msg = _error(topology_from_dict, [{"name": f"s{i}"} for i in range(200)])
    assert "a list of 200 items" in msg


def test_an_attach_file_with_a_long_mapping_where_a_list_goes_names_its_keys_count():
    data = {"name": "lab", "switches": {f"s{i}": i for i in range(300)},
            "hosts": [{"name": "h1", "ip": "10.0.0.1"}]}
    msg = _error(fabric_from_dict, data)
    assert msg.startswith("switches: must be a non-empty list, got a mapping of 300 keys: {'s0': 0")


def test_an_unknown_field_with_a_long_name_is_cut():
    data = {"name": "lab", "k" * 1000: 1}
    msg = _error(fabric_from_dict, data)
    assert "k" * 40 not in msg


def test_a_long_unparsable_rate_is_cut():
    msg = _error(parse_rate, "9" * 3000 + "zbit")
    assert msg.startswith("cannot parse rate a string of 3,004 characters: '9999")
