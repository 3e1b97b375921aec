"""SweepSpec: the sweep fields `kneecap bench` and `kneecap simulate` share, with one check of them.

Owns the shared fields' meaning (lengths, request budget, warmup, seed, arrival burstiness, shared prefix,
conversations, --until-stable windows) and their checks: one rule and one one-line error per flag, whichever
command reads it. BenchOptions (kneecap.sweep.options) and SimulateOptions (kneecap.sim.level_driver) are
SweepSpecs with the fields only their driver needs; each runs check() before its own checks. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kneecap.errors import KneecapError
from kneecap.workload import LengthDist, Workload
from kneecap.workload.level_work import WorkloadFlags, lengths

# The largest --seed: level i draws with seed + i and a worker with seed x 1000 + k, all held in summary.json as
# 64-bit integers; 2**32 - 1 is the range NumPy's legacy seeding takes, far inside it.
SEED_MAX = 2**32 - 1


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """The shared part of a sweep. Lengths in tokens, times in seconds, rates in requests/s."""

    isl: int | None = None  # input tokens (the mean of isl_dist when one is given)
    osl: int | None = None  # output tokens (the mean of osl_dist when one is given)
    isl_dist: str | None = None  # --isl as a length spec (kneecap.workload.lengthspec)
    osl_dist: str | None = None  # --osl as a length spec
    requests: int | None = None  # measured requests per level
    duration_s: float | None = None  # seconds per level during which requests are sent
    warmup: int = 0  # requests per level, recorded with warmup=true, excluded from statistics
    seed: int = 0  # lengths at sweep-unique request indices, level i's arrivals with seed + i
    burstiness: float = 1.0  # gamma shape of inter-arrival gaps (1: Poisson)
    shared_prefix_tokens: int = 0
    num_prefix_groups: int = 1
    turns: int = 0  # --turns K: C users each hold K-turn conversations (requests count turns)
    think_time_s: float = 0.0  # --think-time-s: the pause between an answer and the user's next turn
    until_stable: float | None = None  # --until-stable TOL: a --duration level ends once its p99 TTFT and ITL settled
    stable_window_s: float = 10.0  # --stable-window-s: the windows p99_stable compares

    def check(self) -> None:
        """The shared fields' rules, each refusal one line naming the flag and the fix."""
        for flag, value in (("--isl", self.isl), ("--osl", self.osl)):
            if value is not None and value < 1:
                raise KneecapError(f"{flag} must be a whole number >= 1, got {value!r}", f"pass e.g. {flag} 1000")
        self.input_lengths, self.output_lengths  # a length spec that does not parse is its one-line error
        if self.requests is not None and self.duration_s is not None:
            raise KneecapError("pass at most one of --requests and --duration", "drop one of them")
        if self.requests is not None and self.requests < 1:
            raise KneecapError(f"--requests must be >= 1, got {self.requests}", "pass e.g. --requests 200 (per level)")
        for flag, value in (("--duration", self.duration_s), ("--burstiness", self.burstiness)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise KneecapError(f"{flag} must be a finite number > 0, got {value!r}", f"pass a positive {flag}")
        for flag, value in (("--warmup", self.warmup), ("--seed", self.seed)):
            if value < 0:
                raise KneecapError(f"{flag} must be >= 0, got {value}", f"pass e.g. {flag} 0")
        if self.seed > SEED_MAX:  # summary.json holds it (and seeds derived from it) as a 64-bit integer
            raise KneecapError(f"--seed must be at most {SEED_MAX}, got {self.seed}", "pass e.g. --seed 0")
        if self.turns < 0:
            raise KneecapError(f"--turns must be >= 1, got {self.turns}", "pass e.g. --turns 3")
        if self.think_time_s < 0 or not math.isfinite(self.think_time_s):
            raise KneecapError(
                f"--think-time-s must be a finite number >= 0, got {self.think_time_s}", "pass e.g. --think-time-s 2"
            )
        if self.think_time_s and not self.turns:
            raise KneecapError("--think-time-s is the pause between turns of a conversation", "pass --turns K with it")

    @property
    def input_lengths(self) -> LengthDist:
        return lengths(self.isl_dist, self.isl)

    @property
    def output_lengths(self) -> LengthDist:
        return lengths(self.osl_dist, self.osl)

    @property
    def workload(self) -> Workload:
        """The lengths and shared prefix given, as the one Workload shape."""
        return self.workload_flags().workload()

    def workload_flags(self, **driver) -> WorkloadFlags:
        """The shared fields in the shape a level's requests are drawn from (kneecap.workload.level_work), with
        what the driver read itself (dimension, dataset, trace schedule and rate, parsed ramp)."""
        return WorkloadFlags(
            input=self.input_lengths,
            output=self.output_lengths,
            shared_prefix_tokens=self.shared_prefix_tokens,
            num_prefix_groups=self.num_prefix_groups,
            seed=self.seed,
            turns=self.turns,
            think_time_s=self.think_time_s,
            **driver,
        )
