"""The host line the CPU-bound bench scripts print beside their figures (a per-request cost is the host's):
CPU model, logical CPUs and load average. Standard library only, so a script run from a scratch venv can import it."""

from __future__ import annotations

import os
import platform


def host() -> str:
    """The host's CPU model, cores and load average."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} logical CPUs, load average {load} (1/5/15 min)"
