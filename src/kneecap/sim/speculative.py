"""Speculative decoding in the simulated engine: which method drafts, how many tokens a verify step keeps, and what
the draft costs besides the verify pass.

Owns the method table, the per-sequence acceptance draw and the `--spec-acceptance` forms. Pure and seeded: a
sequence's draws come from its own generator, seeded by the level's seed and its request id, so a run repeats.

How the engines do it (and so the simulator):
- Every decode step verifies the K drafted tokens of each running sequence in one pass over K + 1 positions
  (vLLM v1 `vllm/v1/spec_decode/`, `rejection_sampler.py`; SGLang `eagle_worker.py`; TensorRT-LLM MTP). Draft i is
  kept only while drafts 1..i-1 were, so a step keeps 1 + (the run of accepted drafts) tokens: the bonus token of
  the target model plus the accepted drafts (Leviathan et al. 2023).
- `acceptance`: P(draft i accepted | drafts 1..i-1 accepted), per position, vLLM's per-position acceptance
  (`vllm:spec_decode_num_accepted_tokens_per_pos` / drafts). One rate repeats for every position.
- `accepted_lengths`: instead, a measured distribution of tokens kept per step (1..K+1), drawn from uniformly, e.g.
  an engine's per-request histogram (AIPerf) or SGLang's accept lengths.
- Draft cost: `eagle`, `eagle3` and `mtp` run a one-layer draft head (an EAGLE head is one decoder layer; EAGLE-3
  fuses three target hidden states into it; a DeepSeek/Qwen MTP module is one transformer block sharing the
  embedding and output head: DeepSeek-V3 report sec. 2.2) once per draft token, and keep that layer's KV cache in
  the pool (vLLM allocates the draft layer's KV beside the target's: the pool holds L + 1 layers per token).
  `ngram` (prompt lookup, vLLM `ngram_proposer.py`) drafts on the CPU from the sequence itself: no GPU pass, no KV.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from dataclasses import dataclass

from kneecap.errors import KneecapError

METHODS = ("eagle", "eagle3", "mtp", "ngram")
GPU_DRAFTERS = ("eagle", "eagle3", "mtp")  # a one-layer head on the GPU: its passes and its KV layer are priced
SPEC_HINT = "e.g. --spec-method eagle --spec-tokens 3 --spec-acceptance 0.7 (or 0.8,0.6,0.4 by position, or FILE)"


@dataclass(frozen=True)
class SpecNames:
    """What the user called the three settings, for errors: the CLI's flags, or a load plan's keys."""

    method: str = "--spec-method"
    tokens: str = "--spec-tokens"
    acceptance: str = "--spec-acceptance"
    hint: str = SPEC_HINT


CLI_NAMES = SpecNames()
PLAN_NAMES = SpecNames(
    "spec_method",
    "spec_tokens",
    "spec_acceptance",
    "e.g. spec_method: eagle, spec_tokens: 3, spec_acceptance: 0.7 (or [0.8, 0.6, 0.4] by position, or a file "
    "beside the plan)",
)


def check_spec(
    method: str, tokens: int, acceptance: tuple, accepted_lengths: tuple, names: SpecNames = CLI_NAMES
) -> None:
    """A one-line error naming the setting (as `names` spells it) when method, tokens or acceptance is not one
    speculative decoding can take."""
    if method not in METHODS:
        raise KneecapError(f"unknown {names.method} {method!r}", f"pass one of {', '.join(METHODS)}")
    if not isinstance(tokens, int) or tokens < 1:
        raise KneecapError(f"{names.tokens} must be a whole number >= 1, got {tokens!r}", names.hint)
    if bool(acceptance) == bool(accepted_lengths):
        raise KneecapError("speculative decoding needs its acceptance", names.hint)
    if any(not (0.0 <= a <= 1.0) for a in acceptance):
        raise KneecapError(f"{names.acceptance} rates must be in [0, 1], got {list(acceptance)}", names.hint)
    if len(acceptance) not in (0, 1, tokens):
        raise KneecapError(
            f"{names.acceptance} gives {len(acceptance)} rates for {tokens} draft tokens",
            "give one rate, or one per draft position",
        )
    bad = [n for n in accepted_lengths if not (1 <= n <= tokens + 1)]
    if bad:
        raise KneecapError(
            f"accepted lengths must be 1..{tokens + 1} tokens per step (K + 1), got {bad[:5]}",
            "each line of the file: the tokens one verify step kept, bonus token included",
        )


@dataclass(frozen=True)
class SpecDecoding:
    """One deployment's speculative decoding: method, K draft tokens per step, and its acceptance."""

    method: str
    tokens: int
    acceptance: tuple[float, ...] = ()  # per position (1..K); one value repeats
    accepted_lengths: tuple[int, ...] = ()  # or: tokens kept per step, drawn from uniformly

    def __post_init__(self) -> None:
        check_spec(self.method, self.tokens, self.acceptance, self.accepted_lengths)

    @property
    def rates(self) -> tuple[float, ...]:
        """P(draft i accepted | drafts before it accepted), i = 1..K."""
        return self.acceptance * self.tokens if len(self.acceptance) == 1 else self.acceptance

    @property
    def expected_tokens_per_step(self) -> float:
        """1 + sum over i of the product of the first i rates (or the mean accepted length)."""
        if self.accepted_lengths:
            return sum(self.accepted_lengths) / len(self.accepted_lengths)
        total, keep = 1.0, 1.0
        for a in self.rates:
            keep *= a
            total += keep
        return total

    def with_tokens(self, tokens: int) -> "SpecDecoding":
        """The same method and acceptance with `tokens` draft tokens: one rate repeats, per-position rates keep the
        first `tokens`; accepted lengths measured at K hold only for K."""
        if tokens == self.tokens:
            return self
        if self.accepted_lengths or tokens > self.tokens:
            raise KneecapError(
                f"the acceptance given for {self.tokens} draft tokens says nothing of {tokens}",
                "give one rate (it repeats at every position), or rates for at least that many positions",
            )
        rates = self.acceptance if len(self.acceptance) == 1 else self.acceptance[:tokens]
        return SpecDecoding(self.method, tokens, rates, ())

    @property
    def gpu_drafter(self) -> bool:
        return self.method in GPU_DRAFTERS

    def generator(self, seed: int, request_id: str) -> random.Random:
        """A sequence's own draws, repeatable: seeded by the level's seed and the request id (crc32, not hash():
        Python salts str hashes per process)."""
        return random.Random((seed << 32) ^ zlib.crc32(request_id.encode()))

    def draw(self, rng: random.Random) -> int:
        """Tokens one verify step keeps for one sequence: 1 + the run of accepted drafts."""
        if self.accepted_lengths:
            return self.accepted_lengths[rng.randrange(len(self.accepted_lengths))]
        kept = 1
        for a in self.rates:
            if rng.random() >= a:
                break
            kept += 1
        return kept


