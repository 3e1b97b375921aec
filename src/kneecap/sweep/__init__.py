"""`kneecap bench` orchestration: the sweep's level loop, worker fan-out, resume, progress and table.

The HTTP driver (kneecap.client), the statistics (kneecap.metrics) and the results folder
(kneecap.results) live elsewhere; this package only sequences them. Import nothing heavy here.
"""
