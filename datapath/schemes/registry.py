"""The registry of schemes: every ``SCHEME`` record of ``datapath/schemes/``
and of each directory of $TALB_SCHEME_PATH, found by walking them (a new
``<name>.py`` is found without editing a list), checked against its C
header (``<name>.h``: ``TALB_SCHEME_<NAME>`` and its flags), in id order.

    from datapath.schemes.registry import SCHEMES, get
    for s in SCHEMES: ...          # Scheme records, ecmp first
    get("drill").param("d").hi     # 4

The names and ids themselves stay the C's (``common.c_constants.SCHEMES``,
from the headers' TALB_SCHEME_<NAME> defines, for the layers below this
one); this module adds what each scheme declares about itself, and refuses
to import when the two disagree: a header without its module, a module
without its header, an id that is not the header's, a clock need or an
inline decision the header's flags do not say, or a scheme past the room
the C leaves (:data:`MAX_SCHEMES`, docs/schemes.md "Limits").
docs/add-a-scheme.md is the tutorial.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from types import MappingProxyType

from common.c_constants import CONSTANTS_H, SCHEME_HEADERS, SCHEME_PATH_ENV, TALB_MAX_SCHEMES
from common.c_constants import SCHEMES as C_SCHEMES
from common.c_constants import scheme_dirs
from datapath import schemes as _package
from datapath.schemes.spec import Scheme

__all__ = ["SCHEMES", "BY_NAME", "MAX_SCHEMES", "RegistryError", "get", "names", "discover"]

#: Scheme ids 0..MAX_SCHEMES-1: decision counters (CNT_DECISION_BASE + id)
#: and the scheme_progs array are sized for TALB_MAX_SCHEMES (constants.h).
MAX_SCHEMES = TALB_MAX_SCHEMES
#: the module name a scheme from $TALB_SCHEME_PATH is imported under
EXTERNAL_PACKAGE = "talb_external_schemes"


class RegistryError(RuntimeError):
    """A scheme module and its C header disagree (the message names both)."""


def _modules():
    """(name, where, module) of every module of datapath/schemes/, then of
    each $TALB_SCHEME_PATH directory's <name>.py."""
    for info in pkgutil.iter_modules(_package.__path__):
        yield (info.name, f"datapath/schemes/{info.name}.py",
               importlib.import_module(f"{_package.__name__}.{info.name}"))
    for d in scheme_dirs()[1:]:
        for path in sorted(Path(d).glob("*.py")):
            qual = f"{EXTERNAL_PACKAGE}.{path.stem}"
            module = sys.modules.get(qual)
            if module is None:
                spec = importlib.util.spec_from_file_location(qual, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[qual] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[qual]
                    raise
            yield path.stem, str(path), module


def discover() -> tuple[Scheme, ...]:
    """Every scheme module (datapath/schemes/, $TALB_SCHEME_PATH) that
    declares ``SCHEME``, checked against its header, in id order."""
    found: dict[str, Scheme] = {}
    control_of: dict[str, str] = {}         # a control function's name -> its scheme
    for name, where, module in _modules():
        scheme = getattr(module, "SCHEME", None)
        if scheme is None:          # a helper (pick.py, spec.py, this module)
            continue
        if not isinstance(scheme, Scheme):
            raise RegistryError(f"{where}: SCHEME is a {type(scheme).__name__}, not a Scheme")
        if scheme.name != name:
            raise RegistryError(f"{where}: SCHEME.name is {scheme.name!r}: a scheme's module is "
                                f"named after it ({scheme.name}.py)")
        if scheme.name in found:
            raise RegistryError(f"{where}: a second module of scheme {scheme.name!r}")
        define = f"TALB_SCHEME_{scheme.name.upper()}"
        if scheme.name not in C_SCHEMES:
            raise RegistryError(f"{where}: no header {scheme.name}.h with #define {define} (the "
                                f"scheme's id) in " + " or ".join(map(str, scheme_dirs()))
                                + f" (${SCHEME_PATH_ENV})")
        header = SCHEME_HEADERS.get(scheme.name)
        hpath = header.path if header else CONSTANTS_H
        if scheme.id != C_SCHEMES[scheme.name]:
            raise RegistryError(f"{where}: SCHEME.id is {scheme.id}, but {hpath} "
                                f"says {define} {C_SCHEMES[scheme.name]}")
        if not 0 <= scheme.id < MAX_SCHEMES:
            raise RegistryError(f"{where}: id {scheme.id}: ids 0..{MAX_SCHEMES - 1} fit "
                                f"(TALB_MAX_SCHEMES, {CONSTANTS_H})")
        if header is not None:
            if scheme.inline != header.has("INLINE"):
                raise RegistryError(f"{where}: SCHEME.inline is {scheme.inline}, but {hpath}'s "
                                    f"{define}_FLAGS {'lack' if scheme.inline else 'have'} "
                                    f"TALB_SF_INLINE")
            clock = header.has("CLOCK") or header.has("CLOCK_HOOK")
            if scheme.clock != clock:
                raise RegistryError(f"{where}: SCHEME.clock is {scheme.clock}, but {hpath}'s "
                                    f"{define}_FLAGS {'have' if clock else 'lack'} "
                                    f"TALB_SF_CLOCK(_HOOK)")
        for f in scheme.control:
            other = control_of.setdefault(f.__name__, scheme.name)
            if other != scheme.name:
                raise RegistryError(f"{where}: SCHEME.control {f.__name__}: scheme {other!r} has "
                                    f"a control function of that name (datapath.control "
                                    f"finds both by it)")
        found[scheme.name] = scheme
    missing = [n for n in C_SCHEMES if n not in found]
    if missing:
        raise RegistryError(", ".join(
            f"{SCHEME_HEADERS[n].path if n in SCHEME_HEADERS else CONSTANTS_H} defines "
            f"TALB_SCHEME_{n.upper()}" for n in missing) + " without its module: " + ", ".join(
            f"{n}.py beside it (datapath/schemes/{n}.py for the project's), with a SCHEME "
            f"record" for n in missing))
    return tuple(sorted(found.values(), key=lambda s: s.id))


#: every scheme, in id order (ecmp first): the list the project iterates
SCHEMES: tuple[Scheme, ...] = discover()
BY_NAME = MappingProxyType({s.name: s for s in SCHEMES})


def get(name: str) -> Scheme:
    """The scheme named ``name`` (lower case); KeyError naming the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown scheme {name!r}; known: {', '.join(BY_NAME)}") from None


def names() -> tuple[str, ...]:
    """The schemes' names in id order."""
    return tuple(BY_NAME)


def fallback_choices() -> tuple[str, ...]:
    """The schemes TaLB (a scheme with a fallback) may hand untagged packets to."""
    return tuple(s.name for s in SCHEMES if s.not_a_fallback is None)
