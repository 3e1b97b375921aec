"""The simulated engine: requests in, one step at a time on a clock it is handed, records out.

Owns the step loop of one engine instance (scheduler + block manager + step-time model), the
per-step trace and the RequestRecords; not arrival patterns (sweep.py drives the virtual clock;
`kneecap serve` drives it in real time) nor files.

    engine = Engine(deployment, config, num_blocks=plan.num_kv_blocks)
    engine.add_request(spec, at=t)            # arrival (sent_at) in seconds
    out = engine.step(now)                    # one step starting at `now` -> StepOutcome | None
    out.ended_at, out.emitted, out.finished   # tokens appear and requests finish at ended_at
    engine.abort(request_id, at=t)            # client gone: free its blocks, a cancelled record

`step(now, until=T, max_steps=N)` may advance up to N steps at once when nothing can change but
the contexts growing by one token each (all running sequences decoding, none finishing, no
admission possible, no block shortage, every step starting before T): the same steps, computed in
one go (the event-skipping fast path). Deterministic: no wall clock, no random state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.plan.engines import vllm_layout
from kneecap.plan.ledger import kv_groups
from kneecap.records import CANCELLED, ERROR, OK, RequestRecord, StepRuns, StepTimeline
from kneecap.sim.blocks import BlockManager, GroupedBlockManager
from kneecap.sim.config import EngineConfig, dp_rank_tokens, under_dp_attention
from kneecap.sim.dp_ranks import RankedScheduler
from kneecap.sim.scheduler import BLOCKED_BLOCKS, BLOCKED_BUDGET, BLOCKED_SEQS, Scheduler, Sequence
from kneecap.sim.steptime import StepTimeModel
from kneecap.workload import RequestSpec

TRACE_KEYS = (
    "level",
    "step",
    "t",
    "duration_s",
    "num_prefill_seqs",
    "num_decode_seqs",
    "prefill_tokens",
    "decode_tokens",
    "kv_blocks_used",
    "num_running",
    "num_waiting",
    "preemptions",
)
FAST_PATH_BLOCKED = (BLOCKED_SEQS, BLOCKED_BUDGET, BLOCKED_BLOCKS)  # admission stays impossible while only decoding


@dataclass
class StepOutcome:
    """What happened in one call to `Engine.step`: `num_steps` engine steps from started_at to ended_at."""

    started_at: float
    ended_at: float
    num_steps: int
    num_prefill_seqs: int  # in the last step
    num_decode_seqs: int  # in the last step
    prefill_tokens: int  # summed over the steps
    decode_tokens: int  # summed over the steps
    emitters: list[Sequence]  # the sequences that generated tokens over the steps, in order
    emitter_tokens: int | list[int]  # tokens each generated: one count for all, or one per emitter
    finished: list[RequestRecord]
    preempted: list[str]
    kv_blocks_used: int
    num_running: int
    num_waiting: int

    @property
    def emitted(self) -> list[tuple[str, int]]:
        """(request_id, tokens generated) over the steps; all stamped at ended_at if num_steps == 1."""
        n = self.emitter_tokens
        if isinstance(n, int):
            return [(seq.rid, n) for seq in self.emitters]
        return [(seq.rid, k) for seq, k in zip(self.emitters, n)]


@dataclass
class EngineStats:
    """Counters over the engine's life (one sweep level): the bench driver's `server_metrics` names."""

    num_steps: int = 0
    preemptions: int = 0
    kv_blocks_max: int = 0
    running_max: int = 0
    waiting_max: int = 0
    busy_s: float = 0.0
    kv_block_s: float = 0.0  # KV blocks in use x seconds, summed over steps (for the time-weighted mean usage)
    spec_drafts: int = 0  # speculative decoding: drafts verified (one per decoding sequence per step) ...
    spec_accepted: int = 0  # ... and draft tokens kept (vLLM's spec_decode counters)


def state_blocks_per_sequence(deployment: Deployment, prefix_caching: bool | None = None) -> int:
    """Blocks the fixed linear-attention state of one sequence takes (0 for models without linear-attention layers):
    in each of vLLM's linear-attention KV cache groups, 1 with prefix caching off, 2 or 3 with it on
    (engines.vllm_state_blocks, the plan's rule)."""
    groups = kv_groups(deployment, prefix_caching)
    return groups.state_blocks_per_request if groups is not None else 0


def kv_pool(
    deployment: Deployment, num_blocks: int, enable_prefix_caching: bool, charge_state: bool = True
) -> BlockManager:
    """The engine's KV pool of the planner's `num_blocks`, in vLLM's blocks: one block table per sequence when the
    model has one kind of layer (a block is block_size tokens of every layer); with sliding-window layers, vLLM V1's
    hybrid pool (a block is block_size tokens of one KV cache group's layers, a table per group); linear-attention
    hybrids hold their state in whole blocks beside one full-attention table (state_blocks_per_sequence), in blocks
    grown to hold a state page. charge_state False: a pool an engine logged for its KV alone (SGLang keeps the
    linear-attention state apart), in blocks of the deployment's block_size."""
    groups = kv_groups(deployment)
    if groups is None and "sliding_attention" in deployment.model.layer_types:  # sliding layers only: one group
        groups = vllm_layout(deployment)
    bs = deployment.block_size if groups is None or (groups.state_groups and not charge_state) else groups.block_size
    if groups is None or not any(groups.attention_windows):
        return BlockManager(num_blocks, bs, enable_prefix_caching)
    return GroupedBlockManager(num_blocks, bs, enable_prefix_caching, groups.attention_windows)


class Engine:
    """One simulated engine instance (a fresh KV pool, an empty cache)."""

    def __init__(
        self,
        deployment: Deployment,
        config: EngineConfig,
        num_blocks: int,
        *,
        steptime: StepTimeModel | None = None,
        level: int = 0,
        trace: bool = False,
        fast_path: bool = True,
        charge_state: bool = True,
        token_times: bool = True,
    ):
        self.deployment = deployment
        self.steptime = (steptime or StepTimeModel(deployment)).for_engine(config.profile)
        # under DP attention the engine's scheduler runs its own admission reserve (sim/config.py DP_SCHEDULER_NOTE)
        config = under_dp_attention(config, self.steptime.dp_ranks)
        self.config = config
        model = deployment.model
        spec = config.speculative
        if spec is not None and spec.gpu_drafter:  # the draft head's one layer of KV shares each block's page
            num_blocks = num_blocks * model.num_hidden_layers // (model.num_hidden_layers + 1)
        self.blocks = kv_pool(deployment, num_blocks, config.enable_prefix_caching, charge_state)
        self.block_size = self.blocks.block_size  # vLLM's: grown for linear-attention hybrids
        window = model.sliding_window if "sliding_attention" in model.layer_types else 0
        # linear-attention state is charged to the block pool (as the planner does) unless the pool is one an
        # engine logged for KV alone (SGLang keeps its Mamba/DeltaNet state in a separate pool)
        self.state_blocks = state_blocks_per_sequence(deployment, config.enable_prefix_caching) if charge_state else 0
        self.microbatches = deployment.pp  # pipeline stages: micro-batches in flight per round (steptime.py)
        # the blocks one request may hold at most (under SGLang's DP attention: one rank's own pool)
        self._request_blocks = self.blocks.num_blocks
        self.scheduler: Scheduler | RankedScheduler
        if self.steptime.rank_by_rank:  # SGLang's DP attention: a scheduler, pool and cap per rank (sim/dp_ranks.py)
            dp = self.steptime.dp_ranks
            self.scheduler = RankedScheduler(
                config, self.blocks, dp, dp_rank_tokens(config, dp), window=window or 0, state_blocks=self.state_blocks
            )
            self._request_blocks = self.scheduler.pools[0].num_blocks
        else:
            self.scheduler = Scheduler(
                config, self.blocks, window=window or 0, state_blocks=self.state_blocks, microbatches=self.microbatches
            )
        self.level = level
        self.fast_path = fast_path
        # end time of every step since step number _step_base (requests' runs hold step numbers);
        # forget_finished_steps() drops the ones no held request refers to any more
        self.step_end_at: list[float] = []
        self._step_base = 0
        self._compact_at = 0  # len(step_end_at) past which forget_finished_steps() looks again
        # token_times: records list every token's time (chunk_times), as a live client's do; else they hold
        # their runs of steps of this timeline (step_runs, token_runs), the same times without a float per token
        self.token_times = token_times
        self.timeline = StepTimeline(self.step_end_at)
        self.stats = EngineStats()
        self.trace_rows: list[tuple] | None = [] if trace else None
        self._last_blocked = ""
        # the last step's start and end (EngineProfile.schedules_ahead: its batch was formed one step earlier)
        self._prev_step = (-math.inf, -math.inf)
        self._schedules_ahead = config.profile.schedules_ahead

    # --- inputs -------------------------------------------------------------------------------
    def add_request(
        self, spec: RequestSpec, at: float, *, meta: dict | None = None, scheduled_at: float | None = None
    ) -> RequestRecord | None:
        """Queue a request arriving at `at` (s). Returns a failed record at once if it can never fit the
        KV pool (prompt + output > pool), as engines reject such requests up front; else None."""
        if spec.input_tokens < 1 or spec.output_tokens < 1:
            raise KneecapError(
                f"request {spec.request_id}: needs >= 1 input and output token", "fix the workload lengths"
            )
        seq = Sequence(spec, at, self.block_size, meta, scheduled_at)
        if (
            self.blocks.max_blocks_for(spec.input_tokens + spec.output_tokens - 1) + self.state_blocks
            > self._request_blocks
        ):
            ranks, cap = self.scheduler.dp_ranks, self.blocks.capacity_tokens
            pool = f"a DP rank's KV pool of {cap // ranks} tokens" if ranks > 1 else f"the KV pool of {cap} tokens"
            return self._record(
                seq,
                end_at=at,
                status=ERROR,
                error_kind="kv_capacity",
                error_message=f"prompt + output = {spec.input_tokens + spec.output_tokens} tokens exceed {pool}",
            )
        self.scheduler.add(seq)
        self._last_blocked = "" if len(self.scheduler.waiting) == 1 else self._last_blocked
        return None

    def abort(self, request_id: str, at: float | None = None) -> RequestRecord | None:
        """Drop a queued or running request (client went away) at time `at` (default: the end of the last
        step): its blocks are freed and a cancelled record is returned (None if the engine does not hold it)."""
        sched = self.scheduler
        for seq in sched.waiting:
            if seq.rid == request_id:
                sched.waiting.remove(seq)
                self.blocks.free_seq(seq.rid)  # holds no blocks; the pool forgets what it noted for it
                break
        else:
            for seq in sched.running:
                if seq.rid == request_id:
                    sched.finish(seq)
                    break
            else:
                return None
        self._last_blocked = ""
        if at is None:
            at = max(self.step_end_at[-1] if self.step_end_at else seq.arrival_at, seq.arrival_at)
        return self._record(
            seq, end_at=at, status=CANCELLED, error_kind="cancelled", error_message="the client cancelled the request"
        )

    @property
    def has_work(self) -> bool:
        return bool(self.scheduler.running or self.scheduler.waiting)

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use (vLLM's kv_cache_usage_perc)."""
        return self.blocks.num_used / self.blocks.num_blocks

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Prefix-cache hits / queries, in tokens (None when caching is off or nothing was looked up)."""
        if not self.config.enable_prefix_caching or not self.blocks.query_tokens:
            return None
        return self.blocks.hit_tokens / self.blocks.query_tokens

    def start_measuring(self) -> None:
        """Count server_metrics from now on, the engine's state (pool, prefix cache, queues) kept: a level's
        measured requests after its warmup, as bench scrapes a server's /metrics over the measured phase only."""
        self.stats = EngineStats()
        self.blocks.query_tokens = self.blocks.hit_tokens = 0

    def server_metrics(self) -> dict:
        """The per-level engine counters under the names the bench driver uses for a real server's metrics."""
        rate = self.prefix_cache_hit_rate
        return {
            "preemptions": self.stats.preemptions,
            "prefix_cache_hit_rate": None if rate is None else round(rate, 6),
            "prefix_cache_queries_tokens": self.blocks.query_tokens,
            "prefix_cache_hits_tokens": self.blocks.hit_tokens,
            "kv_usage_max": round(self.stats.kv_blocks_max / self.blocks.num_blocks, 6),
            # time-weighted over the engine's busy time (idle gaps between arrivals are not counted)
            "kv_usage_mean": (
                round(self.stats.kv_block_s / self.stats.busy_s / self.blocks.num_blocks, 6)
                if self.stats.busy_s > 0
                else None
            ),
            "kv_blocks_max": self.stats.kv_blocks_max,
            "num_kv_blocks": self.blocks.num_blocks,
            "running_max": self.stats.running_max,
            "waiting_max": self.stats.waiting_max,
            "num_steps": self.stats.num_steps,
            "spec": self.spec_summary(),
        }

    def spec_summary(self) -> dict | None:
        """The level's speculative decoding as vLLM's counters would say it (None when off)."""
        spec, st = self.config.speculative, self.stats
        if spec is None:
            return None
        drafted = st.spec_drafts * spec.tokens
        return {
            "draft_tokens": drafted,
            "accepted_tokens": st.spec_accepted,
            "acceptance_rate": round(st.spec_accepted / drafted, 6) if drafted else None,
            "mean_accepted_length": round(1 + st.spec_accepted / st.spec_drafts, 6) if st.spec_drafts else None,
            "method": spec.method,
            "source": "simulator",
        }

    # --- the step -----------------------------------------------------------------------------
    def step(self, now: float, *, until: float = math.inf, max_steps: int = 1) -> StepOutcome | None:
        """Run the next step starting at `now` (or, with max_steps > 1, up to that many identical decode
        steps, each starting before `until`). None when nothing is runnable."""
        if self.fast_path and max_steps > 1:
            out = self._decode_run(now, until, max_steps)
            if out is not None:
                return out
        return self._one_step(now)

    def _one_step(self, now: float) -> StepOutcome | None:
        sched, blocks, bs = self.scheduler, self.blocks, self.block_size
        sched.now = now
        # a scheduler one step ahead formed this step's batch when the last one started, if the GPU ran on without a
        # gap and had decodes to run; an idle engine takes in whatever is queued at once
        prev_start, prev_end = self._prev_step
        ahead = self._schedules_ahead and prev_end == now and bool(sched.running)
        sched.receive_before = prev_start if ahead else None
        batch = sched.schedule()
        self._last_blocked = batch.blocked
        if batch.num_seqs == 0:
            if batch.preempted:
                self._note_preempted(batch.preempted)
            return None
        n_dec = len(batch.decodes)
        prefill_tokens = batch.prefill_tokens
        spec = self.config.spec_tokens
        tokens = n_dec * (1 + spec) + prefill_tokens  # a decode verifies its spec drafts in the same pass
        units = n_dec
        if self.microbatches > 1:  # a prefill chunk fills one micro-batch per token budget
            per = self.config.max_num_batched_tokens
            units += sum(-(-n // per) for _, n in batch.prefills)
        dur = self.steptime.seconds(
            tokens,
            batch.pairs_full,
            batch.pairs_window,
            batch.kv_tokens_full,
            batch.kv_tokens_window,
            batch.num_seqs,
            num_decodes=n_dec,
            decode_kv_full=batch.decode_kv_full,
            decode_kv_window=batch.decode_kv_window,
            microbatches=units,
            ranks=sched.rank_loads(batch) if sched.dp_ranks > 1 else None,
        )
        if spec and n_dec and self.config.speculative.gpu_drafter:  # ngram drafts on the CPU
            dur += self.steptime.draft_seconds(n_dec, spec)
        end = now + dur
        self._prev_step = (now, end)
        if batch.admitted:
            sched.last_prompt_latency = dur  # vLLM V0: time from the prompt step's schedule() to the next
        idx = self._step_base + len(self.step_end_at)
        self.step_end_at.append(end)
        used_peak = blocks.num_used
        gains: list[int] | None = [] if spec else None  # tokens per emitter (None: one each)
        done: list[Sequence] = []
        # every decode emits, then the prefills that finish their prompt (the scheduler's list is ours now)
        emitters: list[Sequence] = [] if spec else batch.decodes
        if spec:
            st_ = self.stats
            st_.spec_drafts += n_dec
            for seq in batch.decodes:
                gain = seq.next_tokens
                st_.spec_accepted += gain - 1
                seq.num_computed += gain
                self._emit(seq, idx, end, emitters, gains, done, gain, spec)
        else:  # _emit of one token, inlined (this loop runs once per sequence per step)
            for seq in batch.decodes:
                seq.num_computed += 1
                seq.num_tokens += 1
                n_out = seq.num_output = seq.num_output + 1
                runs = seq.runs
                last = runs[-1]  # a decoding sequence has emitted before
                if last[0] + last[1] == idx:
                    last[1] += 1
                else:
                    runs.append([idx, 1])
                if n_out >= seq.output_len:
                    done.append(seq)
        for seq, n in batch.prefills:
            if seq.admitted_at is None:
                seq.admitted_at = now
                seq.meta["cached_tokens"] = seq.num_computed
            p = seq.num_computed
            seq.num_computed = p + n
            if seq.prefix_hashes and p // bs < len(seq.prefix_hashes):
                for i in range(p // bs, min((p + n) // bs, len(seq.prefix_hashes))):
                    blocks.register(seq.rid, i, seq.prefix_hashes[i])
            if seq.num_computed == seq.num_tokens:
                self._emit(seq, idx, end, emitters, gains, done, 1, spec)
        records = []
        for seq in done:
            sched.finish(seq)
            records.append(self._record(seq, end_at=end))
        if done:
            self._last_blocked = ""  # a finish frees a slot and blocks: admission may be possible again
        preempted = self._note_preempted(batch.preempted)
        sched.note_step(batch)  # SGLang's reserve ratio decays in decode steps
        st = self.stats
        st.num_steps += 1
        st.busy_s += dur
        st.kv_block_s += used_peak * dur
        st.kv_blocks_max = max(st.kv_blocks_max, used_peak)
        st.running_max = max(st.running_max, n_dec + len(batch.prefills))
        st.waiting_max = max(st.waiting_max, len(sched.waiting))
        if self.trace_rows is not None:
            self.trace_rows.append(
                (
                    self.level,
                    idx,
                    now,
                    dur,
                    len(batch.prefills),
                    n_dec,
                    prefill_tokens,
                    n_dec,
                    used_peak,
                    len(sched.running),
                    len(sched.waiting),
                    len(batch.preempted),
                )
            )
        return StepOutcome(
            now,
            end,
            1,
            len(batch.prefills),
            n_dec,
            prefill_tokens,
            n_dec,
            emitters,
            1 if gains is None else gains,
            records,
            preempted,
            blocks.num_used,
            len(sched.running),
            len(sched.waiting),
        )

    def _note_preempted(self, preempted: list[Sequence]) -> list[str]:
        self.stats.preemptions += len(preempted)
        return [s.rid for s in preempted]

    @staticmethod
    def _emit(
        seq: Sequence, idx: int, end: float, emitters: list, gains: list | None, done: list, n: int = 1, spec: int = 0
    ) -> None:
        seq.num_output += n
        seq.num_tokens += n
        if spec:  # tokens per emitting step (records: one chunk per step, chunk_tokens its count)
            if seq.step_tokens is None:
                seq.step_tokens = []
            seq.step_tokens.append(n)
        if seq.first_token_at is None:
            seq.first_token_at = end
        runs = seq.runs
        if runs and runs[-1][0] + runs[-1][1] == idx:
            runs[-1][1] += 1
        else:
            runs.append([idx, 1])
        emitters.append(seq)
        if gains is not None:
            gains.append(n)
        if seq.num_output >= seq.output_len:
            done.append(seq)

    # --- the fast path: many identical decode steps at once -------------------------------------
    def _decode_run(self, now: float, until: float, max_steps: int) -> StepOutcome | None:
        import numpy as np

        sched, blocks, bs = self.scheduler, self.blocks, self.block_size
        running = sched.running
        n = len(running)
        ranked = sched.dp_ranks > 1  # RankedScheduler: each rank's decodes, pool and budget its own
        if n == 0 or self.config.spec_tokens:
            return None
        if (max(len(s.running) for s in sched.ranks) if ranked else n) > sched.budget:
            return None
        if ranked and blocks.grouped:
            return None
        grouped = blocks.grouped
        if grouped and sched.waiting and self._last_blocked == BLOCKED_BLOCKS:
            return None  # sliding groups free blocks as the contexts grow: an admission may fit mid-run
        if sched.waiting and self._last_blocked not in FAST_PATH_BLOCKED:
            return None
        if sched.waiting and self._last_blocked == BLOCKED_BLOCKS and self.config.init_new_token_ratio > 0:
            return None  # SGLang's reserve shrinks as its ratio decays: admission may open mid-run
        if sched.waiting and self._last_blocked == BLOCKED_BUDGET and (n < sched.budget or sched.rank_tokens):
            return None  # the budget (or a DP rank's) was spent on prefill chunks, which are done: room now
        rem = math.inf
        for seq in running:
            if seq.num_output == 0 or seq.num_tokens - seq.num_computed != 1:
                return None
            r = seq.output_len - seq.num_output
            if r < rem:
                rem = r
        k = min(max_steps, int(rem) - 1)  # the step in which a sequence finishes runs on the exact path
        if k < 2:
            return None
        c = np.fromiter((s.num_computed for s in running), dtype=np.int64, count=n)
        crossings = np.bincount((-c) % bs, minlength=bs)  # sequences needing a new block at step j (period bs)
        need = np.cumsum(np.resize(crossings, k))
        if grouped:  # a block in every group at each crossing; what the sliding groups free is not counted
            num_groups = len(blocks.windows)
            if any(blocks.num_held(s.rid) != -(-s.num_computed // bs) for s in running):
                return None
            need = need * num_groups
        k = min(k, int(np.searchsorted(need, blocks.num_free, side="right")))
        ranks = None
        if ranked:  # each rank's decodes take blocks of its own pool
            ranks = np.fromiter((s.dp_rank for s in running), dtype=np.int64, count=n)
            for r, pool in enumerate(sched.pools):
                if k < 2:
                    break
                own = np.bincount((-c[ranks == r]) % bs, minlength=bs)
                k = min(k, int(np.searchsorted(np.cumsum(np.resize(own, k)), pool.num_free, side="right")))
        if k < 2:
            return None
        durs = self.steptime.decode_run_seconds(n, c + 1, k, ranks).tolist()
        t = now
        ends = []
        for d in durs:
            if t >= until:
                break
            t += d
            ends.append(t)
        k = len(ends)
        if k < 1:
            return None
        first = self._step_base + len(self.step_end_at)
        self.step_end_at.extend(ends)
        self._prev_step = (ends[-2] if k > 1 else now, ends[-1])
        used_before = blocks.num_used
        if grouped:
            used = self._grouped_decode_blocks(running, c.tolist(), k)
        else:
            counts = ((c + k + bs - 1) // bs - (c + bs - 1) // bs).tolist()
            if ranked:  # running lists the ranks' sequences rank by rank
                at = 0
                for rank, pool in zip(sched.ranks, sched.pools):
                    m = len(rank.running)
                    pool.take_many([s.rid for s in rank.running], counts[at : at + m])
                    at += m
            else:
                blocks.take_many([s.rid for s in running], counts)
            used = used_before + need[:k]  # blocks in use during each decode step
        for seq in running:
            seq.num_computed += k
            seq.num_output += k
            seq.num_tokens += k
            runs = seq.runs
            if runs and runs[-1][0] + runs[-1][1] == first:
                runs[-1][1] += k
            else:
                runs.append([first, k])
        sched.decay(k)
        st = self.stats
        st.num_steps += k
        st.busy_s += sum(durs[:k])
        st.kv_block_s += float(np.dot(used, durs[:k]))
        st.kv_blocks_max = max(st.kv_blocks_max, int(used.max()))
        st.running_max = max(st.running_max, n)
        st.waiting_max = max(st.waiting_max, len(sched.waiting))
        if self.trace_rows is not None:
            nw = len(sched.waiting)
            used_rows = used.tolist()
            starts = [now] + ends[:-1]
            for j in range(k):
                self.trace_rows.append((self.level, first + j, starts[j], durs[j], 0, n, 0, n, used_rows[j], n, nw, 0))
        return StepOutcome(
            now, ends[-1], k, 0, n, 0, n * k, list(running), k, [], [], blocks.num_used, n, len(sched.waiting)
        )

    def _grouped_decode_blocks(self, running: list[Sequence], computed: list[int], k: int):
        """The block work of k decode steps on a grouped pool, as the scheduler's loop does it step by step: in each
        step, for each sequence in running order, trim its sliding groups (blocks leaving the window go to the free
        queue's back) and, when its context fills its last block, take a block in every group. Only the (step,
        sequence) pairs where either happens are visited (elsewhere both are no-ops), in the loop's order; no take
        reaches a block freed in the run (k was bounded by the free blocks at its start). Blocks in use during each
        step (numpy array)."""
        import numpy as np

        blocks, bs = self.blocks, self.block_size
        window = max(blocks.windows)
        group = blocks.windows.index(window)  # the first sliding group (they all trim alike)
        events = []  # (step, running index): trims and crossings, visited in the loop's order
        for i, c in enumerate(computed):
            steps = set(range(-c % bs, k, bs))  # c + j fills its last block: a block in every group
            if window:
                lag = blocks.offset.get(blocks._keys(running[i].rid)[group], 0)
                if blocks._skipped(group, c) > lag:
                    steps.add(0)
                first = (window - 1 - c) % bs  # c + j - window + 1 reaches a multiple of bs
                steps.update(j for j in range(first, k, bs) if c + j - window + 1 > 0)
            events.extend((j, i) for j in steps)
        events.sort()
        used = np.empty(k, dtype=np.int64)
        at = 0
        for j, i in events:
            if j > at:
                used[at:j] = blocks.num_used  # steps without an event change nothing
                at = j
            blocks.decode_blocks(running[i].rid, computed[i] + j)
        used[at:] = blocks.num_used
        return used

    def forget_finished_steps(self, keep_at_most: int = 0) -> int:
        """Drop the end times of steps that no request still held (running, or waiting after a
        preemption) produced a token in, once more than `keep_at_most` are kept. `kneecap serve`
        calls this so that its memory does not grow by one float per step for as long as it runs;
        a sweep's engine lives for one level and never needs it. Returns how many were dropped."""
        if len(self.step_end_at) <= max(keep_at_most, self._compact_at):
            return 0
        if not self.token_times:
            raise KneecapError(
                "an engine whose records reference its step timeline cannot forget steps",
                "build the Engine with token_times=True (as kneecap serve does)",
            )
        sched = self.scheduler
        held = [seq.runs[0][0] for seq in sched.running if seq.runs]
        held += [seq.runs[0][0] for seq in sched.waiting if seq.runs]
        last = self._step_base + len(self.step_end_at) - 1  # kept: abort() ends a request at the last step's end
        drop = min(held, default=last) - self._step_base
        del self.step_end_at[:drop]  # drop >= 0: a held request's first step is never past the last one
        self._step_base += drop
        # a long request can hold old steps: look again only after keep_at_most more steps
        self._compact_at = len(self.step_end_at) + keep_at_most
        return drop

    # --- records ------------------------------------------------------------------------------
    def _record(
        self,
        seq: Sequence,
        *,
        end_at: float,
        status: str = OK,
        error_kind: str | None = None,
        error_message: str | None = None,
    ) -> RequestRecord:
        ends, base = self.step_end_at, self._step_base
        token_runs = [[ends[start - base], length, ends[start - base + length - 1]] for start, length in seq.runs]
        chunk_times: list[float] = []
        step_tokens = seq.step_tokens
        if self.token_times or step_tokens is not None:  # speculative steps emit several tokens: chunks per step
            for start, length in seq.runs:
                chunk_times.extend(ends[start - base : start - base + length])
        meta = seq.meta
        queue_s = None if seq.admitted_at is None else seq.admitted_at - seq.arrival_at
        extra = {"preemptions": seq.preemptions, "queue_s": queue_s, "cached_tokens": meta.get("cached_tokens", 0)}
        record = RequestRecord(
            request_id=seq.rid,
            level=meta.get("level", self.level),
            concurrency=meta.get("concurrency"),
            rate=meta.get("rate"),
            class_name=seq.spec.class_name,
            warmup=bool(meta.get("warmup", False)),
            scheduled_at=seq.scheduled_at,
            sent_at=seq.arrival_at,
            first_token_at=seq.first_token_at,
            first_answer_at=seq.first_token_at,
            end_at=end_at,
            chunk_times=chunk_times,
            chunk_tokens=list(step_tokens) if step_tokens is not None else [1] * len(chunk_times),
            token_runs=token_runs,
            expected_input_tokens=seq.prompt_len,
            expected_output_tokens=seq.output_len,
            prompt_tokens=seq.prompt_len if status != ERROR else None,
            output_tokens=seq.num_output if status != ERROR else None,
            status=status,
            error_kind=error_kind,
            error_message=error_message,
            extra=extra,
            conversation_id=seq.spec.conversation_id,
            turn=seq.spec.turn,
        )
        if not chunk_times and seq.runs:
            record.step_runs = StepRuns(self.timeline, seq.runs)
        return record

    # --- trace --------------------------------------------------------------------------------
    def trace(self) -> list[dict]:
        """Per-step trace rows (empty unless built with trace=True)."""
        return [dict(zip(TRACE_KEYS, row)) for row in (self.trace_rows or [])]
