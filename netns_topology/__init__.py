"""Declarative topologies (Mininet-style) and their builder in network
namespaces: the topology graph and its checks (topo.py, spec.py,
params.py, units.py), namespaces (namespace.py), build and teardown
(builder.py, teardown.py), link emulation (qdisc.py) and a testbed's
recorded state (state.py), which every layer above reads."""
from .builder import build
from .errors import BuildError, TopologyError
from .namespace import create_namespace
from .spec import load_topology, read_topology_file, topology_from_dict
from .teardown import teardown
from .topo import LeafSpine, Topo
from .units import parse_rate, parse_size

__all__ = ["Topo", "LeafSpine", "load_topology", "topology_from_dict", "read_topology_file", "TopologyError",
           "parse_rate", "parse_size", "build", "teardown", "BuildError",
           "create_namespace"]
