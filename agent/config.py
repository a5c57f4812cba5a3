"""The agent's configuration, checked before anything is touched.

Every error names the command-line option it comes from, so that
``talb agent --window 0`` says what is wrong with which flag.
"""
from __future__ import annotations

import ipaddress
import logging
import math
from dataclasses import asdict, dataclass

from common.excerpt import shown
from datapath.statsread import STRATEGIES

PCM_DELAY_MODES = ("model", "measured")
LOG_LEVELS = ("debug", "info", "warning", "error")

#: Default window. At 100 Mbit/s a 150 KB queue drains in 12 ms (docs/design.md §6),
#: so the window must be a few ms to see it build. Measured on the
#: project's 2-core machines (bench/agent_loop.py, docs/agent.md): 64 ports
#: cost ~0.05 ms a window when idle and ~0.6 ms when every group's PCMs
#: change; at 5 ms the loop takes 3% (idle) to 15% (loaded) of one core for
#: 64 ports, leaving the CPU to the data path, and a window still holds ~40
#: full frames per port at 100 Mbit/s (a shorter one mostly measures packet
#: noise).
DEFAULT_WINDOW_S = 0.005
DEFAULT_METRICS_PORT = 9477
#: With no --metrics-port, the agent serves on the first free port of
#: DEFAULT_METRICS_PORT .. DEFAULT_METRICS_PORT + METRICS_PORT_TRIES - 1 (a
#: second testbed's agent needs no flag of its own); an explicit port that
#: is taken is an error.
METRICS_PORT_TRIES = 20


class ConfigError(ValueError):
    """Bad configuration; the message names the option."""


@dataclass(frozen=True)
class AgentConfig:
    window_s: float = DEFAULT_WINDOW_S       # --window-ms
    w1: float = 1.0                          # --w1: weight of utilisation in Eq. 5
    w2: float = 1.0                          # --w2: weight of queueing delay in Eq. 5
    # --threshold: S of CASE 1. None: 1.0, the largest PCM Eq. 5 yields
    # (docs/talb-decisions.md: the group's max, the paper's literal reading, would
    # send rank 1 back on a two-uplink leaf every time); "max": that reading.
    threshold: float | str | None = None
    pcm_delay: str = "model"                 # --pcm-delay: model (M/D/1) | measured (qdisc)
    metrics_addr: str = "127.0.0.1"          # --metrics-addr
    # --metrics-port; None: DEFAULT_METRICS_PORT or the next free one (metrics_ports())
    metrics_port: int | None = None
    log_level: str = "info"                  # --log-level
    read_strategy: str = "auto"              # --read-strategy: port_stats reads
    stats_interval_s: float = 0.1            # --stats-interval-ms: counters, qdiscs (model mode)

    def __post_init__(self):
        def number(name, option, lo, hi, scale=1.0):
            # scale: the option's unit (1e3 for the *-ms options) in messages
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                raise ConfigError(f"{option}: must be a number, got {shown(v)}")
            if not lo <= v <= hi:
                raise ConfigError(f"{option}: must be in [{lo * scale:g}, {hi * scale:g}], "
                                  f"got {v * scale:g}")

        number("window_s", "--window-ms", 0.0005, 10.0, 1e3)
        number("w1", "--w1", 0.0, 1e6)
        number("w2", "--w2", 0.0, 1e6)
        if self.w1 + self.w2 <= 0:
            raise ConfigError(f"--w1/--w2: at least one weight must be > 0, "
                              f"got {self.w1} and {self.w2}")
        if self.threshold is not None and self.threshold != "max":
            number("threshold", "--threshold", 0.0, 1.0)
        if self.pcm_delay not in PCM_DELAY_MODES:
            raise ConfigError(f"--pcm-delay: one of {', '.join(PCM_DELAY_MODES)}, "
                              f"got {shown(self.pcm_delay)}")
        try:
            ipaddress.ip_address(self.metrics_addr)
        except ValueError:
            raise ConfigError(f"--metrics-addr: not an IP address: {self.metrics_addr!r}") from None
        if self.metrics_port is not None and (
                isinstance(self.metrics_port, bool) or not isinstance(self.metrics_port, int)
                or not 1 <= self.metrics_port <= 65535):
            raise ConfigError(f"--metrics-port: 1..65535, got {shown(self.metrics_port)}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"--log-level: one of {', '.join(LOG_LEVELS)}, got {shown(self.log_level)}")
        if self.read_strategy not in STRATEGIES:
            raise ConfigError(f"--read-strategy: one of {', '.join(STRATEGIES)}, "
                              f"got {shown(self.read_strategy)}")
        number("stats_interval_s", "--stats-interval-ms", self.window_s, 60.0, 1e3)

    def metrics_ports(self) -> range:
        """The ports to try for /metrics, in order: the one given, or the
        default and the next ones (METRICS_PORT_TRIES in all)."""
        if self.metrics_port is not None:
            return range(self.metrics_port, self.metrics_port + 1)
        return range(DEFAULT_METRICS_PORT, DEFAULT_METRICS_PORT + METRICS_PORT_TRIES)

    @property
    def logging_level(self) -> int:
        return getattr(logging, self.log_level.upper())

    def to_dict(self) -> dict:
        return asdict(self)
