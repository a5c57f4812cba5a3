"""The BPF data path as a library: compile, attach, pin and control the
switch and host programs of bpf/, with no daemon of its own.

bpf_syscall.py  bpf() syscalls: maps, pins, object info, BPF_PROG_TEST_RUN
structs.py      ctypes mirrors of bpf/include/talb/structs.h
maps.py         Map, MapSet, SwitchMaps: pinned maps opened by name, checked
program.py      BpfDatapath: a tc program's life cycle (bcc compile, attach, pin)
loader.py       the switch's program (bpf/switch_tc.c) and its default config
host_loader.py  the hosts' tagging program (bpf/host_tc.c)
host_maps.py    the hosts' maps and constants (host_constants.h, host_structs.h)
control.py      install ports, groups, scheme and its parameters; read counters
fabric.py       attach and program a whole testbed's switches and hosts
timers.py       the schemes' timers derived from the topology's link rates
statsread.py    fast per-CPU counter reads (batch lookups)
qdisc_stats.py  the ports' qdisc counters (drops, backlog) by netlink
schemes/        pure-Python models of bpf/include/talb/schemes/*.h, one per scheme

The constants the C and Python share are common/c_constants.py's; the PCM
daemon that drives this library every window is agent/.
"""
