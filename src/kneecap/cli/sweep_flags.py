"""The workload and load options `kneecap bench` and `kneecap simulate` share, declared once: the same names,
types and help in both commands, parsed by the same functions (kneecap.workload.lengthspec for lengths), so
the same value gives the same checks and the same one-line errors in both.

A command takes each as the default of its parameter (`isl: Optional[str] = ISL`); a default the two commands
resolve differently (bench asks the server, the simulator has its own) is None here and said in show_default.
"""

from __future__ import annotations

import typer

from kneecap.errors import KneecapError

LENGTH_FORMS = (
    "N, or a length distribution such as uniform:100:2000, normal:mean=1000,std=200, "
    "lognormal:mean=1000,std=300,max=4096, empirical:120,340,800"
)

ISL = typer.Option(
    None,
    "--isl",
    "--random-input-len",
    help=f"[bench: required with the random dataset] input tokens per request: {LENGTH_FORMS}",
    show_default="simulate: 1000",
)
OSL = typer.Option(
    None,
    "--osl",
    "--random-output-len",
    "--sharegpt-output-len",
    help="[bench: required, except with a dataset or --replay, whose data size the outputs] output "
    "tokens per request: N or a length distribution (as --isl); with a dataset it replaces the "
    "data's output lengths",
    show_default="simulate: 1000",
)
CONCURRENCY = typer.Option(
    None,
    "--concurrency",
    "--max-concurrency",
    help="closed-loop levels, e.g. 1,8,64 (simulate also: max, every request at once); "
    "with --find-max the lowest and highest load to search",
)
RATE = typer.Option(
    None,
    "--rate",
    "--request-rate",
    help="open-loop levels in requests/s, e.g. 1,2,4; with --find-max the lowest and highest rate to search",
)
SLO = typer.Option(None, "--slo", help="e.g. ttft_p99_ms=500,itl_p99_ms=50,error_rate=0.01")
GOODPUT = typer.Option(
    None,
    "--goodput",
    help="vLLM's per-request goodput objectives, KEY:VALUE in ms with KEY ttft, tpot or e2el (e.g. "
    "--goodput 'ttft:200 tpot:50'): a request is good when each of its own latencies is "
    "within its value; added to --slo as ttft_max_ms=200,tpot_max_ms=50",
)
FIND_MAX = typer.Option(
    None,
    "--find-max",
    help="concurrency or rate: search for the highest load meeting every --slo at steady state "
    "(doubling, then bisection); the answer, its bracket and the binding SLO term are "
    "summary.json's max_load",
)
UNTIL_STABLE = typer.Option(
    None,
    "--until-stable",
    help="with --concurrency and --duration S: end a level as soon as its p99 TTFT and ITL "
    "each "
    "moved less than this fraction (e.g. 0.05) over the last 3 windows of "
    "--stable-window-s and the level is stable by the steady-state rule every level is "
    "judged by (docs/metrics.md); S is then the longest a level runs; the verdict is the "
    "level's stable_p99 in summary.json",
)
SHARED_PREFIX = typer.Option(None, "--shared-prefix", help="TOKENS or TOKENSxGROUPS of prompt shared by requests")
PREFIX_HIT_RATE = typer.Option(
    None,
    "--prefix-hit-rate",
    help="synthetic prompts whose first F of their --isl tokens every request shares (one "
    "prefix), primed by one warmup request before each level, so a prefix cache "
    "finds about F of each prompt cached (0 < F < 1)",
)


def prefix_flags(
    shared_prefix: str | None, hit_rate: float | None, isl: int | None, isl_dist: str | None, warmup: int | None
) -> tuple[int, int, int | None]:
    """(shared prefix tokens, prefix groups, warmup requests) from --shared-prefix or --prefix-hit-rate F: F x --isl
    tokens in one group, and at least one warmup request, which puts the prefix in the cache before the level."""
    from kneecap.sweep.options import parse_shared_prefix

    if hit_rate is None:
        tokens, groups = parse_shared_prefix(shared_prefix)
        return tokens, groups, warmup
    if shared_prefix is not None:
        raise KneecapError(
            "--prefix-hit-rate and --shared-prefix both given",
            "pass one: --prefix-hit-rate F shares the first F of every prompt",
        )
    if not (0 < hit_rate < 1):
        raise KneecapError(
            f"--prefix-hit-rate must be between 0 and 1, got {hit_rate}", "pass e.g. --prefix-hit-rate 0.5"
        )
    if isl is None or isl_dist is not None:
        raise KneecapError(
            "--prefix-hit-rate needs a fixed --isl (the share is of each prompt's tokens)",
            "pass e.g. --isl 2000 --prefix-hit-rate 0.5, or --shared-prefix TOKENS",
        )
    tokens = int(round(hit_rate * isl))
    if tokens < 1:
        raise KneecapError(
            f"--prefix-hit-rate {hit_rate} of {isl} tokens shares no token", "pass a larger rate or --isl"
        )
    return tokens, 1, max(1, warmup or 0)


def length_flag(flag: str, spec: str | None, default: int | None = None) -> tuple[int | None, str | None]:
    """--isl / --osl as both commands read it: (tokens, None) for N, (the mean rounded, the spec) for a length
    distribution; `default` tokens when the flag is absent."""
    from kneecap.workload.lengthspec import parse_length_flag

    n, dist = parse_length_flag(flag, spec)
    return (default, None) if n is None and spec is None else (n, dist)
