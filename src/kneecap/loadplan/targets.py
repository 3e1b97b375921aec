"""Serving candidates as things a cell can run on: the simulator (virtual time) or a live server.

Each target answers the same questions: who am I (identity), how many sequences fit (preflight),
run this cell's requests (records + server metrics), reach a warm or cold state, and answer the
behaviour cases. The simulator cannot answer behaviour cases (no model is executed); it says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kneecap.errors import KneecapError
from kneecap.loadplan.schema import ServerTarget, SimulatorTarget
from kneecap.records import RequestRecord
from kneecap.workload import Workload, make_requests


@dataclass
class CellRun:
    records: list[RequestRecord]
    server_metrics: dict | None = None
    trace: list[dict] = field(default_factory=list)
    suspect: bool = False
    client: dict | None = None
    duration_s: float | None = None
    level: dict | None = None  # a live cell: the level summary the one level runner made (bench's level shape)
    stopped: dict | None = None  # a live cell: why the runner stopped (server_dead, auth_refused), else None


class SimulatorCandidate:
    """A Deployment on the simulated engine. Each cell runs on a fresh engine (virtual time)."""

    model_executed = False
    benchmark_executed = False

    def __init__(self, target: SimulatorTarget):
        from kneecap.plan.build import DeploymentRequest
        from kneecap.sim.setup import simulated_deployment

        self.target = target
        request = DeploymentRequest(model=target.model, gpu=target.gpu, tp=target.tp, pp=target.pp, ep=target.ep,
                                    dp_attention=target.dp_attention,
                                    weight_dtype=target.weight_dtype, kv_dtype=target.kv_dtype,
                                    block_size=target.block_size)
        self.setup = simulated_deployment(request, defaults=target.engine_defaults, max_num_seqs=target.max_num_seqs,
                                          max_num_batched_tokens=target.max_num_batched_tokens,
                                          prefix_caching=target.prefix_caching,
                                          scheduler_delay_factor=target.scheduler_delay_factor)
        self.plan = self.setup.plan
        self.config = self.setup.config
        self.steptime = self.setup.steptime

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

    @property
    def num_gpus(self) -> int:
        return self.plan.deployment.num_gpus

    def run_cell(self, *, index: int, dimension: str, load: float, workload: Workload, num_requests: int,
                 warmup: int, seed: int, burstiness: float, on_s: float | None = None, off_s: float = 0.0,
                 on_record=None, records_path=None, progress=None) -> CellRun:
        from kneecap.levels import SweepLevel
        from kneecap.records import RecordWriter
        from kneecap.sim.level_driver import SimulateOptions, VirtualTimeDriver

        # the same virtual-clock level driver `kneecap simulate` runs, with this cell's class, seed and bursts;
        # virtual time: the whole cell is computed at once, then its records are handed over
        opts = SimulateOptions(kind=dimension, levels=(load,), warmup=warmup, burstiness=burstiness)
        level = SweepLevel(index=index, value=int(load) if dimension == "concurrency" else float(load),
                          num_requests=num_requests, num_warmup=warmup, first_index=0)
        with RecordWriter(records_path) as writer:
            def write(record: RequestRecord, writer=writer) -> None:
                if on_record is not None:
                    on_record(record)  # the plan's privacy rules
                writer.write(record)

            run = VirtualTimeDriver(self.setup, opts, trace=True).run_level(
                level, write, workload=workload, seed=seed, on_s=on_s, off_s=off_s)
        return CellRun(records=list(run.records), server_metrics=run.server_metrics, trace=run.trace)

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
            raise KneecapError(f"environment variable {target.api_key_env} (api_key_env) is empty or unset",
                               f"export {target.api_key_env}=... before kneecap run")
        try:
            self.info = fetch_server_info(target.base_url, api_key=self.api_key, timeout_s=10)
            # the same checks, prompt decision and keep-alive decision as `kneecap bench` (kneecap.client.setup)
            self.model = check_server(self.info, target.model, url=target.base_url)
            self.live = prepare_client(self.info, base_url=target.base_url.rstrip("/"), model=self.model,
                                       endpoint=target.endpoint, api_key=self.api_key, timeout_s=target.timeout_s,
                                       keepalive=None if target.keepalive == "auto" else bool(target.keepalive),
                                       flag_name="target.keepalive", salt=new_salt())
        except KneecapError as exc:
            raise KneecapError(f"candidate server {target.base_url}: {exc.message}", exc.hint) from None
        self.prompts = self.live.prompts
        self.connections = self.live.connections
        self.model_executed = not self.info.simulated  # kneecap serve says it runs no model (it is still measured)

    def identity(self) -> dict:
        info = self.info.to_dict()
        return {"kind": "server", "base_url": self.target.base_url, "endpoint": self.target.endpoint, "model": self.model,
                "server": info, "connections": self.connections, "prompts": self.prompts.to_dict()}

    @property
    def kv_capacity_tokens(self) -> int | None:
        return self.info.kv_capacity_tokens

    @property
    def block_size(self) -> int:
        return self.info.block_size or 16

    @property
    def num_gpus(self) -> int | None:
        return None

    def run_cell(self, *, index: int, dimension: str, load: float, workload: Workload, num_requests: int,
                 warmup: int, seed: int, burstiness: float, on_s: float | None = None, off_s: float = 0.0,
                 on_record=None, records_path=None, progress=None) -> CellRun:
        """One level of the one level runner (kneecap.sweep.runner.Sweep) with the HTTP driver, as bench runs a
        level: records to `records_path` as they finish, /metrics scraped over the cell, the dead-server and
        refused-key checks after it. The cell's class, seed and bursts give the level's requests."""
        from kneecap.metrics.accumulate import summarize_stream
        from kneecap.metrics.stop import StopLimits
        from kneecap.records import RecordWriter, read_records
        from kneecap.sweep.http_levels import HttpLevelDriver, in_process_runner
        from kneecap.sweep.level import DriverSetup
        from kneecap.sweep.options import BenchOptions
        from kneecap.sweep.progress import SilentProgress
        from kneecap.sweep.resume import RecordsFile
        from kneecap.sweep.runner import STATUS_INTERRUPTED, Sweep, SweepState
        from kneecap.sweep.server_watch import ThreadedMetricsPoller
        from kneecap.sweep.session import OPEN_LOOP_WARM_CONNECTIONS, server_answers
        from kneecap.levels import SweepLevel

        specs = make_requests(workload, warmup + num_requests, seed, id_prefix=f"cell{index}-r")
        value = int(load) if dimension == "concurrency" else float(load)
        # the driver seeds level i's arrivals with opts.seed + i: the cell's seed is spec.seed + index
        opts = BenchOptions(base_url=self.target.base_url, endpoint=self.target.endpoint, model=self.model,
                            isl=max(s.input_tokens for s in specs), osl=max(s.output_tokens for s in specs),
                            **{dimension: (value,)}, burstiness=burstiness, requests=num_requests, warmup=warmup,
                            seed=seed - index, timeout_s=self.target.timeout_s, keepalive=self.live.cfg.keepalive)
        level = SweepLevel(index=index, value=value, num_requests=num_requests, num_warmup=warmup, first_index=0)
        setup = DriverSetup(cfg=self.live.cfg, prompts=self.prompts.make(seed),
                            warm_connections=OPEN_LOOP_WARM_CONNECTIONS)

        class Notes(SilentProgress):  # the runner's warnings (e.g. reused connections) reach the run's progress
            def note(self, line: str) -> None:
                if progress is not None:
                    progress(line)

        notes = Notes()
        driver = HttpLevelDriver(opts, run_share=in_process_runner(setup), probe=lambda: server_answers(opts, self.api_key),
                                 poll_metrics=lambda: ThreadedMetricsPoller(opts.base_url_clean, self.api_key),
                                 epoch=time.perf_counter(), progress=notes,
                                 specs_for=lambda level, warmup, round_index=0: tuple(specs[:level.num_warmup] if warmup
                                                                                     else specs[level.num_warmup:]),
                                 bursts={"on_s": on_s, "off_s": off_s} if on_s is not None else None)
        with RecordWriter(records_path) as writer:
            def write(record: RequestRecord, writer=writer) -> None:  # each record leaves as it finishes
                if on_record is not None:
                    on_record(record)  # the plan's privacy rules
                writer.write(record)

            sweep = Sweep(opts, state=SweepState(connections=self.connections), sweep_levels=[level], driver=driver,
                          write_record=write, persist=lambda summary: None, progress=notes, slo=None,
                          stop_limits=StopLimits(), summarize_fn=summarize_stream, sync=writer.sync,
                          records_file=RecordsFile(records_path),
                          summary_fields=lambda: {"kind": "bench", "model_executed": not self.info.simulated,
                                                  "benchmark_executed": True})
            done = sweep.run()
        if done["status"] == STATUS_INTERRUPTED:
            raise KeyboardInterrupt  # the run's own handling: records kept, --resume runs this cell again
        summary = sweep.state.levels[0]
        stopped = sweep.state.stopped if (sweep.state.stopped or {}).get("reason") in ("server_dead", "auth_refused") else None
        client = summary.get("client") or {}
        return CellRun(records=list(read_records(records_path)), server_metrics=summary.get("server_metrics"),
                       suspect=bool(summary.get("suspect")), client=client, duration_s=client.get("duration_s"),
                       level=summary, stopped=stopped)

    def settle(self, state: str, pause_s: float, reset_prefix_cache: bool) -> str:
        """Cold: pause, then ask the server to drop its prefix cache where it has an endpoint for it."""
        if state != "cold":
            return "warm-up requests"
        time.sleep(pause_s)
        done = []
        if reset_prefix_cache:
            import urllib.request

            root = self.target.base_url.rstrip("/").removesuffix("/v1")
            # vLLM: POST /reset_prefix_cache; SGLang: POST /flush_cache
            for path in ("/reset_prefix_cache", "/flush_cache"):
                req = urllib.request.Request(root + path, data=b"", method="POST",
                                             headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})
                try:
                    with urllib.request.urlopen(req, timeout=5) as resp:
                        if resp.status < 300:
                            done.append(path)
                except Exception:  # an engine without that endpoint: nothing to reset there
                    pass
        return f"paused {pause_s:g} s" + (f", reset via {', '.join(done)}" if done else ", no prefix-cache reset endpoint")

    def answer(self, prompt: str, max_tokens: int) -> str | None:
        """One non-streaming, greedy chat completion: the behaviour case's answer text."""
        import json
        import urllib.error
        import urllib.request

        root = self.target.base_url.rstrip("/").removesuffix("/v1")
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "temperature": 0, "stream": False}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(root + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.target.timeout_s) as resp:
                doc = json.loads(resp.read())
            return doc["choices"][0]["message"]["content"] or ""
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            return f"<no answer: {type(exc).__name__}>"


def make_candidate(target):
    return SimulatorCandidate(target) if target.kind == "simulator" else ServerCandidate(target)
