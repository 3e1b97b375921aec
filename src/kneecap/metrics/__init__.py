"""Metrics: pure functions of RequestRecords (statistics, level summaries, SLOs, knee, stop rules).

Nothing here reads files, sockets or clocks; results.py owns the results folder on disk.
Definitions of every metric, with formulas and units: docs/metrics.md.
"""
