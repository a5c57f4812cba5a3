"""The bottom layer: names every other package shares, importing none of them.

paths.py        where a testbed keeps its run-time state (/run/talb, the
                bpffs, pins), checked prefixes and node names, root-only files;
                where the eBPF C sources are (BPF_SRC_DIR)
wire.py         the TaLB option's wire format (scapy and plain bytes)
c_constants.py  the C facts of bpf/include/talb/constants.h, parsed at import:
                limits, flags, counter names and the registry of schemes
bcc_bindings.py bcc's Python bindings from any Python: its own, else Debian's
                python3-bpfcc checked against libbcc.so (a pyenv or conda
                Python), else BccUnavailable saying what to do
"""
