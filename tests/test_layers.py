"""One floor per concern: every import of the project's packages points down.

LAYERS is the order, written once (docs/architecture.md shows it and points
here). Every .py of those packages is parsed with ast -- imports inside
functions too, ``from x import y`` (y a module or a name) and ``import
x.y`` -- and the test fails, listing file:line -> module, on an import of
a higher layer, a package cycle or a module cycle inside a package. One
package per layer: two packages on one floor would have no rule between
them. Run with ``-s`` to see the table of who imports whom.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

#: bottom -> top; a package imports only packages before it
LAYERS = (
    "common",          # names every layer shares: paths, wire format, C constants
    "netns_topology",  # the topology graph, namespaces, qdiscs, a testbed's state file
    "datapath",        # the BPF control library: compile, attach, pin, program, models
    "agent",           # the PCM daemon
    "testbed",         # a live testbed's life cycle
    "workload",        # DNN training and background traffic, one run end to end
    "bench",           # micro-benchmarks
    "experiments",     # the paper's experiments: sweeps, the fault matrix
    "talb",            # the CLI
)

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Import:
    path: str      # the importing file, relative to the checkout
    line: int
    source: str    # importing module
    target: str    # imported module (the longest prefix that is a module of ours)


def modules(root: Path, packages) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under ``packages``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(root: Path, packages) -> list[Import]:
    """Every import of one of our modules by one of our modules."""
    mods = modules(root, packages)

    def ours(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    found = []
    for source, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:      # relative: from the importing module's package
                    package = source.split(".") if is_package else source.split(".")[:-1]
                    package = package[:len(package) - (node.level - 1)]
                    base = ".".join(package + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in node.names]
            else:
                continue
            for name in names:
                target = ours(name)
                if target and target != source:
                    found.append(Import(path.relative_to(root).as_posix(), node.lineno,
                                        source, target))
    return sorted(set(found), key=lambda i: (i.path, i.line, i.target))


def package(module: str) -> str:
    return module.split(".")[0]


def upward(found: list[Import], layers) -> list[str]:
    """``file:line -> module`` for each import of a layer above the importer's."""
    rank = {p: i for i, p in enumerate(layers)}
    return [f"{i.path}:{i.line} -> {i.target} ({package(i.source)} is below {package(i.target)})"
            for i in found if rank[package(i.target)] > rank[package(i.source)]]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def package_cycles(found: list[Import]) -> list[list[str]]:
    edges: dict[str, set[str]] = {}
    for i in found:
        if package(i.source) != package(i.target):
            edges.setdefault(package(i.source), set()).add(package(i.target))
    return cycles(edges)


def module_cycles(found: list[Import]) -> list[list[str]]:
    """Cycles among the modules of one package (imports inside it only)."""
    edges: dict[str, set[str]] = {}
    for i in found:
        if package(i.source) == package(i.target):
            edges.setdefault(i.source, set()).add(i.target)
    return cycles(edges)


def layer_table(found: list[Import], root: Path, layers) -> str:
    mods = modules(root, layers)
    rows = [f"{'layer':<5} {'package':<15} {'modules':>7}  imports"]
    for n, p in enumerate(layers):
        below = sorted({package(i.target) for i in found
                        if package(i.source) == p and package(i.target) != p},
                       key=layers.index)
        count = sum(package(m) == p for m in mods)
        rows.append(f"{n:<5} {p:<15} {count:>7}  {', '.join(below) or '-'}")
    return "\n".join(rows)


def problems(root: Path, layers) -> list[str]:
    found = imports(root, layers)
    return ([f"upward: {u}" for u in upward(found, layers)]
            + [f"package cycle: {' <-> '.join(c)}" for c in package_cycles(found)]
            + [f"module cycle: {' <-> '.join(c)}" for c in module_cycles(found)])


# --- the checkout ------------------------------------------------------------------------
def test_every_import_points_down_and_nothing_cycles():
    found = imports(REPO, LAYERS)
    table = layer_table(found, REPO, LAYERS)
    print("\n" + table)
    bad = problems(REPO, LAYERS)
    assert not bad, "\n".join(bad) + "\n\n" + table


def test_every_package_of_the_checkout_has_a_layer():
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert packages == set(LAYERS), \
        f"packages without a layer: {sorted(packages - set(LAYERS))}; " \
        f"layers without a package: {sorted(set(LAYERS) - packages)}"


# --- the check itself can fail -----------------------------------------------------------
def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_an_upward_import_inside_a_function_is_caught(tmp_path):
    root = _tree(tmp_path, {
        "low/__init__.py": "",
        "low/base.py": "def f():\n    from high.app import g\n    return g\n",
        "high/__init__.py": "",
        "high/app.py": "import low.base\n\ndef g():\n    return low.base\n",
    })
    assert problems(root, ("low", "high")) == [
        "upward: low/base.py:2 -> high.app (low is below high)",
        "package cycle: high <-> low",
    ]
    assert problems(root, ("high", "low")) == [
        "upward: high/app.py:1 -> low.base (high is below low)",
        "package cycle: high <-> low",
    ]


def test_a_module_cycle_inside_a_package_is_caught_relative_imports_too(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/plan.py": "from . import report\n",
        "pkg/report.py": "def r():\n    from pkg.plan import x\n",
        "pkg/leaf.py": "from pkg import plan\n",
    })
    assert problems(root, ("pkg",)) == ["module cycle: pkg.plan <-> pkg.report"]
