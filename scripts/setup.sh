#!/usr/bin/env bash
# Install what the testbed needs, idempotently, on Debian as root:
#   * Debian packages (bcc for /usr/bin/python3, iproute2, ethtool, iperf3,
#     kernel headers, Prometheus for the monitoring tests, Mininet for
#     tests/test_attach_live.py, Open MPI and mpi4py for /usr/bin/python3:
#     real MPI jobs, `talb run --client mpi`, workload/mpi_job.py; clang,
#     bpftool and libbpf-dev to build and register `--tcp-cc dctcp-bpf`,
#     bpf/cc/dctcp_bpf.c);
#   * kernel-header symlinks under /lib/modules/$(uname -r) when the running
#     kernel ships none (docs/design.md §9: bcc compiles against them);
#   * a venv made from /usr/bin/python3 --system-site-packages (so that
#     `import bcc` works) with the project installed in it, with its extras
#     test, cluster and torch (`talb run --client torch`: PyTorch's CPU build,
#     torch==2.13.0; a wheel in $TORCH_WHEELS, default /opt/wheels, when there);
#   * /usr/local/bin/talb -> the venv's talb, so that `sudo talb` works
#     (scripts/talb-link.sh; a `talb` that is not ours is left alone).
# Each step is skipped when already done, so a second run takes a second.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
STAMP="$VENV/.talb-installed"

say() { printf '==> %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (sudo make setup): namespaces, BPF and apt need it"
command -v apt-get >/dev/null || die "apt-get not found: this set-up supports Debian and derivatives"

# --- Debian packages ---------------------------------------------------------
PKGS=(python3-bpfcc bpfcc-tools python3-venv python3-pip iproute2 ethtool
      iperf3 iputils-ping tcpdump curl linux-headers-amd64 prometheus procps kmod
      mininet util-linux openmpi-bin python3-mpi4py gcc libc6-dev
      clang bpftool libbpf-dev)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    say "Debian packages present"
fi

# --- kernel headers for bcc ---------------------------------------------------
KDIR="/lib/modules/$(uname -r)"
if [ ! -e "$KDIR/build/include" ]; then
    hdr=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1)
    common=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | sort -V | tail -n1)
    [ -n "$hdr" ] && [ -n "$common" ] || die "no kernel headers under /usr/src (linux-headers-amd64 did not install?)"
    say "linking kernel headers: $KDIR/build -> $hdr"
    mkdir -p "$KDIR"
    ln -sfn "$hdr" "$KDIR/build"
    ln -sfn "$common" "$KDIR/source"
else
    say "kernel headers present ($KDIR/build)"
fi

# --- venv -----------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    say "creating venv $VENV (with system site packages, for bcc)"
    /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
# Reinstall only when the project's metadata changed since the last install.
if [ ! -f "$STAMP" ] || [ "$REPO/pyproject.toml" -nt "$STAMP" ]; then
    say "installing the project and its Python dependencies into the venv"
    # torch's CPU wheel from a local directory when it holds one (no download);
    # else the index pip is configured with (PyTorch's CPU index elsewhere:
    # PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu, docs/training.md)
    find_links=()
    TORCH_WHEELS="${TORCH_WHEELS:-/opt/wheels}"
    if compgen -G "$TORCH_WHEELS/torch-2.13.0+cpu-*.whl" >/dev/null; then
        find_links=(--find-links "$TORCH_WHEELS")
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${find_links[@]}" \
        -e "$REPO[test,cluster,torch]"
    touch "$STAMP"
else
    say "venv up to date"
fi

"$VENV/bin/python" -c "import bcc, pyroute2, scapy, yaml, prometheus_client" \
    || die "the venv cannot import its dependencies; remove $VENV and run again"

# --- `sudo talb`: a link on sudo's secure_path (never replaces another talb) ----
VENV="$VENV" bash "$REPO/scripts/talb-link.sh" install \
    || printf 'setup: note: talb is not linked onto sudo'"'"'s PATH (above); use sudo %s/bin/talb\n' "$VENV" >&2
say "set-up complete"
