"""Serving candidates as things a ramp of cells can run on: the simulator (virtual time) or a live server.

Each target answers the same questions: who am I (identity), how many sequences fit (preflight), send a cell's
requests as a level of the one level runner (through its Ramp), reach a warm or cold state, and answer the
behaviour cases. The simulator cannot answer behaviour cases (no model is executed); it says so.
"""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass, field

from kneecap.errors import KneecapError
from kneecap.levels import LevelRun, SweepLevel
from kneecap.loadplan.schema import ServerTarget, SimulatorTarget
from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver
from kneecap.sweep.http_levels import HttpLevelDriver, in_process_runner
from kneecap.sweep.level import DriverSetup
from kneecap.sweep.options import BenchOptions
from kneecap.sweep.server_watch import ThreadedMetricsPoller
from kneecap.sweep.session import OPEN_LOOP_WARM_CONNECTIONS, server_answers
from kneecap.workload import Workload, make_requests


@dataclass
class Ramp:
    """A ramp's cells as the levels of the one level runner, and what they send: one class at rising loads (the
    levels' values), in one state, which the candidate reaches before each cell (`notes[cell index]` says how; cold:
    after a pause, the prefix cache reset if asked); then it sends the cell's requests, seeded with `seed` + the
    cell's index (on_s / off_s: an open loop in bursts)."""

    candidate: object
    progress: object
    dimension: str
    loads: tuple
    workload: Workload
    state: str
    warmup: int
    seed: int
    burstiness: float
    pause_s: float
    reset_prefix_cache: bool
    on_s: float | None = None
    off_s: float = 0.0
    notes: dict[int, str] = field(default_factory=dict)

    def run_level(self, level: SweepLevel, keep) -> LevelRun:
        self.notes[level.index] = self.candidate.settle(self.state, self.pause_s, self.reset_prefix_cache)
        return self.candidate.run_level(self, level, keep, self.progress)

    def server_gone(self, summary: dict) -> str | None:
        return self.candidate.server_gone(summary)


class SimulatorCandidate:
    """A Deployment on the simulated engine. Each cell runs on a fresh engine (virtual time)."""

    model_executed = False
    benchmark_executed = False

    def __init__(self, target: SimulatorTarget, base_dir: Path | None = None):
        from kneecap.plan.build import DeploymentRequest
        from kneecap.sim.setup import simulated_deployment
        from kneecap.sim.speculative import PLAN_NAMES, spec_decoding

        self.target = target
        request = DeploymentRequest(
            model=target.model,
            gpu=target.gpu,
            tp=target.tp,
            pp=target.pp,
            ep=target.ep,
            dp_attention=target.dp_attention,
            weight_dtype=target.weight_dtype,
            kv_dtype=target.kv_dtype,
            block_size=target.block_size,
        )
        self.setup = simulated_deployment(
            request,
            defaults=target.engine_defaults,
            max_num_seqs=target.max_num_seqs,
            max_num_batched_tokens=target.max_num_batched_tokens,
            prefix_caching=target.prefix_caching,
            scheduler_delay_factor=target.scheduler_delay_factor,
            speculative=spec_decoding(
                target.spec_method,
                target.spec_tokens,
                target.spec_acceptance_text(),
                base_dir=base_dir,
                names=PLAN_NAMES,
            ),
        )
        self.plan = self.setup.plan

    def identity(self) -> dict:
        facts = self.setup.describe()
        facts["deployment"]["model_source"] = self.plan.deployment.model.source
        return {"kind": "simulator", **facts, "plan": self.plan.to_json()}

    @property
    def kv_capacity_tokens(self) -> int:
        return self.plan.kv_capacity_tokens

    @property
    def block_size(self) -> int:
        return self.plan.deployment.block_size

    def ramp_options(self, ramp: Ramp):
        return SimulateOptions(kind=ramp.dimension, levels=ramp.loads, warmup=ramp.warmup, burstiness=ramp.burstiness)

    def run_level(self, ramp: Ramp, level: SweepLevel, keep, progress) -> LevelRun:
        """The virtual-clock level driver `kneecap simulate` runs (a fresh engine; the whole cell computed at once,
        then its records handed over) with the cell's class, seed and bursts, and the engine's per-step trace.
        A cell too short to show its steady state (kneecap.metrics.stability: transient) is computed again, longer
        (kneecap.metrics.stability.extended_requests): only the last computation's records are handed over."""
        import dataclasses

        from kneecap.metrics.stability import extended_requests, level_stability

        driver = VirtualTimeDriver(self.setup, self.ramp_options(ramp), trace=True)
        attempt = 0
        while True:
            records: list = []
            run = driver.run_level(
                level,
                records.append,
                workload=ramp.workload,
                seed=ramp.seed + level.index,
                on_s=ramp.on_s,
                off_s=ramp.off_s,
            )
            more = extended_requests(
                level.num_requests, level_stability(records, kind=ramp.dimension, value=level.value), attempt
            )
            if more is None:
                break
            level, attempt = dataclasses.replace(level, num_requests=more), attempt + 1
        for record in records:
            keep(record)
        return run

    def server_gone(self, summary: dict) -> str | None:
        return None  # the simulated engine never goes away

    def settle(self, state: str, pause_s: float, reset_prefix_cache: bool) -> str:
        # every simulated cell starts on a fresh engine: cold by construction; warm = warm-up requests first
        return "fresh simulated engine" + (" + warm-up requests" if state == "warm" else " (cold: empty prefix cache)")

    def answer(self, prompt: str, max_tokens: int) -> str | None:
        return None  # no model is executed in the simulator


