"""A live testbed's life cycle: lifecycle.py brings one up (build the
namespaces, attach the data path, start the PCM daemon), takes it down,
reports its status and switches its port queueing.

It stands on netns_topology (the fabric and the state file, read by
netns_topology/state.py), datapath (the programs) and agent (the daemon).
A testbed is named by its prefix, not passed as an object: the prefix is
what survives from one process to the next (docs/architecture.md).
"""
