"""The PCM daemon (`talb agent`): every window it reads the switches' port
counters, computes each port's congestion metric (PCM) and publishes the
weights into the switches' maps, follows link state, serves Prometheus
metrics and writes snapshots for `talb top`.

pcm.py (the maths), window.py (counter windows), switch.py (one switch),
loop.py (the window loop), routing.py, linkstate.py and rtnl.py (link
state and the routes it changes), metrics.py, snapshot.py, top.py,
config.py, daemon.py (start, stop, the lock and pid files).
It drives the data path through the library in datapath/.
"""
