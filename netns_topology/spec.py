"""Topology files: a dict (from YAML or a state file) <-> Topo.

Two shapes share the topology-wide fields (mtu, rates, queue, tcp_cc, scheme):
* leaf-spine: ``spines``/``leaves``/``hosts_per_leaf`` (+ ``oversubscription``);
  ``links`` then *overrides* existing links (rate, up);
* explicit: ``switches``, ``hosts`` and ``links`` that *add* links, for any
  other shape. Topo.to_dict() writes whichever fits.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import yaml

from common.excerpt import shown

from .errors import TopologyError
from .params import PARAMS, check_keys
from .topo import LeafSpine, Topo

_SHAPE = ("spines", "leaves", "hosts_per_leaf", "oversubscription")
_EXPLICIT = ("switches", "hosts")
_KEYS = (*PARAMS, "links", *_SHAPE, *_EXPLICIT)


def _list(field: str, value, example: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TopologyError(field, f"must be a list like {example}, got {shown(value)}")
    return value


def _entry(field: str, value, keys: tuple[str, ...], required: str) -> dict:
    """A list item given as a mapping, or as a bare name for its required key."""
    if isinstance(value, str) and required == "name":
        value = {"name": value}
    if not isinstance(value, dict):
        raise TopologyError(field, f"must be a mapping with {', '.join(keys)}, got {shown(value)}")
    check_keys(field, value, keys)
    if required not in value:
        raise TopologyError(field, f"missing {shown(required)}")
    return value


@contextmanager
def _within(field: str):
    """A TopologyError raised inside, seen from ``field`` (``rate`` -> ``links[1].rate``)."""
    try:
        yield
    except TopologyError as exc:
        raise exc.within(field) from None


def _between(entry: dict) -> tuple[str, str]:
    pair = entry["between"]
    if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(n, str) for n in pair):
        raise TopologyError("between", f"must be a list of two node names, got {shown(pair)}")
    return pair[0], pair[1]


def _link_entries(d: dict):
    for i, item in enumerate(_list("links", d.get("links"), "[{between: [leaf0, spine1], rate: 50mbit}]")):
        field = f"links[{i}]"
        entry = _entry(field, item, ("between", "rate", "up"), "between")
        yield field, entry


def topology_from_dict(d) -> Topo:
    """Build (and fully validate) a Topo from its dict form."""
    if not isinstance(d, dict):
        raise TopologyError("", f"a topology must be a mapping of fields, got {shown(d)}")
    check_keys("", d, _KEYS)
    shape = [k for k in _SHAPE if k in d]
    explicit = [k for k in _EXPLICIT if k in d]
    if shape and explicit:
        raise TopologyError(explicit[0], f"cannot be combined with {', '.join(shape)}: give either a "
                                         "leaf-spine shape or explicit switches/hosts/links")
    params = {k: d[k] for k in PARAMS if k in d}
    if explicit:
        topo = Topo(**params)
        for i, item in enumerate(_list("switches", d.get("switches"), "[{name: s0, role: leaf}]")):
            entry = _entry(f"switches[{i}]", item, ("name", "role"), "name")
            with _within(f"switches[{i}]"):
                topo.add_switch(**entry)
        for i, item in enumerate(_list("hosts", d.get("hosts"), "[{name: h0}]")):
            entry = _entry(f"hosts[{i}]", item, ("name", "ip", "mac"), "name")
            with _within(f"hosts[{i}]"):
                topo.add_host(**entry)
        for field, entry in _link_entries(d):
            with _within(field):
                topo.add_link(*_between(entry), rate=entry.get("rate"), up=entry.get("up", True))
    else:
        topo = LeafSpine(**{k: d[k] for k in shape}, **params)
        for field, entry in _link_entries(d):
            changes = {k: entry[k] for k in ("rate", "up") if k in entry}
            if not changes:
                raise TopologyError(field, "an override needs rate and/or up")
            with _within(field):
                topo.set_link(*_between(entry), **changes)
    topo.validate()
    return topo


def read_topology_file(path) -> dict:
    """A YAML topology file's fields, unvalidated (callers may add to them)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TopologyError(str(path), f"cannot read topology file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(str(path), f"not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TopologyError(str(path), f"must hold a mapping of fields, got {type(data).__name__}")
    return data


def load_topology(path) -> Topo:
    """Read a YAML topology file (see topologies/leafspine.yaml for the fields)."""
    return topology_from_dict(read_topology_file(path))
