#!/usr/bin/env bash
# `make grafana`: install Grafana (not in Debian's archive) from Grafana's own
# APT repository, or from a .deb brought from another machine
# (GRAFANA_DEB=path), for `make monitoring`'s dashboards. Prometheus alone
# needs none of this.
#
#   * Already installed: says so, changes nothing (idempotent).
#   * The repository is probed first (its signing key, GRAFANA_TIMEOUT s,
#     default 5): unreachable -> what to do instead, exit 1, nothing changed.
#   * The key must have Grafana's published fingerprint (a rotated key is for
#     a human to check: GRAFANA_KEY_FINGERPRINT=... to accept another).
#   * Keyring and source entry are written only then; if updating from the
#     repository or installing fails, what this run added is removed again,
#     so a failed run never leaves half a repository behind. A keyring or
#     source entry that was there before is reused and never removed.
#
# For the tests: GRAFANA_APT_URL, GRAFANA_KEYRING, GRAFANA_APT_LIST.
set -euo pipefail

URL="${GRAFANA_APT_URL:-https://apt.grafana.com}"
URL="${URL%/}"
FINGERPRINT="${GRAFANA_KEY_FINGERPRINT:-B53AE77BADB630A683046005963FA27710458545}"
KEYRING="${GRAFANA_KEYRING:-/etc/apt/keyrings/grafana.gpg}"
LIST="${GRAFANA_APT_LIST:-/etc/apt/sources.list.d/grafana.list}"
TIMEOUT="${GRAFANA_TIMEOUT:-5}"
DEB="${GRAFANA_DEB:-}"
ENTRY="deb [signed-by=$KEYRING] $URL stable main"
DEB_URL="https://dl.grafana.com/oss/release/grafana_<version>_amd64.deb"

say() { printf '==> %s\n' "$*"; }
fail() { printf 'make grafana: %s\n' "$*" >&2; exit 1; }

alternatives() {
    cat >&2 <<EOF
What you can do instead:
  * Prometheus only -- everything but the Grafana dashboards works without it:
      sudo make monitoring        Prometheus' own UI on http://127.0.0.1:9090 (graphs, targets)
      sudo talb report RESULTS    a finished run's key panels as PNG
  * Grafana from its .deb: on a machine that reaches the internet, download
      $DEB_URL
    (versions: https://grafana.com/grafana/download?platform=linux, "Ubuntu and Debian"),
    copy it here and run
      sudo make grafana GRAFANA_DEB=/path/to/grafana_<version>_amd64.deb
    (its few dependencies come from Debian's archive); then sudo make monitoring starts it.
  * Behind an HTTP proxy: export https_proxy=http://PROXY:PORT (curl and apt use it)
    and run make grafana again.
EOF
}

installed_version() {
    { dpkg-query -W -f='${Status} ${Version}\n' grafana grafana-enterprise 2>/dev/null || true; } \
        | awk '$1 == "install" && $3 == "installed" { print $4; exit }'
}

[ "$(id -u)" -eq 0 ] || fail "run as root (sudo make grafana): it installs a package"
command -v apt-get >/dev/null || fail "apt-get not found: this target supports Debian and derivatives"

if version="$(installed_version)" && [ -n "$version" ]; then
    say "Grafana $version is installed: sudo make monitoring starts it with the talb dashboards"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive

# --- a .deb brought from elsewhere ----------------------------------------------------
if [ -n "$DEB" ]; then
    [ -f "$DEB" ] || fail "GRAFANA_DEB: no such file: $DEB"
    pkg="$(dpkg-deb -f "$DEB" Package 2>/dev/null)" \
        || fail "GRAFANA_DEB: not a Debian package: $DEB"
    case "$pkg" in
        grafana|grafana-enterprise) ;;
        *) fail "GRAFANA_DEB: $DEB is package '$pkg', not grafana" ;;
    esac
    say "installing $pkg $(dpkg-deb -f "$DEB" Version) from $DEB"
    apt-get install -y -q --no-install-recommends "$(readlink -f -- "$DEB")" \
        || fail "apt-get could not install $DEB (above); its dependencies come from Debian's archive"
    say "Grafana $(installed_version) installed (from the .deb: no repository, no updates);" \
        "sudo make monitoring starts it"
    exit 0