def parse_acceptance(
    text: str, tokens: int, read_file=None, names: SpecNames = CLI_NAMES
) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """--spec-acceptance: 'P', 'P1,P2,...' (per position) or a FILE of accepted lengths (one integer a line, or
    whitespace separated) -> (rates, accepted_lengths). `read_file(path) -> str` reads the file (the CLI's)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return tuple(float(p) for p in parts), ()
    except ValueError:
        pass
    if read_file is None or len(parts) != 1:
        raise KneecapError(f"{names.acceptance} {text!r} is neither rates nor a file", names.hint)
    body = read_file(parts[0])
    try:
        lengths = tuple(int(x) for x in body.split())
    except ValueError:
        raise KneecapError(
            f"{names.acceptance} file {parts[0]} must hold whole numbers (tokens kept per step)",
            "one accepted length a line, e.g. 3",
        ) from None
    if not lengths:
        raise KneecapError(f"{names.acceptance} file {parts[0]} is empty", "one accepted length a line, e.g. 3")
    return (), lengths


def spec_decoding(
    method: str | None,
    tokens: int | None,
    acceptance: str | None,
    base_dir: Path | None = None,
    names: SpecNames = CLI_NAMES,
):
    """Speculative decoding as a user names it (a method, K draft tokens, an acceptance: rates or a file of accepted
    lengths, relative to base_dir when given) -> a SpecDecoding; None when none of the three is given, a one-line
    error when only some are. The CLI's --spec-* flags and a load plan's simulator target both come here; errors
    name the settings as `names` spells them (the flags, or PLAN_NAMES: the plan's keys)."""
    if method is None and tokens is None and acceptance is None:
        return None
    missing = [
        f for f, v in ((names.method, method), (names.tokens, tokens), (names.acceptance, acceptance)) if v is None
    ]
    if missing:
        raise KneecapError(f"speculative decoding needs {' and '.join(missing)} too", names.hint)

    def read_file(path: str) -> str:
        where = base_dir / path if base_dir is not None else Path(path)
        try:
            return where.read_text()
        except OSError as exc:
            raise KneecapError(
                f"cannot read the speculative-decoding acceptance file {where}: {exc.strerror or exc}",
                "give rates such as 0.7 (or one per position), or an existing file of accepted lengths",
            ) from None

    rates, lengths = parse_acceptance(acceptance, tokens, read_file=read_file, names=names)
    check_spec(method, tokens, rates, lengths, names)
    return SpecDecoding(method, tokens, rates, lengths)
