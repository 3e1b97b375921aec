"""The speculative-decoding flags of the commands that run the simulated engine (simulate, serve), declared once:
--spec-method, --spec-tokens, --spec-acceptance -> a kneecap.sim.speculative.SpecDecoding (or None: off)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer


SpecMethodOpt = Annotated[
    Optional[str],
    typer.Option(
        "--spec-method",
        help="speculative decoding: eagle, eagle3, mtp (a one-layer draft head on the GPU) or ngram "
        "(prompt lookup on the CPU); needs --spec-tokens and --spec-acceptance",
    ),
]
SpecTokensOpt = Annotated[Optional[int], typer.Option("--spec-tokens", help="draft tokens per step (K)")]
SpecAcceptanceOpt = Annotated[
    Optional[str],
    typer.Option(
        "--spec-acceptance",
        help="P(draft accepted | the ones before it were): one rate, one per position "
        "(0.8,0.6,0.4), or a FILE of accepted lengths per step (1..K+1, bonus token included)",
    ),
]


def speculative(method: str | None, tokens: int | None, acceptance: str | None):
    """The flags as a SpecDecoding, None when none is given; a partial set is a one-line error."""
    from kneecap.sim.speculative import spec_decoding

    return spec_decoding(method, tokens, acceptance)