fi

# --- Grafana's APT repository ------------------------------------------------------------
tmp="$(mktemp -d)"
added=()   # what this run wrote: removed again if it fails
cleanup() {
    local status=$?
    if [ "$status" -ne 0 ] && [ "${#added[@]}" -gt 0 ]; then
        rm -f -- "${added[@]}"
        printf 'make grafana: removed what this run added: %s\n' "${added[*]}" >&2
    fi
    rm -rf -- "$tmp"
}
trap cleanup EXIT

command -v curl >/dev/null || fail "curl is missing: sudo make setup installs it"
say "probing $URL (timeout ${TIMEOUT} s)"
if ! err="$(curl -fsS --connect-timeout "$TIMEOUT" --max-time "$((TIMEOUT * 3))" \
                -o "$tmp/gpg.key" "$URL/gpg.key" 2>&1)"; then
    printf 'make grafana: %s is not reachable from this machine (%s; connect timeout %s s).\n' \
        "$URL" "${err:-curl failed}" "$TIMEOUT" >&2
    printf 'Nothing was changed: no APT source, no key.\n' >&2
    alternatives
    exit 1
fi

if ! command -v gpg >/dev/null; then
    say "installing gpg (to check the repository's key)"
    apt-get install -y -q --no-install-recommends gpg >/dev/null \
        || fail "could not install gpg from Debian's archive; nothing was changed"
fi
got="$(gpg --homedir "$tmp" --batch --quiet --with-colons --show-keys "$tmp/gpg.key" 2>/dev/null \
       | awk -F: '$1 == "fpr" { print $10; exit }')"
if [ "$got" != "$FINGERPRINT" ]; then
    fail "the key at $URL/gpg.key has fingerprint '${got:-none}', not Grafana's published" \
         "$FINGERPRINT: not trusted, nothing was changed. If Grafana announced a new key" \
         "(https://grafana.com/docs/grafana/latest/setup-grafana/installation/debian/)," \
         "run again with GRAFANA_KEY_FINGERPRINT=$got"
fi
gpg --homedir "$tmp" --batch --yes --dearmor -o "$tmp/grafana.gpg" "$tmp/gpg.key"

if [ -e "$KEYRING" ]; then
    cmp -s "$KEYRING" "$tmp/grafana.gpg" \
        || say "note: $KEYRING is there and differs from $URL's key: left as it is"
else
    mkdir -p -m 0755 -- "$(dirname -- "$KEYRING")"
    install -m 0644 -- "$tmp/grafana.gpg" "$KEYRING.talb-new"
    mv -f -- "$KEYRING.talb-new" "$KEYRING"
    added+=("$KEYRING")
fi
if [ -e "$LIST" ]; then
    [ "$(cat -- "$LIST")" = "$ENTRY" ] \
        || say "note: $LIST is there with other content: left as it is, used as it is"
else
    mkdir -p -m 0755 -- "$(dirname -- "$LIST")"
    printf '%s\n' "$ENTRY" > "$LIST.talb-new"
    chmod 0644 -- "$LIST.talb-new"
    mv -f -- "$LIST.talb-new" "$LIST"
    added+=("$LIST")
fi

say "updating the package lists from $URL"
# only Grafana's source: an unrelated broken source must not stop this
if ! apt-get update -q -o Dir::Etc::sourcelist="$LIST" -o Dir::Etc::sourceparts=- \
        -o APT::Get::List-Cleanup=0; then
    printf 'make grafana: apt-get update from %s failed (above).\n' "$URL" >&2
    alternatives
    exit 1
fi
say "installing grafana"
if ! apt-get install -y -q --no-install-recommends grafana; then
    printf 'make grafana: apt-get install grafana failed (above).\n' >&2
    alternatives
    exit 1
fi
added=()   # a success: the repository stays, for updates
say "Grafana $(installed_version) installed from $URL (updates come with apt-get upgrade);" \
    "sudo make monitoring starts it with the talb dashboards"
