"""bcc's Python bindings, from whichever Python runs talb.

bcc's bindings are not on PyPI (PyPI's ``bcc`` is an unrelated lattice
package): they come with Debian's python3-bpfcc, under
/usr/lib/python3/dist-packages, which only Debian's python3 (and venvs made
from it with --system-site-packages) sees. From a pyenv or conda Python,
``import bcc`` fails. The bindings are pure Python over ``libbcc.so.0``
through ctypes, using only the standard library (ctypes, re, json, fcntl,
collections.abc, ...), so talb imports them from Debian's directory itself,
after checking that:

* the bindings' version (bcc/version.py) is the version of the libbcc.so
  that ``ctypes.CDLL("libbcc.so.0")`` loads (its file name,
  libbcc.so.0.X.Y): the bindings hard-code libbcc's C signatures, so
  another version is refused rather than called with wrong arguments;
* they import in this Python (a SyntaxError or a missing module of a
  future Python is reported, not raised). bcc 0.26's bindings import and
  compile a program in CPython 3.6 to 3.13; from 3.12 on, one regex literal
  (``b'^.*\\.cold...'``) draws a SyntaxWarning for its unknown escape, which
  Python keeps verbatim: the warning is silenced, the behaviour is the same.

Only the ``bcc`` package is imported from there (not the whole of
dist-packages, whose compiled modules are built for Debian's python3), and
no bytecode is written into Debian's directory. Anything else ends in
:class:`BccUnavailable`, a short message naming this Python and what to do.

``TALB_BCC_DIR``: the directory holding the ``bcc`` package to use when this
Python cannot import it (default: where ``dpkg -L python3-bpfcc`` says).
"""
from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("talb.bcc")

DEBIAN_PACKAGE = "python3-bpfcc"
#: the name the bindings load libbcc by (bcc/libbcc.py)
LIBBCC = "libbcc.so.0"
ENV_DIR = "TALB_BCC_DIR"

_VERSION = re.compile(r"__version__\s*=\s*['\"]([^'\"]+)['\"]")
_LIB_VERSION = re.compile(r"libbcc\.so\.(\d+\.\d+\.\d+)")


class BccUnavailable(RuntimeError):
    """bcc's bindings cannot be used from this Python; the message says why
    and what to do."""


@dataclass(frozen=True)
class Found:
    """Where ``bcc`` comes from: this Python's own path (``own``) or a
    directory talb imports it from (``debian``: python3-bpfcc's; ``env``:
    $TALB_BCC_DIR)."""
    source: str
    package_dir: Path | None   # the bcc package's directory; None: not found
    why_not: str = ""          # for a fallback not found: what was looked at


def _python() -> str:
    return f"{sys.executable} (Python {sys.version.split()[0]})"


def _advice(install: str = f"sudo apt-get install {DEBIAN_PACKAGE}") -> str:
    return (f"\n  to fix: {install} (talb then uses Debian's bindings), or run talb from a venv "
            "made with `/usr/bin/python3 -m venv --system-site-packages` (as `sudo make setup` does)")


def debian_bindings(package: str = DEBIAN_PACKAGE) -> Path | None:
    """The ``bcc`` package directory dpkg lists for ``package``; None when
    the package is not installed (or there is no dpkg)."""
    try:
        r = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    for line in r.stdout.splitlines():
        if line.endswith("/bcc/__init__.py") and Path(line).is_file():
            return Path(line).parent
    return None


_lock = threading.Lock()
_found: Found | None = None
_checked: str | None = None     # the note of a checked fallback ("" for own)


def find() -> Found:
    """Where ``import bcc`` would come from, without importing it (cheap:
    the compile cache keys on bcc's version without loading libbcc)."""
    global _found
    with _lock:
        if _found is None:
            _found = _find()
        return _found


def _find() -> Found:
    loaded = sys.modules.get("bcc")
    spec = getattr(loaded, "__spec__", None) if loaded is not None else importlib.util.find_spec("bcc")
    if spec is not None:
        dirs = [Path(d) for d in (spec.submodule_search_locations or ())]
        for d in dirs:
            if (d / "libbcc.py").is_file():
                return Found("own", d)
        where = dirs[0] if dirs else spec.origin
        raise BccUnavailable(
            f"the 'bcc' that {_python()} imports ({where}) is not bcc's BPF bindings "
            f"(PyPI's 'bcc' is an unrelated package){_advice('pip uninstall bcc')}")
    env = os.environ.get(ENV_DIR)
    if env:
        d = Path(env) / "bcc"
        if (d / "__init__.py").is_file():
            return Found("env", d)
        return Found("env", None, f"{ENV_DIR}={env} holds no bcc package")
    d = debian_bindings()
    if d is not None:
        return Found("debian", d)
    if shutil.which("dpkg") is None:
        return Found("debian", None, f"there is no dpkg to find Debian's {DEBIAN_PACKAGE} with")
    return Found("debian", None, f"Debian's {DEBIAN_PACKAGE} is not installed")