class ServerCandidate:
    """A live OpenAI-compatible server, driven by kneecap's client (the same one `kneecap bench` uses)."""

    model_executed = True
    benchmark_executed = True

    def __init__(self, target: ServerTarget):
        import os

        from kneecap.client.server_info import fetch_server_info
        from kneecap.client.setup import check_server, new_salt, prepare_client

        self.target = target
        self.api_key = os.environ.get(target.api_key_env) if target.api_key_env else None
        if target.api_key_env and not self.api_key:
            raise KneecapError(
                f"environment variable {target.api_key_env} (api_key_env) is empty or unset",
                f"export {target.api_key_env}=... before kneecap run",
            )
        try:
            self.info = fetch_server_info(
                target.base_url, api_key=self.api_key, timeout_s=10, flag="target.base_url", otherwise=""
            )
            # the same checks, prompt decision and keep-alive decision as `kneecap bench` (kneecap.client.setup)
            self.model = check_server(self.info, target.model, url=target.base_url)
            self.live = prepare_client(
                self.info,
                base_url=target.base_url.rstrip("/"),
                model=self.model,
                endpoint=target.endpoint,
                api_key=self.api_key,
                timeout_s=target.timeout_s,
                keepalive=None if target.keepalive == "auto" else bool(target.keepalive),
                flag_name="target.keepalive",
                salt=new_salt(),
            )
        except KneecapError as exc:
            raise KneecapError(f"candidate server {target.base_url}: {exc.message}", exc.hint) from None
        self.prompts = self.live.prompts
        self.connections = self.live.connections
        self.model_executed = not self.info.simulated  # kneecap serve says it runs no model (it is still measured)

    def identity(self) -> dict:
        info = self.info.to_dict()
        return {
            "kind": "server",
            "base_url": self.target.base_url,
            "endpoint": self.target.endpoint,
            "model": self.model,
            "server": info,
            "connections": self.connections,
            "prompts": self.prompts.to_dict(),
        }

    @property
    def kv_capacity_tokens(self) -> int | None:
        return self.info.kv_capacity_tokens

    @property
    def block_size(self) -> int:
        return self.info.block_size or 16

    def ramp_options(self, ramp: Ramp):
        cls = ramp.workload.classes[0]  # the lengths come from the cells' requests; these only describe them
        return BenchOptions(
            base_url=self.target.base_url,
            endpoint=self.target.endpoint,
            model=self.model,
            isl=cls.input.upper_bound or max(1, int(cls.input.expected)),
            osl=cls.output.upper_bound or max(1, int(cls.output.expected)),
            **{ramp.dimension: ramp.loads},
            burstiness=ramp.burstiness,
            warmup=ramp.warmup,
            seed=ramp.seed,
            timeout_s=self.target.timeout_s,
            keepalive=self.live.cfg.keepalive,
        )

    def run_level(self, ramp: Ramp, level: SweepLevel, keep, progress) -> LevelRun:
        """One cell as bench sends a level (the HTTP driver, kneecap.sweep.http_levels): the cell's class, seed and
        bursts give its requests and prompts, the server's /metrics are scraped over it; the driver seeds the
        level's arrivals with the ramp's seed + the cell's index."""
        seed = ramp.seed + level.index
        specs = make_requests(
            ramp.workload, level.num_warmup + level.num_requests, seed, id_prefix=f"cell{level.index}-r"
        )
        opts = self.ramp_options(ramp)
        setup = DriverSetup(
            cfg=self.live.cfg, prompts=self.prompts.make(seed), warm_connections=OPEN_LOOP_WARM_CONNECTIONS
        )
        self._http = HttpLevelDriver(
            opts,
            run_share=in_process_runner(setup),
            probe=lambda: server_answers(opts, self.api_key),
            poll_metrics=lambda: ThreadedMetricsPoller(opts.base_url_clean, self.api_key),
            epoch=time.perf_counter(),
            progress=progress,
            specs_for=lambda level, warmup, round_index=0: (
                specs[: level.num_warmup] if warmup else specs[level.num_warmup :]
            ),
            bursts={"on_s": ramp.on_s, "off_s": ramp.off_s} if ramp.on_s is not None else None,
        )
        return self._http.run_level(level, keep)

    def server_gone(self, summary: dict) -> str | None:
        """After a cell: the HTTP driver's dead-server probe (as bench's)."""
        return self._http.server_gone(summary)

    def settle(self, state: str, pause_s: float, reset_prefix_cache: bool) -> str:
        """Cold: pause, then ask the server to drop its prefix cache where it has an endpoint for it."""
        if state != "cold":
            return "warm-up requests"
        time.sleep(pause_s)
        done = []
        if reset_prefix_cache:
            from kneecap.client.cache_reset import reset_prefix_cache as reset

            done = reset(self.target.base_url, self.api_key)
        return f"paused {pause_s:g} s" + (
            f", reset via {', '.join(done)}" if done else ", no prefix-cache reset endpoint"
        )

    def _post(self, path: str, data: bytes, headers: dict | None = None):
        """A POST to the server's root (base_url without /v1), with the API key when there is one."""
        import urllib.request

        auth = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return urllib.request.Request(
            self.target.base_url.rstrip("/").removesuffix("/v1") + path,
            data=data,
            method="POST",
            headers={**(headers or {}), **auth},
        )

    def answer(self, prompt: str, max_tokens: int) -> str | None:
        """One non-streaming, greedy chat completion: the behaviour case's answer text."""
        import json
        import urllib.error
        import urllib.request

        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": False,
        }
        req = self._post("/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.target.timeout_s) as resp:
                doc = json.loads(resp.read())
            return doc["choices"][0]["message"]["content"] or ""
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            return f"<no answer: {type(exc).__name__}>"


def make_candidate(target, base_dir: Path | None = None):
    """base_dir: the plan's folder, which a simulator target's spec_acceptance file is relative to."""
    return SimulatorCandidate(target, base_dir) if target.kind == "simulator" else ServerCandidate(target)
