"""Model of ``bpf/include/talb/schemes/ecmp.h`` (and ``talb/hash.h``): the
seeded 5-tuple hash, and the index ECMP takes from it."""
from __future__ import annotations

import ipaddress

from datapath.schemes.spec import Scheme


__all__ = ["flow_hash", "ecmp_index"]
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix(h: int, k: int) -> int:
    k = (k * 0xCC9E2D51) & _M32
    k = _rotl(k, 15)
    k = (k * 0x1B873593) & _M32
    h ^= k
    h = _rotl(h, 13)
    return (h * 5 + 0xE6546B64) & _M32


def flow_hash(saddr, daddr, sport: int, dport: int, proto: int, seed: int) -> int:
    """The data path's 5-tuple hash (MurmurHash3 x86_32 over saddr, daddr,
    sport<<16|dport, proto as host-order 32-bit words)."""
    h = seed & _M32
    h = _mix(h, int(ipaddress.IPv4Address(saddr)))
    h = _mix(h, int(ipaddress.IPv4Address(daddr)))
    h = _mix(h, ((sport & 0xFFFF) << 16) | (dport & 0xFFFF))
    h = _mix(h, proto & 0xFF)
    h ^= 16
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def ecmp_index(n_ports: int, saddr, daddr, sport: int, dport: int, proto: int,
               seed: int) -> int:
    """Index into a group of ``n_ports`` (>= 2) that ECMP picks for a flow."""
    return flow_hash(saddr, daddr, sport, dport, proto, seed) % n_ports


SCHEME = Scheme(
    name="ecmp", id=0, title="ECMP",
    description="a seeded hash of the 5-tuple picks the port: a flow keeps one path",
    paper="Hopps, RFC 2992 (2000)",
    decides="every switch, per flow",
    params=(),
    xdp=True, xdp_why="a hash of the 5-tuple",
    not_a_fallback=None,
    decisions=(("decision_ecmp", "hash"),),
    clock=False, inline=True, model=ecmp_index,
    control=(flow_hash, ecmp_index))      # datapath.control.ecmp_index: where a flow goes
