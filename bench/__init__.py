"""Benchmarks: numbers to compare (ratios in one run), never pass/fail tests.

datapath.py (`talb bench datapath`: datapath_bpf.py, the switch program
against an empty one under BPF_PROG_TEST_RUN; fabric_throughput.py, BPF
forwarding against the kernel bridge across a fabric) and agent_loop.py
(`talb bench agent`: the PCM daemon's window cost). The paper's
experiments are experiments/'s.
"""
