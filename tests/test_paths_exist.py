"""Every path the project names exists in the project (issue 39 item 3).

A reader follows a path from the README, a page of docs/, a command's
`--help` or a comment in the code; each must lead somewhere. Named paths are
the ones under the repository's top-level directories (``docs/design.md``,
``tests/test_wire.py``, ``topologies/talb.yaml``, ``talb/ctx.h`` for a BPF
include), top-level files, and the relative links of the markdown pages.
Patterns and placeholders (``cli*.py``, ``runs/<time>-...``) are not paths;
outputs a command writes are listed in OUTPUTS with the command. And nothing
points outside the repository: no tracked text file names the old design
document or its sibling folders beside the checkout. No root, no runs.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parents[1]

TOP_DIRS = ("bpf", "common", "netns_topology", "datapath", "agent", "testbed", "workload",
            "bench", "experiments", "talb", "grafana", "tests", "topologies", "docs", "scripts",
            "results", ".ci")
#: a path under a top-level directory, as far as path characters go
PATH = re.compile(r"(?<![\w./~$-])((?:%s)/[\w.+/-]*)" % "|".join(re.escape(d) for d in TOP_DIRS))
#: what follows a pattern or a placeholder, not a path ("cli*.py", "runs/<time>")
PATTERN_NEXT = set("*<{$[")
#: top-level names prose also uses as words ("talb/fifo": scheme and queueing,
#: "testbed/target": a ratio): a path there has a suffix or ends in "/"
WORDS = ("talb/", "testbed/")
TOP_FILES = re.compile(r"(?<![\w./-])(README\.md|CHANGELOG\.md|Makefile|pyproject\.toml)\b")
#: a markdown link's target: [text](target)
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: where a command writes: named in the docs as its output, made when it runs
OUTPUTS = {
    "results/mine",              # docs/training.md: talb bench ... --out results/mine
    "results/lb-classic-fail",   # docs/experiments.md: its preset's --out, not run yet
    "common/bpf",                # the package's copy of bpf/, made by the build (pyproject.toml)
}
#: directories searched besides the repository's root: a BPF include
#: ("talb/ctx.h"), then the naming file's own directory
INCLUDE_DIRS = (REPO / "bpf" / "include",)

CODE_SUFFIXES = {".py", ".c", ".h", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".ini"}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                         check=True).stdout.decode()
    return [REPO / n for n in filter(None, out.split("\0"))]


def _markdown() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def _code() -> list[Path]:
    return [p for p in _tracked()
            if (p.suffix in CODE_SUFFIXES or p.name == "Makefile")
            and not str(p.relative_to(REPO)).startswith("results/") and p.is_file()]


def _comments(path: Path, text: str) -> str:
    """The comments and docstrings of a code file (its prose), one block a
    line as in the file; a file with no comment syntax we know: all of it."""
    if path.suffix in (".c", ".h"):
        return "\n".join(re.findall(r"/\*.*?\*/|//[^\n]*", text, re.S))
    if path.suffix == ".py":
        return "\n".join(re.findall(r'"""(?:.|\n)*?"""|\'\'\'(?:.|\n)*?\'\'\'|#[^\n]*', text))
    return "\n".join(line for line in text.splitlines() if "#" in line)


def _generated() -> set[str]:
    """Includes the loader writes as it compiles, named by what they are
    included as (datapath/source.py ``GENERATED``, where it has any)."""
    from datapath import source

    return set(getattr(source, "GENERATED", {}))


def _exists(name: str, base: Path) -> bool:
    name = name.split("#")[0].rstrip("/")
    if not name or name in OUTPUTS or name in _generated():
        return True
    if any((root / name).exists() for root in (REPO, *INCLUDE_DIRS, base)):
        return True
    # a module's attribute, "workload/mpi_run.run_on_fabric": the module has it
    head, _, last = name.rpartition("/")
    module, dot, attr = last.partition(".")
    source = REPO / head / f"{module}.py"
    return bool(dot) and source.is_file() and re.search(rf"\b{re.escape(attr)}\b",
                                                         source.read_text()) is not None


def named_paths(text: str) -> set[str]:
    found = set(TOP_FILES.findall(text))
    for m in PATH.finditer(text):
        name = m.group(1)
        following = text[m.end():m.end() + 1]
        if following in PATTERN_NEXT or name.endswith("-"):
            continue                                    # a pattern or placeholder
        name = name.rstrip(".")
        if any(part.isupper() for part in name.split("/")):
            continue                                    # a placeholder: results/SWEEP/...
        if name.startswith(WORDS) and not (name.endswith("/") or "." in name.rsplit("/", 1)[1]):
            continue
        found.add(name)
    return found


def _missing(text: str, base: Path) -> list[str]:
    return sorted(p for p in named_paths(text) if not _exists(p, base))


def _links(text: str, base: Path) -> list[str]:
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue                                    # a URL, an anchor on the page
        if not (base / target.split("#")[0]).exists():
            bad.append(target)
    return bad


@pytest.mark.parametrize("doc", _markdown(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_page_names_exists(doc):
    text = doc.read_text()
    assert _missing(text, doc.parent) == [], f"{doc.relative_to(REPO)} names paths that do not exist"
    assert _links(text, doc.parent) == [], f"{doc.relative_to(REPO)} links to nothing"


def test_every_path_a_code_comment_names_exists():
    bad = {}
    for path in _code():
        missing = _missing(_comments(path, path.read_text(errors="replace")), path.parent)
        if missing:
            bad[str(path.relative_to(REPO))] = missing
    assert bad == {}


def _commands(group: click.Command, name: str = "talb"):
    yield name, group
    if isinstance(group, click.Group):
        for sub_name, sub in sorted(group.commands.items()):
            yield from _commands(sub, f"{name} {sub_name}")


def test_every_path_a_help_text_names_exists():
    from talb.cli import main

    seen, bad = 0, {}
    for name, cmd in _commands(main):
        with click.Context(cmd, info_name=name) as ctx:
            text = cmd.get_help(ctx)
        seen += 1
        missing = _missing(text, REPO)
        if missing:
            bad[name] = missing
    assert seen > 20, f"only {seen} commands found: is talb.cli.main the whole command?"
    assert bad == {}


def test_the_checker_finds_a_missing_path():
    """The finder is not vacuous: it sees the paths a sentence names and
    refuses one that is not there, resolving includes and page links."""
    text = ("see docs/design.md §3, talb/ctx.h, `tests/test_wire.py::test_x`, "
            "workload/mpi_run.run_on_fabric, workload/mpi_run.no_such_thing and "
            "docs/no-such-page.md; not paths: talb/cli*.py, results/bench-<preset>, "
            "results/SWEEP/summary.md, talb/fifo")
    assert named_paths(text) == {"docs/design.md", "talb/ctx.h", "tests/test_wire.py",
                                 "workload/mpi_run.run_on_fabric",
                                 "workload/mpi_run.no_such_thing", "docs/no-such-page.md"}
    assert _missing(text, REPO) == ["docs/no-such-page.md", "workload/mpi_run.no_such_thing"]
    assert _links("[a](design.md) [b](nowhere.md#x) [c](https://x.org)", REPO / "docs") == [
        "nowhere.md#x"]


#: a reference to what lay beside the checkout before the design moved into
#: docs/design.md (spelt in parts so that this file does not match itself)
OUTSIDE = re.compile(r"\.\./" + "shared/" + r"|/work/" + "shared" + r"|\bDESIGN\s*(?:§|section\s+\d)")


def test_nothing_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    left = []
    for name in tracked:
        # committed results are records of their time, but for the index of them
        if name.startswith("results/") and name != "results/README.md":
            continue
        try:
            text = (REPO / name).read_text()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        left += [f"{name}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1)
                 if OUTSIDE.search(line)]
    assert not left, "\n".join(left)


def test_the_attach_example_is_the_mininet_fabric_docs_attach_shows():
    """talb attach --help names topologies/attach/mininet.yaml (a directory
    of its own: topologies/*.yaml are topologies): it reads as an attach
    file and is the one docs/attach.md's "Mininet" shows."""
    import yaml

    from netns_topology.attach_spec import read_fabric_file

    example = REPO / "topologies" / "attach" / "mininet.yaml"
    fabric = read_fabric_file(example)
    assert [s.name for s in fabric.switches] == ["s1", "s2", "l1", "l2"]
    page = (REPO / "docs" / "attach.md").read_text()
    block = re.search(r"^## Mininet\n.*?```yaml\n(.*?)```", page, re.S | re.M).group(1)
    assert yaml.safe_load(block) == yaml.safe_load(example.read_text())
