#!/usr/bin/env python3
"""Point every reference to the design and papers outside the repository at
what the repository holds (issue 39).

The design lived in ``../shared/DESIGN.md`` beside the checkout, cited as
"DESIGN §3" or "DESIGN section 3"; it is now ``docs/design.md`` with the same
section numbers. The papers (``../shared/papers/...``) are cited in
``docs/references.md``; the flow-size CDFs (``../shared/workloads/``) live in
``workload/cdfs/``. This rewrites every such reference in the tracked text
files (code comments, docs, help texts), in place.

Idempotent: a rewritten reference no longer matches, so running it again (as
after a merge that brings old references back) changes only those.
``results/`` is left alone (committed outputs) except ``results/README.md``.

    python scripts/rewrite_design_refs.py            # rewrite, list the files changed
    python scripts/rewrite_design_refs.py --check    # exit 1 naming what is left to rewrite
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DESIGN = "docs/design.md"
REFERENCES = "docs/references.md"
CDFS = "workload/cdfs/"

# The design's own word, as the code and docs wrote it; assembled so that this
# file does not match its own patterns.
_D = "DES" + "IGN"
_SHARED = r"\.\./shared/"
#: between the words of a reference: spaces, or a line break with a comment's
#: continuation ("\n * ", "\n    # ")
_GAP = r"([ \t]*\n[ \t]*(?:\*|#:?|//)?[ \t]*|[ \t]*)"

#: (pattern, replacement), applied in order; the specific ones first.
RULES: list[tuple[re.Pattern, str]] = [
    # S = the group's largest PCM was the first design's reading of the
    # paper; the design now documents 1.0 as the default and max as an option.
    (re.compile(rf"{_D} (?:§|section )5's reading"), "the paper's literal reading"),
    (re.compile(rf"{_D} section 5 says (\"default: the group's maximum PCM\")"),
     r"The project's first design said \1"),
    (re.compile(rf"to get the {_D} reading"), "to get that reading"),
    (re.compile(rf"S = the group's largest PCM \({_D} §5\)"),
     "S = the group's largest PCM (docs/talb-decisions.md, \"CASE 1\")"),
    # the CDFs: their origin is named in docs/references.md
    (re.compile(rf"CDFs of `{_SHARED}workloads/?`, copied into `workload/cdfs/`"),
     "CDFs in `workload/cdfs/` (origins: `docs/references.md`), kept in the package"),
    (re.compile(rf"Copies of `{_SHARED}workloads/?` \(the project's shared workload files\)"),
     "The published DCTCP and VL2 flow-size distributions (`docs/references.md`)"),
    (re.compile(rf"copies of (`{{1,2}}){_SHARED}workloads/?\1"),
     r"the published distributions, \1docs/references.md\1"),
    (re.compile(rf"\(copies of `{_SHARED}workloads/?`\)"), "(origins: `docs/references.md`)"),
    (re.compile(rf"{_SHARED}workloads/README\.md"), CDFS + "README.md"),
    (re.compile(rf"{_SHARED}workloads/?"), CDFS),
    # papers and the design
    (re.compile(rf"{_SHARED}papers(?:/[\w.-]*)?"), REFERENCES),
    (re.compile(rf"{_SHARED}{_D}\.md"), DESIGN),
    # a reference broken over two lines keeps its line break (and indent)
    (re.compile(rf"\b{_D}{_GAP}(?:§|section){_GAP}(\d+)"), lambda m: _design_ref(m)),
]

#: what must not be left anywhere after a rewrite (the --check)
LEFT = re.compile(rf"{_SHARED}|/work/shared|\b{_D}\s*(?:§|section\s+\d)")


def _design_ref(m: re.Match) -> str:
    """"DESIGN §3" / "DESIGN section 3" -> "docs/design.md §3", with a line
    break inside the old reference kept where it was."""
    gap = next((g for g in (m.group(1), m.group(2)) if "\n" in g), " ")
    return f"{DESIGN}{gap}§{m.group(3)}" if gap != " " else f"{DESIGN} §{m.group(3)}"


def tracked_files(root: Path) -> list[Path]:
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True,
                         check=True).stdout.decode()
    files = []
    for name in filter(None, out.split("\0")):
        if name.startswith("results/") and name != "results/README.md":
            continue
        path = root / name
        if path.resolve() == Path(__file__).resolve() or not path.is_file() or path.is_symlink():
            continue
        files.append(path)
    return files


def rewrite_text(text: str) -> str:
    for pattern, replacement in RULES:
        text = pattern.sub(replacement, text)
    return text


def _read(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None                     # binary
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 naming every file that still points outside")
    ap.add_argument("--root", type=Path, default=REPO, help="the checkout [default: this one]")
    args = ap.parse_args(argv)
    changed, left = [], []
    for path in tracked_files(args.root):
        text = _read(path)
        if text is None:
            continue
        new = rewrite_text(text)
        if new != text:
            changed.append(path.relative_to(args.root))
            if not args.check:
                path.write_text(new, encoding="utf-8")
        after = text if args.check else new
        for m in LEFT.finditer(after):
            n = after.count("\n", 0, m.start()) + 1
            line = after.splitlines()[n - 1].strip()
            left.append(f"{path.relative_to(args.root)}:{n}: {line[:100]}")
    if args.check:
        for p in changed:
            print(f"would rewrite {p}")
    else:
        for p in changed:
            print(f"rewrote {p}")
    for line in left:
        print(f"still points outside: {line}", file=sys.stderr)
    return 1 if left or (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
