"""A bad value as an error message shows it: whole when short, else what
it is and a short excerpt -- never a whole file in a message.

``shown(value)`` is ``repr(value)`` up to :data:`WHOLE` characters (so the
messages of short values read as before); a longer value is described by
its kind and size with its first :data:`EXCERPT` characters, e.g.
``a YAML string of 2,154 characters: 'root:x:0:0:root:/root:/bin/b…'``.
"""
from __future__ import annotations

#: a value whose repr is at most this long is shown whole
WHOLE = 80
#: characters of a longer value's repr shown
EXCERPT = 32
_KINDS = ((str, "string", "character"), (bytes, "byte string", "byte"), (dict, "mapping", "key"),
          (list, "list", "item"), (tuple, "tuple", "item"), (set, "set", "item"))


def shown(value, source: str = "") -> str:
    """``value`` for an error message: its repr when short, else "a
    [source ]<kind> of N <units>: <excerpt>…". ``source``: where the value
    came from ("YAML", "JSON"), said in the description."""
    text = repr(value)
    if len(text) <= WHOLE:
        return text
    cut = text[:EXCERPT].rstrip() + "…"
    if isinstance(value, (str, bytes)):
        cut += text[-1]                 # the closing quote: still reads as a string
    src = f"{source} " if source else ""
    for kind, name, unit in _KINDS:
        if isinstance(value, kind):
            n = len(value)
            return f"a {src}{name} of {n:,} {unit}{'' if n == 1 else 's'}: {cut}"
    return f"a {src}{type(value).__name__} of {len(text):,} characters as text: {cut}"
