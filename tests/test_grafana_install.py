"""`make grafana` (scripts/grafana.sh) where Grafana's repository cannot be
used: it says so quickly and what to do instead, exits non-zero, and leaves
no APT source or key behind. The real apt.grafana.com is tried only where
it is unreachable (as on this project's machine); elsewhere the test would
install Grafana, so it is skipped. Keyring and source paths of the other
cases are the test's own: /etc/apt is never touched."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "grafana.sh"
KEYRING, LIST = Path("/etc/apt/keyrings/grafana.gpg"), Path("/etc/apt/sources.list.d/grafana.list")

def grafana_installed() -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "grafana"], capture_output=True,
                       text=True)
    return "install ok installed" in r.stdout


@pytest.fixture(autouse=True)
def not_installed():
    if os.geteuid() != 0:     # under CI=true a missing root fails, as for every root test
        skip_or_fail("make grafana runs as root")
    if grafana_installed():
        pytest.skip("Grafana is installed here: make grafana only says so")


def grafana(env: dict | None = None, *args, timeout=120):
    return subprocess.run(["bash", str(SCRIPT), *args], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def assert_says_what_to_do(stderr: str):
    assert "sudo make monitoring" in stderr and "Prometheus" in stderr   # Prometheus only
    assert "GRAFANA_DEB=" in stderr and "dl.grafana.com" in stderr       # the .deb route
    assert "https_proxy" in stderr


def test_unreachable_grafana_repository_for_real():
    """`make grafana` on a machine that cannot reach apt.grafana.com."""
    probe = subprocess.run(["curl", "-fsS", "--connect-timeout", "5", "--max-time", "15",
                            "-o", "/dev/null", "https://apt.grafana.com/gpg.key"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        pytest.skip("apt.grafana.com is reachable here: make grafana would install Grafana")
    before = {p: p.read_bytes() if p.exists() else None for p in (KEYRING, LIST)}
    t = time.monotonic()
    r = subprocess.run(["make", "-s", "-C", str(REPO), "grafana"], capture_output=True,
                       text=True, timeout=120)
    took = time.monotonic() - t
    assert r.returncode != 0, r.stdout
    assert "https://apt.grafana.com is not reachable from this machine" in r.stderr, r.stderr
    assert "Nothing was changed" in r.stderr
    assert_says_what_to_do(r.stderr)
    assert took < 20, f"took {took:.1f} s to find the repository unreachable"
    assert {p: p.read_bytes() if p.exists() else None for p in (KEYRING, LIST)} == before


def _dropping_address() -> str:
    """An address whose connection attempts are never answered (TEST-NET-1,
    RFC 5737): the timeout path, not a quick refusal."""
    return "192.0.2.1"


@pytest.mark.parametrize("url, why", [
    ("https://apt.grafana.invalid", "Could not resolve host"),
    (f"http://{_dropping_address()}:9", "timed out"),
])
def test_unreachable_repository_fails_within_the_timeout(tmp_path, url, why):
    env = {"GRAFANA_APT_URL": url, "GRAFANA_TIMEOUT": "2",
           "GRAFANA_KEYRING": str(tmp_path / "k" / "grafana.gpg"),
           "GRAFANA_APT_LIST": str(tmp_path / "l" / "grafana.list")}
    t = time.monotonic()
    r = grafana(env)
    assert r.returncode == 1 and f"{url} is not reachable" in r.stderr, r.stderr
    assert why in r.stderr or "Connection" in r.stderr or "Failed" in r.stderr, r.stderr
    assert time.monotonic() - t < 10
    assert_says_what_to_do(r.stderr)
    assert not (tmp_path / "k").exists() and not (tmp_path / "l").exists()


@pytest.fixture
def fake_repository(tmp_path):
    """An HTTP server on loopback with a signing key of our own and no
    Release file: reachable, trusted with its fingerprint, broken."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch"]
    subprocess.run([*gpg, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
                    "talb test <test@talb.invalid>", "ed25519", "sign", "never"],
                   check=True, capture_output=True, timeout=60)
    srv = tmp_path / "srv"
    srv.mkdir()
    (srv / "gpg.key").write_bytes(subprocess.run([*gpg, "--armor", "--export"], check=True,
                                                 capture_output=True).stdout)
    colons = subprocess.run([*gpg, "--with-colons", "--show-keys", str(srv / "gpg.key")],
                            check=True, capture_output=True, text=True).stdout
    fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import sys
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1", "-d", str(srv)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the test's HTTP server did not start"
                time.sleep(0.05)
        yield {"GRAFANA_APT_URL": f"http://127.0.0.1:{port}", "fpr": fpr,
               "GRAFANA_KEYRING": str(tmp_path / "keyrings" / "grafana.gpg"),
               "GRAFANA_APT_LIST": str(tmp_path / "sources" / "grafana.list")}
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_key_without_grafanas_fingerprint_is_not_trusted(fake_repository):
    env = {k: v for k, v in fake_repository.items() if k != "fpr"}
    r = grafana(env)
    assert r.returncode == 1, r.stdout
    assert f"has fingerprint '{fake_repository['fpr']}', not Grafana's published" in r.stderr
    assert "nothing was changed" in r.stderr
    assert not Path(env["GRAFANA_KEYRING"]).exists() and not Path(env["GRAFANA_APT_LIST"]).exists()


def test_a_repository_that_fails_leaves_nothing_it_added(fake_repository):
    """Key trusted, keyring and source written, `apt-get update` from the
    repository fails: both are removed again; an entry that was there before
    the run is kept."""
    env = {k: v for k, v in fake_repository.items() if k != "fpr"}
    env["GRAFANA_KEY_FINGERPRINT"] = fake_repository["fpr"]
    keyring, source = Path(env["GRAFANA_KEYRING"]), Path(env["GRAFANA_APT_LIST"])
    r = grafana(env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"apt-get update from {env['GRAFANA_APT_URL']} failed" in r.stderr, r.stderr
    assert f"removed what this run added: {keyring} {source}" in r.stderr
    assert not keyring.exists() and not source.exists()
    assert_says_what_to_do(r.stderr)
    # a source entry made before (by hand, as the README used to say) is not ours to remove
    source.parent.mkdir(parents=True, exist_ok=True)   # the run made it (as /etc/apt/keyrings)
    entry = f"deb [signed-by={keyring}] {env['GRAFANA_APT_URL']} stable main\n"
    source.write_text(entry)
    r = grafana(env)
    assert r.returncode == 1 and f"removed what this run added: {keyring}" in r.stderr, r.stderr
    assert source.read_text() == entry and not keyring.exists()


def test_a_deb_that_is_not_grafana_is_refused(tmp_path):
    assert "GRAFANA_DEB: no such file" in grafana({"GRAFANA_DEB": str(tmp_path / "x.deb")}).stderr
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: notgrafana\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@talb.invalid>\n"
        "Description: not grafana\n")
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(tmp_path / "notgrafana.deb")],
                   check=True, capture_output=True)
    r = grafana({"GRAFANA_DEB": str(tmp_path / "notgrafana.deb")})
    assert r.returncode == 1 and "is package 'notgrafana', not grafana" in r.stderr, r.stderr
