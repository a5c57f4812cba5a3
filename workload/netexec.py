"""Run programs inside a node's network namespace.

`ip netns exec` is the one tool every user also has at hand, so commands the
testbed runs are the commands a user can paste (``talb testbed status``
prints them).
"""
from __future__ import annotations

import shlex
import subprocess
from typing import Sequence


def ns_argv(netns: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` run in ``netns``; None: in this process's namespace (a
    switch of an attached fabric on the local machine, testbed/attach.py)."""
    return list(argv) if netns is None else ["ip", "netns", "exec", netns, *argv]


def ns_run(netns: str, argv: Sequence[str], *, timeout: float = 30.0,
           check: bool = False) -> subprocess.CompletedProcess:
    """Run argv in netns and wait; output captured as text."""
    proc = subprocess.run(ns_argv(netns, argv), capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"`{shlex.join(ns_argv(netns, argv))}` exited {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc


def ns_popen(netns: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("text", True)
    return subprocess.Popen(ns_argv(netns, argv), **kwargs)


def stop(proc: subprocess.Popen, *, grace: float = 5.0) -> None:
    """End a process we started, by its pid, and reap it: SIGTERM (lets
    tcpdump flush its file), SIGKILL after ``grace`` seconds; its pipes are
    drained and closed. Idempotent; a process that already exited is only
    reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """``proc.communicate(timeout=...)``, and on timeout (or any error) the
    process is ended and reaped before the exception goes on: nothing keeps
    running behind the caller."""
    try:
        return proc.communicate(timeout=timeout)
    except BaseException:
        stop(proc)
        raise


def ping(netns: str, dst_ip: str, *, count: int = 1, timeout_s: float = 2.0,
         interval_s: float = 0.2) -> bool:
    """True when every echo gets its reply."""
    proc = ns_run(netns, ["ping", "-n", "-q", "-c", str(count), "-i", str(interval_s),
                          "-W", str(timeout_s), dst_ip],
                  timeout=count * (interval_s + timeout_s) + 5)
    return proc.returncode == 0


def ping_all_pairs(pairs: Sequence[tuple[str, str, str]], *, count: int = 1,
                   timeout_s: float = 2.0) -> dict[tuple[str, str], bool]:
    """Ping every (label, netns, dst_ip) triple at once; {(netns, dst_ip): ok}."""
    procs = {}
    results = {}
    try:
        for _label, netns, dst in pairs:
            procs[(netns, dst)] = ns_popen(
                netns, ["ping", "-n", "-q", "-c", str(count), "-i", "0.2",
                        "-W", str(timeout_s), dst])
        for key, proc in procs.items():
            try:
                finish(proc, count * (0.2 + timeout_s) + 10)
            except subprocess.TimeoutExpired:
                pass  # ended by finish(): counts as a failed ping
            results[key] = proc.returncode == 0
    finally:
        for proc in procs.values():
            stop(proc)
    return results
