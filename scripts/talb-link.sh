#!/usr/bin/env bash
# `talb` on sudo's secure_path: a root-owned symlink /usr/local/bin/talb ->
# <venv>/bin/talb, so that `sudo talb ...` (and plain `talb` for root) works
# after `make setup`. /usr/local/bin is on Debian's secure_path
# (/etc/sudoers: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
# and on root's PATH.
#
#   talb-link.sh install   make the link (idempotent); run by scripts/setup.sh
#   talb-link.sh remove    remove it if it is ours (make clean)
#
# Ours: a symlink whose target is this venv's talb (the venv's real path, so
# a worktree whose .venv links to a shared venv makes the same link). A
# `talb` that is anything else -- a file, or a link to another checkout's
# venv -- is never replaced or removed; install says so and what to do, and
# does not fail (the venv's own .venv/bin/talb always works).
# Environment: VENV (default <repo>/.venv), TALB_BIN_DIR (default
# /usr/local/bin) and TALB_SUDOERS (default /etc/sudoers, whose secure_path
# is checked for TALB_BIN_DIR): the tests use their own.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
BIN_DIR="${TALB_BIN_DIR:-/usr/local/bin}"
SUDOERS="${TALB_SUDOERS:-/etc/sudoers}"
LINK="$BIN_DIR/talb"

say() { printf '==> %s\n' "$*"; }
note() { printf 'setup: note: %s\n' "$*" >&2; }
die() { printf 'talb-link: error: %s\n' "$*" >&2; exit 1; }

# The link's target: the venv's real path, so that it stays valid whichever
# path (a worktree's .venv symlink) the venv was reached by.
target() {
    local real
    real="$(readlink -f -- "$VENV")" || return 1
    printf '%s/bin/talb\n' "$real"
}

ours() {  # the link exists and points at this venv's talb
    [ -L "$LINK" ] && [ "$(readlink -- "$LINK")" = "$(target)" ]
}

# sudo's secure_path (the last one set), if sudo is configured here.
secure_path() {
    local files=("$SUDOERS") f
    [ -r "$SUDOERS" ] || return 0
    if [ -d "$SUDOERS.d" ]; then
        for f in "$SUDOERS.d"/*; do [ -f "$f" ] && files+=("$f"); done
    fi
    grep -h -E '^[[:space:]]*Defaults[[:space:]].*secure_path[[:space:]]*=' "${files[@]}" 2>/dev/null \
        | tail -n1 | sed -E 's/.*secure_path[[:space:]]*=[[:space:]]*"?([^"]*)"?.*/\1/' || true
}

install_link() {
    local want
    want="$(target)"
    [ -x "$want" ] || die "$want is missing: run make setup (the venv first)"
    if ours; then
        say "talb on sudo's PATH: $LINK -> $want (present)"
    elif [ -e "$LINK" ] || [ -L "$LINK" ]; then
        local what="a file"
        [ -L "$LINK" ] && what="a link to $(readlink -- "$LINK")"
        note "$LINK is $what, not this checkout's talb: left alone, so 'sudo talb' runs" \
             "that one. This checkout's is 'sudo $VENV/bin/talb'; to make it 'sudo talb'," \
             "remove $LINK (if nothing else needs it) and run 'sudo make setup' again."
        return 0
    else
        mkdir -p -- "$BIN_DIR"
        ln -s -- "$want" "$LINK"   # symlink(2): fails rather than replace what appeared meanwhile
        say "linked $LINK -> $want: 'sudo talb ...' works"
    fi
    local sp
    sp="$(secure_path)"
    if [ -n "$sp" ] && [[ ":$sp:" != *":$BIN_DIR:"* ]]; then
        note "sudo's secure_path ($sp) lacks $BIN_DIR: 'sudo talb' will not find it;" \
             "run sudo $LINK, or add $BIN_DIR to secure_path (visudo)."
    fi
}

remove_link() {
    if [ -L "$VENV" ]; then
        # a venv shared through a link (a worktree's): it lives on, and so does its talb
        ours && say "left $LINK: the venv it runs ($(readlink -f -- "$VENV")) stays"
        return 0
    fi
    if ours; then
        rm -f -- "$LINK"
        say "removed $LINK"
    fi
}

case "${1:-}" in
    install) install_link ;;
    remove) remove_link ;;
    *) die "usage: $0 install|remove" ;;
esac
