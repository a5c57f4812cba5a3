"""The `talb` command, the top layer: cli.py and cli_*.py, and what only the
command runs: demo.py (`talb testbed demo`), send.py (`talb send`),
monitoring.py (`talb monitoring`), report.py (`talb report`) and
unwind.py (SIGTERM unwinds the long-running commands)."""
