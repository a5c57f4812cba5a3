"""Link rates and buffer sizes as people write them in topology files.

Rates are bits per second with decimal multipliers, as tc writes them
(``100mbit``, ``1gbit``, ``500kbit``, or ``k``/``m``/``g`` alone). tc reads
``mbps`` as *megabytes* per second while most people mean megabits, so the
``*bps`` spellings are refused rather than guessed.

Sizes are bytes with decimal multipliers (``150kb`` = 150000, ``15k`` = 15000),
like rates; ``kib``/``mib`` are the binary ones. (tc's own ``kb`` is 1024.)
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from common.excerpt import shown

_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d*)?(?:e[+-]?\d+)?)\s*([a-z]*)\s*$")

_RATE_UNITS = {"": 1, "bit": 1, "k": 10**3, "kbit": 10**3, "m": 10**6, "mbit": 10**6,
               "g": 10**9, "gbit": 10**9}
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6,
               "kib": 2**10, "mib": 2**20}
RATE_HINT = "use e.g. 100mbit, 1gbit, 500kbit"
SIZE_HINT = "use e.g. 150kb, 15k, 1500"


def _parse(value, units: dict[str, int], what: str, hint: str) -> int:
    if isinstance(value, bool):  # bool is an int subclass: `rate: yes` is a typo, not 1 bit/s
        raise ValueError(f"cannot parse {what} {shown(value)} ({hint})")
    # Decimal, so that "1.1gbit" is exactly 1_100_000_000
    if isinstance(value, (int, float)):
        number, unit = str(value), ""
    elif isinstance(value, str) and (m := _NUMBER_UNIT.match(value.lower())):
        number, unit = m.group(1), m.group(2)
        if unit.endswith("bps") and units is _RATE_UNITS:
            raise ValueError(f"ambiguous {what} {shown(value)}: tc reads '{unit}' as bytes per second; "
                             f"write {m.group(1)}{unit[:-3]}bit for bits per second")
    else:
        raise ValueError(f"cannot parse {what} {shown(value)} ({hint})")
    if unit not in units:
        raise ValueError(f"cannot parse {what} {shown(value)} ({hint})")
    try:
        result = Decimal(number) * units[unit]
    except InvalidOperation:
        raise ValueError(f"cannot parse {what} {shown(value)} ({hint})") from None
    if not result.is_finite() or result < 0:
        raise ValueError(f"cannot parse {what} {shown(value)} ({hint})")
    if result != int(result):
        raise ValueError(f"{what} {shown(value)} is not a whole number of {'bits/s' if what == 'rate' else 'bytes'}")
    return int(result)


def parse_rate(value) -> int:
    """``"100mbit"`` -> 100_000_000 (bit/s). Plain numbers are bit/s."""
    return _parse(value, _RATE_UNITS, "rate", RATE_HINT)


def parse_size(value) -> int:
    """``"150kb"`` -> 150_000 (bytes). Plain numbers are bytes."""
    return _parse(value, _SIZE_UNITS, "size", SIZE_HINT)


def _format(value: int, steps: tuple[tuple[int, str], ...], plain: str):
    for factor, unit in steps:
        if value >= factor and value % factor == 0:
            return f"{value // factor}{unit}"
    return f"{value}{plain}" if plain else value


def format_rate(bps: int) -> str:
    """100_000_000 -> ``"100mbit"``; exact, so parse_rate(format_rate(x)) == x."""
    return _format(bps, ((10**9, "gbit"), (10**6, "mbit"), (10**3, "kbit")), "bit")


def format_size(nbytes: int):
    """150_000 -> ``"150kb"``; sizes with no exact decimal unit stay plain ints."""
    return _format(nbytes, ((10**6, "mb"), (10**3, "kb")), "")
