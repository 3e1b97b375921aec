"""vLLM's `--goodput` objectives as kneecap SLO terms, for bench and simulate alike.

Owns the KEY:VALUE grammar of `vllm bench serve --goodput` (KEY ttft, tpot or e2el; VALUE in ms) and its
mapping onto kneecap's per-request `*_max_ms` SLO terms (kneecap.metrics.slo); nothing else.
"""

from __future__ import annotations

from typing import Sequence

from kneecap.errors import KneecapError

GOODPUT_KEYS = {"ttft": "ttft", "tpot": "tpot", "e2el": "e2e"}  # vLLM bench serve --goodput names -> kneecap's


def parse_goodput(pairs: Sequence[str]) -> str:
    """vLLM's `--goodput ttft:200 tpot:50 e2el:1000` (ms; a request is good when each of its own latencies
    is within its value, vllm/benchmarks/serve.py) as kneecap --slo terms: ttft_max_ms=200,tpot_max_ms=50,
    e2e_max_ms=1000. kneecap counts goodput with the same per-request rule, and a level meets these terms when
    every request of it did."""
    terms = []
    for part in (p for item in pairs for p in str(item).replace(",", " ").split()):
        key, sep, value = part.partition(":")
        if not sep or key.strip().lower() not in GOODPUT_KEYS:
            raise KneecapError(
                f"--goodput term {part!r} is not KEY:VALUE with KEY ttft, tpot or e2el",
                "pass e.g. --goodput 'ttft:200 tpot:50' (milliseconds)",
            )
        terms.append(f"{GOODPUT_KEYS[key.strip().lower()]}_max_ms={value.strip()}")
    return ",".join(terms)
