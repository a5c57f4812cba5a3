"""scripts/rewrite_design_refs.py: references to the design, papers and CDFs
outside the repository become references inside it, once (issue 39 item 2).

Run as a user runs it, on a throwaway git checkout: what it rewrites, that a
second run changes nothing, that results/ is left alone and that --check
names what is left. The old spellings are assembled here (D, SHARED) so that
the script, run on this repository, leaves this file as it is.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "rewrite_design_refs.py"
D = "DES" + "IGN"
SHARED = "../" + "shared/"

CASES = [
    (f"(see {D} §3)", "(see docs/design.md §3)"),
    (f"/* {D} section 4: the option */", "/* docs/design.md §4: the option */"),
    (f"the tagging core ({D}\n * section 4, host side)", "the tagging core (docs/design.md\n * §4, host side)"),
    (f"`{SHARED}{D}.md` §8", "`docs/design.md` §8"),
    (f"({SHARED}papers/talb-iwqos2024.txt)", "(docs/references.md)"),
    (f"# The means {SHARED}workloads/README.md documents", "# The means workload/cdfs/README.md documents"),
    (f"'max': each group's largest PCM ({D} §5's reading; see", "'max': each group's largest PCM (the paper's literal reading; see"),
    ("docs/design.md §6 stays", "docs/design.md §6 stays"),
]


def _checkout(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("old,new", CASES)
def test_a_reference_is_rewritten_once(tmp_path, old, new):
    root = _checkout(tmp_path, {"agent/x.py": f'"""{old}"""\n'})
    first = _run(root)
    assert first.returncode == 0, first.stderr
    assert (root / "agent/x.py").read_text() == f'"""{new}"""\n'
    assert ("rewrote agent/x.py" in first.stdout) == (old != new)
    second = _run(root)
    assert second.returncode == 0 and second.stdout == "", second.stdout
    assert (root / "agent/x.py").read_text() == f'"""{new}"""\n'


def test_check_names_what_is_left_and_results_are_not_touched(tmp_path):
    old = f"as {D} §3 says\n"
    root = _checkout(tmp_path, {"docs/a.md": old, "results/fig10/summary.md": old,
                                "results/README.md": old})
    check = _run(root, "--check")
    assert check.returncode == 1
    assert "would rewrite docs/a.md" in check.stdout
    assert "would rewrite results/README.md" in check.stdout
    assert "results/fig10" not in check.stdout + check.stderr
    assert (root / "docs/a.md").read_text() == old           # --check changes nothing
    assert _run(root).returncode == 0
    assert (root / "docs/a.md").read_text() == "as docs/design.md §3 says\n"
    assert (root / "results/README.md").read_text() == "as docs/design.md §3 says\n"
    assert (root / "results/fig10/summary.md").read_text() == old
    assert _run(root, "--check").returncode == 0


def test_a_pointer_no_rule_knows_is_named_not_guessed(tmp_path):
    root = _checkout(tmp_path, {"docs/a.md": f"see {SHARED}notes/x.md\n"})
    r = _run(root)
    assert r.returncode == 1
    assert "still points outside: docs/a.md:1:" in r.stderr
    assert (root / "docs/a.md").read_text() == f"see {SHARED}notes/x.md\n"
