"""The registry of schemes: every ``SCHEME`` record of ``datapath/schemes/``,
found by walking the package (a new ``<name>.py`` is found without editing
a list), checked against ``bpf/include/talb/constants.h``, in id order.

    from datapath.schemes.registry import SCHEMES, get
    for s in SCHEMES: ...          # Scheme records, ecmp first
    get("drill").param("d").hi     # 4

The names and ids themselves stay the C's (``common.c_constants.SCHEMES``,
from the TALB_SCHEME_* defines, for the layers below this one); this module
adds what each scheme declares about itself, and refuses to import when the
two disagree: a define without its module, a module without its define, an
id that is not the define's, or a scheme past the room the C leaves
(:data:`MAX_SCHEMES`, docs/schemes.md "Limits").
"""
from __future__ import annotations

import importlib
import pkgutil
from types import MappingProxyType

from common.c_constants import CONST, CONSTANTS_H
from common.c_constants import SCHEMES as C_SCHEMES
from datapath import schemes as _package
from datapath.schemes.spec import Scheme

__all__ = ["SCHEMES", "BY_NAME", "MAX_SCHEMES", "RegistryError", "get", "names", "discover"]

#: Decision counters sit at CNT_DECISION_BASE + id, below CNT_OPT_TAGGED
#: (constants.h): ids 0..MAX_SCHEMES-1 fit (8 today: six used, two spare).
#: A ninth scheme needs the counters moved in the C first.
MAX_SCHEMES = CONST["CNT_OPT_TAGGED"] - CONST["CNT_DECISION_BASE"]


class RegistryError(RuntimeError):
    """A scheme module and constants.h disagree (the message names both)."""


def discover() -> tuple[Scheme, ...]:
    """Every module of datapath/schemes/ that declares ``SCHEME``, checked
    against constants.h, in id order."""
    found: dict[str, Scheme] = {}
    for info in pkgutil.iter_modules(_package.__path__):
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        scheme = getattr(module, "SCHEME", None)
        if scheme is None:          # a helper (pick.py, spec.py, this module)
            continue
        where = f"datapath/schemes/{info.name}.py"
        if not isinstance(scheme, Scheme):
            raise RegistryError(f"{where}: SCHEME is a {type(scheme).__name__}, not a Scheme")
        if scheme.name != info.name:
            raise RegistryError(f"{where}: SCHEME.name is {scheme.name!r}: a scheme's module is "
                                f"named after it ({scheme.name}.py)")
        define = f"TALB_SCHEME_{scheme.name.upper()}"
        if scheme.name not in C_SCHEMES:
            raise RegistryError(f"{where}: {CONSTANTS_H} has no #define {define} (the scheme's id)")
        if scheme.id != C_SCHEMES[scheme.name]:
            raise RegistryError(f"{where}: SCHEME.id is {scheme.id}, but {CONSTANTS_H} "
                                f"says {define} {C_SCHEMES[scheme.name]}")
        if not 0 <= scheme.id < MAX_SCHEMES:
            raise RegistryError(f"{where}: id {scheme.id}: its decision counter "
                                f"CNT_DECISION_BASE + id would reach CNT_OPT_TAGGED; ids "
                                f"0..{MAX_SCHEMES - 1} fit ({CONSTANTS_H})")
        found[scheme.name] = scheme
    missing = [n for n in C_SCHEMES if n not in found]
    if missing:
        raise RegistryError(f"{CONSTANTS_H} defines " + ", ".join(
            f"TALB_SCHEME_{n.upper()}" for n in missing) + " without its module: "
            + ", ".join(f"datapath/schemes/{n}.py (with a SCHEME record)" for n in missing))
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
