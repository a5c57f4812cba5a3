"""No command is built as a shell string from user input: Python runs argv
lists, and the Makefile passes its variables as one quoted word each."""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHELL_CALLS = re.compile(r"shell\s*=\s*True|os\.system\(|os\.popen\(|getoutput\(|getstatusoutput\(")


def test_python_never_hands_a_string_to_a_shell():
    offenders = []
    for pkg in ("agent", "talb", "workload", "netns_topology", "bench", "tests"):
        for path in (REPO / pkg).rglob("*.py"):
            if path.name == "test_no_shell.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if SHELL_CALLS.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("target, option, var", [
    ("testbed-down", "--prefix", "PREFIX"), ("status", "--prefix", "PREFIX"),
    ("testbed", "--topology", "TOPOLOGY"), ("monitoring", "--prometheus-port", "PROMETHEUS_PORT"),
])
def test_make_variables_stay_one_argument(target, option, var):
    hostile = "a;touch /tmp/talb-pwned 'q' \"d\" `id` $$HOME"
    out = subprocess.run(["make", "-n", "-C", str(REPO), target, f"{var}={hostile}"],
                         capture_output=True, text=True, check=True).stdout
    (line,) = [line for line in out.splitlines() if option in line]
    argv = shlex.split(line)
    # make turns $$ into $; the shell would then get it as a literal character
    assert argv[argv.index(option) + 1] == hostile.replace("$$", "$")