def bindings_version(package_dir: Path) -> str | None:
    """The version in bcc/version.py, or None."""
    try:
        m = _VERSION.search((package_dir / "version.py").read_text())
    except OSError:
        return None
    return m.group(1) if m else None


def version() -> str:
    """bcc's version as found (no import, no libbcc loaded); "none" when
    there is no bcc."""
    try:
        found = find()
    except BccUnavailable:
        return "none"
    if found.package_dir is None:
        return "none"
    return bindings_version(found.package_dir) or "?"


def loaded_libbcc() -> Path:
    """The file ``ctypes.CDLL("libbcc.so.0")`` maps in this process -- the
    one the bindings will call -- as /proc/self/maps names it."""
    try:
        ctypes.CDLL(LIBBCC, use_errno=True)
    except OSError as exc:
        raise BccUnavailable(f"{LIBBCC} cannot be loaded ({exc})"
                             f"{_advice('sudo apt-get install libbpfcc')}") from None
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) == 6 and Path(fields[5].strip()).name.startswith("libbcc.so"):
                return Path(fields[5].strip())
    raise BccUnavailable(f"{LIBBCC} loaded, but /proc/self/maps does not name its file")


def check() -> str:
    """Make sure ``import bcc`` will work, importing nothing: "" when this
    Python has bcc itself, else the one-line note of the fallback (logged
    once). Raises BccUnavailable with what to do."""
    global _checked
    found = find()
    with _lock:
        if _checked is not None:
            return _checked
        if found.source == "own":
            _checked = ""
            return _checked
        if found.package_dir is None:
            raise BccUnavailable(f"{_python()} cannot import bcc, and {found.why_not}"
                                 f"{_advice()}")
        theirs = bindings_version(found.package_dir)
        lib = loaded_libbcc()
        m = _LIB_VERSION.fullmatch(lib.resolve().name)
        lib_version = m.group(1) if m else None
        if theirs is None or lib_version is None or theirs != lib_version:
            raise BccUnavailable(
                f"{_python()} cannot import bcc, and the bindings in {found.package_dir} "
                f"(bcc {theirs or 'of unknown version'}) do not match {lib.resolve()} "
                f"({lib_version or 'unknown version'}): talb does not mix them"
                f"{_advice(f'sudo apt-get install --reinstall {DEBIAN_PACKAGE} libbpfcc')}")
        _checked = (f"note: {_python()} has no bcc of its own; using bcc {theirs} from "
                    f"{found.package_dir} with {lib.resolve()}")
        log.warning("%s", _checked)
        return _checked


def import_bcc():
    """The ``bcc`` module, from this Python's path or, failing that, from
    the directory :func:`find` names (checked by :func:`check`)."""
    found = find()
    check()
    if found.source == "own":
        try:
            import bcc
        except Exception as exc:  # noqa: BLE001 - e.g. libbcc.so.0 missing: OSError
            raise BccUnavailable(f"import bcc failed in {_python()} "
                                 f"({type(exc).__name__}: {exc})"
                                 f"{_advice(f'sudo apt-get install {DEBIAN_PACKAGE} libbpfcc')}") from None
        return bcc
    with _lock:
        if "bcc" in sys.modules:
            return sys.modules["bcc"]
        return _import_from(found.package_dir)


def _import_from(package_dir: Path):
    """Import the package in ``package_dir`` as ``bcc`` (its relative
    imports resolve through the spec's search location)."""
    spec = importlib.util.spec_from_file_location(
        "bcc", package_dir / "__init__.py", submodule_search_locations=[str(package_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["bcc"] = module
    dont_write = sys.dont_write_bytecode
    # no __pycache__ of this Python in Debian's directory; the SyntaxWarning
    # of 3.12+ on an unknown regex escape (kept verbatim) is not the user's
    sys.dont_write_bytecode = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever this Python lacks, one message
        for name in [n for n in sys.modules if n == "bcc" or n.startswith("bcc.")]:
            del sys.modules[name]
        raise BccUnavailable(
            f"{_python()} cannot import bcc, and the bindings in {package_dir} do not "
            f"import in it either ({type(exc).__name__}: {exc}){_advice()}") from None
    finally:
        sys.dont_write_bytecode = dont_write
    return module
