"""One scheduling decision per engine step: which sequences run, with how many tokens each.

Owns the Sequence state and the policy; not time (steptime.py, engine.py) nor block bookkeeping
(blocks.py, which it calls). No I/O, no clock, no randomness.

Policy (vLLM V1 `Scheduler.schedule`, with decodes placed first as Sarathi-Serve does):
  1. running decodes, oldest admission first, 1 token each; a decode that needs a new block when
     none is free preempts the most recently admitted running sequence (recompute: its blocks are
     freed, it goes back to the *front* of the queue and later recomputes prompt + generated tokens),
     possibly itself;
  2. running sequences still in prefill, in admission order, a chunk each within the token budget; where free blocks
     are short, vLLM (EngineConfig.chunk_whole_or_preempt) preempts the most recently admitted running sequences for
     the whole chunk, possibly the sequence itself (then no chunk runs and nothing is admitted this step), as its
     allocate_slots gives a chunk all its blocks or none; otherwise the chunk shrinks to the free blocks;
  3. new admissions from the queue, first come first served, while the sequence cap, the token budget
     and the free blocks allow (a cache hit on a shared prefix skips those tokens). The queue head
     blocks everything behind it (strict FCFS, as vLLM). With rank_tokens set (one rank of SGLang's DP attention)
     a step takes at most that many prompt tokens.
Without chunked prefill (EngineConfig.chunked_prefill False, TensorRT-LLM's default) a prompt is never split: it
runs whole in a step whose remaining token budget holds all of it, else waits (and, FCFS, so does the queue behind it).
With mixed_prefill_decode False (SGLang's prefill-first policy) a step that can take prompt tokens (steps 2 and 3)
runs only those, and the decodes run in a step of their own when no prompt tokens can. Under DP attention with
requests dealt to the ranks round robin (SGLang, sim/config.py DP_PLACEMENT_NOTE) RankedScheduler runs one Scheduler
per rank, each over its own share of the pool (RankPool), and merges their batches.
SGLang-like configs also require free KV for new_token_ratio x the remaining output of every running
sequence and the candidate before admitting it (SGLang PrefillAdder); the ratio decays on steps that run decodes
alone (note_step).
With scheduler_delay_factor > 0 (vLLM V0 `Scheduler._passed_delay`), admissions wait while sequences run
until the oldest waiting request has waited delay_factor x the duration of the last step that ran prompts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields

from kneecap.sim.blocks import BlockManager, blocks_for
from kneecap.sim.config import EngineConfig
from kneecap.workload import RequestSpec

# why the last admission attempt stopped (the engine's fast path reads it)
BLOCKED_NONE = ""
BLOCKED_SEQS = "max_num_seqs"
BLOCKED_BUDGET = "token_budget"
BLOCKED_BLOCKS = "kv_blocks"
BLOCKED_RESERVE = "kv_reserve"
BLOCKED_DELAY = "scheduler_delay"
BLOCKED_AHEAD = "scheduled_ahead"  # arrived after the batch was formed (EngineProfile.schedules_ahead)


class Sequence:
    """One request inside the engine. Token counts in tokens; times in seconds of virtual time."""

    __slots__ = (
        "spec",
        "rid",
        "prompt_len",
        "output_len",
        "arrival_at",
        "scheduled_at",
        "num_tokens",
        "num_computed",
        "num_output",
        "prefix_hashes",
        "admitted_at",
        "first_token_at",
        "preemptions",
        "runs",
        "meta",
        "spec_rng",
        "next_tokens",
        "step_tokens",
        "_hashes_key",
        "_hashes",
        "prefix_memo",
        "received",
        "dp_rank",
    )

    def __init__(
        self,
        spec: RequestSpec,
        arrival_at: float,
        block_size: int,
        meta: dict | None = None,
        scheduled_at: float | None = None,
    ):
        self.spec = spec
        self.rid = spec.request_id
        self.prompt_len = spec.input_tokens
        self.output_len = spec.output_tokens
        self.arrival_at = arrival_at
        self.scheduled_at = arrival_at if scheduled_at is None else scheduled_at
        self.num_tokens = spec.input_tokens  # prompt + tokens generated so far
        self.num_computed = 0  # tokens whose KV is in the cache
        self.num_output = 0
        if spec.block_hashes:  # a replayed trace: a full block is shared where its trace block's hash id is
            bt = spec.block_tokens
            per = bt // block_size if bt % block_size == 0 else 0
            n_full = min(spec.input_tokens, len(spec.block_hashes) * bt) // block_size if per else 0
            self.prefix_hashes = tuple(("t", spec.block_hashes[i // per], i % per) for i in range(n_full))
        else:
            n_prefix = (spec.prefix_tokens // block_size) if spec.prefix_group is not None else 0
            self.prefix_hashes = tuple(("p", spec.class_name, spec.prefix_group, i) for i in range(n_prefix))
        self.admitted_at: float | None = None
        self.first_token_at: float | None = None
        self.preemptions = 0
        self.runs: list[list[int]] = []  # [first step index, number of consecutive steps] that emitted a token
        # speculative decoding: fractional tokens carried between steps, tokens the scheduled step emits, and the
        # tokens of every emitting step (None when each step emits one)
        self.spec_rng = None  # speculative decoding: the sequence's own acceptance draws (created at its first)
        self.next_tokens = 1
        self.step_tokens: list[int] | None = None
        self.meta = meta or {}
        # block_hashes' last answer and the key it was built for (a waiting sequence asks every step)
        self._hashes_key: tuple | None = None
        self._hashes: tuple = ()
        # whether the engine's scheduler has taken it in (Scheduler.receive_before)
        self.received = False
        self.prefix_memo: list | None = None  # BlockManager.prefix_hit's remembered lookup for this sequence
        self.dp_rank = 0  # its DP-attention rank where requests are dealt round robin (sim/dp_ranks.py)

    def block_hashes(self, block_size: int) -> tuple:
        """Hashes of the full blocks a (re)admission may find cached: the shared prefix, then (after a
        preemption) this sequence's own computed blocks. Never the block holding the last token (it must
        be recomputed to produce logits, as in vLLM). The same tuple object while its length and the
        preemption count stay the same (so per-sequence lookups can be remembered by identity)."""
        n = (self.num_tokens - 1) // block_size
        key = (n, self.preemptions, block_size)
        if self._hashes_key != key:
            hashes = list(self.prefix_hashes[:n])
            if self.preemptions:
                hashes.extend(("s", self.rid, i) for i in range(len(hashes), n))
            self._hashes = tuple(hashes)
            self._hashes_key = key
        return self._hashes

    def own_hashes(self, block_size: int) -> list:
        """Hashes of this sequence's full computed blocks (cached when it is preempted)."""
        n = self.num_computed // block_size
        out = list(self.prefix_hashes[:n])
        out.extend(("s", self.rid, i) for i in range(len(out), n))
        return out


@dataclass
class Batch:
    """What one step runs. Aggregates feed the step-time model (see steptime.py for their meaning)."""

    decodes: list[Sequence] = field(default_factory=list)
    prefills: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, new tokens this step)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    pairs_full: float = 0.0
    pairs_window: float = 0.0
    kv_tokens_full: float = 0.0
    kv_tokens_window: float = 0.0
    decode_kv_full: float = 0.0  # the decodes' share of pairs_full / kv_tokens_full (equal for a decode)
    decode_kv_window: float = 0.0
    blocked: str = BLOCKED_NONE

    @classmethod
    def merged(cls, parts: list["Batch"], blocked: str = BLOCKED_NONE) -> "Batch":
        """One step made of several schedulers' batches (DP attention ranks): every list joined and every figure
        summed, field by field, so that a field added to Batch is merged too; `blocked` is the caller's to say."""
        batch = cls(blocked=blocked)
        for f in fields(cls):
            if f.name != "blocked":
                setattr(batch, f.name, sum((getattr(p, f.name) for p in parts), start=getattr(batch, f.name)))
        return batch

    @property
    def num_seqs(self) -> int:
        return len(self.decodes) + len(self.prefills)

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, n in self.prefills)


def _new_blocks(num_tokens: int, bs: int, have: int, hit: int, hit_used: int) -> int:
    """BlockManager.new_blocks_needed for a sequence holding `have` blocks whose prefix lookup found `hit` leading
    blocks cached, `hit_used` of them in use (a hit on a used block takes no free block)."""
    need = blocks_for(num_tokens, bs) - have
    if need <= 0:
        return 0
    return need - hit_used if have == 0 and hit else need


def _window_pairs(p: int, n: int, w: int) -> int:
    """sum over positions i = p+1 .. p+n of min(i, w): attention pairs of a chunk under a sliding window."""
    if w <= 0:
        return 0
    lo, hi = p + 1, p + n
    if hi <= w:
        return (lo + hi) * n // 2
    if lo > w:
        return n * w
    return (lo + w) * (w - lo + 1) // 2 + (hi - w) * w


class Scheduler:
    """Holds the running list (admission order) and the FCFS queue; `schedule()` builds one Batch."""

    decodes_at_once = True  # step 1 in one go when nothing can be preempted (False: always the loop; tests)
    # admissions look the queue head's prefix up through BlockManager.prefix_hit, remembered per sequence
    # (False: lookup_prefix and new_blocks_needed rescan every prompt block each step; tests compare the two)
    remember_prefix = True

    def __init__(
        self, config: EngineConfig, blocks: BlockManager, window: int = 0, state_blocks: int = 0, microbatches: int = 1
    ):
        self.config = config
        # pipeline parallelism: one schedule() builds a round of `microbatches` micro-batches, each with its own
        # max_num_batched_tokens budget (vLLM V1 schedules every in-flight batch against the full budget)
        self.microbatches = max(1, microbatches)
        self.budget = config.max_num_batched_tokens * self.microbatches
        self.blocks = blocks
        self.window = window
        # blocks' worth of fixed per-sequence state (linear-attention layers), charged to the same pool on
        # admission and returned on preemption or finish, as the planner charges it per sequence
        self.state_blocks = state_blocks
        self.running: list[Sequence] = []
        self.waiting: deque[Sequence] = deque()
        self.new_token_ratio = config.init_new_token_ratio
        # scheduler_delay_factor state (vLLM V0): `now` is set by the engine before each schedule(), and
        # last_prompt_latency (s) after each step that admitted prompts — vLLM measures it as the time between
        # the schedule() call that admitted prompts and the next call, i.e. that step's duration
        self.now = 0.0
        self.last_prompt_latency = 0.0
        # a scheduler that forms step n + 1's batch while step n runs (EngineProfile.schedules_ahead): the engine
        # sets this to step n's start, and only requests that arrived before it can join; None: every queued one
        self.receive_before: float | None = None
        # DP-attention ranks this scheduler's batches are priced over (RankedScheduler: more than one)
        self.dp_ranks = 1
        # one DP rank's prompt tokens a step (SGLang's chunked prefill size over the DP size; sim/config.py
        # DP_SCHEDULER_NOTE); 0: the step's budget alone
        self.rank_tokens = 0

    def _passed_delay(self) -> bool:
        """vLLM V0 `_passed_delay`: admit prompts only once the oldest waiting request has waited
        delay_factor x the last prompt step's latency, or when nothing is running."""
        factor = self.config.scheduler_delay_factor
        if factor > 0 and self.waiting and self.running:
            return self.now - min(s.arrival_at for s in self.waiting) > factor * self.last_prompt_latency
        return True

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def note_step(self, batch: Batch) -> None:
        """After `batch` ran: the admission reserve's ratio decays by one step where the step ran decodes alone and
        retracted nothing (SGLang's update_running_batch, the only place it decays: sim/config.py DP_SCHEDULER_NOTE)."""
        if batch.decodes and not batch.prefills and not batch.preempted:
            self.decay(1)

    def decay(self, steps: int) -> None:
        """`steps` decode steps' decay of the new-token ratio, down to its floor."""
        cfg = self.config
        if self.new_token_ratio > cfg.min_new_token_ratio:
            self.new_token_ratio = max(
                cfg.min_new_token_ratio, self.new_token_ratio - steps * cfg.new_token_ratio_decay
            )

    def _preempt(self, victim: Sequence, batch: Batch) -> None:
        bs = self.blocks.block_size
        self.blocks.free_seq(victim.rid, victim.own_hashes(bs) if self.blocks.enable_prefix_caching else ())
        self.blocks.free_seq(("state", victim.rid))
        victim.num_computed = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        batch.preempted.append(victim)
        self.new_token_ratio = self.config.init_new_token_ratio  # SGLang resets its estimate after a retraction

    def _reserve_ok(self, seq: Sequence, new_blocks: int) -> bool:
        ratio = self.new_token_ratio
        if ratio <= 0:
            return True
        remaining = sum(s.output_len - s.num_output for s in self.running) + seq.output_len - seq.num_output
        free_tokens = (self.blocks.num_free - new_blocks) * self.blocks.block_size
        return free_tokens >= ratio * remaining

    def schedule(self) -> Batch:
        """Decide this step's batch, allocating blocks (and preempting) as it goes."""
        if self.config.mixed_prefill_decode:
            return self._schedule()
        # prefill first (SGLang): prompt tokens, if any can run, make a step of their own; else the decodes alone
        batch = self.prefill_batch()
        return batch if batch.prefills else self.decode_batch(batch.blocked)

    def prefill_batch(self) -> Batch:
        """Prefill first: the prompt chunks and admissions a step can take (no decodes); empty, with why the queue
        waits, when none can run."""
        running = self.running
        if self.waiting or any(s.num_output == 0 or s.num_tokens - s.num_computed != 1 for s in running):
            return self._after_decodes(Batch(), self.budget, running)
        return Batch()

    def decode_batch(self, blocked: str = BLOCKED_NONE) -> Batch:
        """Prefill first: a step of the running decodes alone (`blocked`: why the queue waits)."""
        batch = self._schedule(then_prefill=False)
        batch.blocked = blocked
        return batch

    def _schedule(self, then_prefill: bool = True) -> Batch:
        """Decodes first, then (then_prefill) prefill chunks and admissions in the tokens left (Sarathi-Serve)."""
        cfg, blocks, bs, w = self.config, self.blocks, self.blocks.block_size, self.window
        batch = Batch()
        budget = self.budget
        running = self.running
        k = cfg.spec_tokens
        spec = cfg.speculative
        # 1. decodes, oldest first; preempt from the tail when a block is missing
        if not k and self.decodes_at_once and self._decodes_at_once(batch, running, budget):
            budget -= len(batch.decodes)
            return self._after_decodes(batch, budget, running) if then_prefill else batch
        # (the batch's sums are kept in locals and added in the same order as one += per decode would)
        tables = blocks.tables
        grouped = blocks.grouped
        decodes = batch.decodes
        pairs_full = kv_full = dec_kv_full = pairs_window = kv_window = dec_kv_window = 0.0
        per_pair = 1 + k
        spec_pairs = k * (k + 1) / 2
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            computed = seq.num_computed
            if seq.num_output == 0 or seq.num_tokens - computed != 1:  # not decoding
                i += 1
                continue
            gain = 1
            if k:  # tokens this verify step keeps: 1 + the run of accepted drafts, drawn for this sequence
                rng = seq.spec_rng
                if rng is None:
                    rng = seq.spec_rng = spec.generator(cfg.spec_seed, seq.rid)
                gain = max(1, min(spec.draw(rng), seq.output_len - seq.num_output))
            if grouped:  # a block table per layer group; sliding groups first free what left the window
                blocks.trim(seq.rid, computed)
                if blocks.num_held(seq.rid) * bs < computed + gain:
                    while blocks.new_blocks_needed(seq.rid, computed + gain) > blocks.num_free:
                        victim = running.pop()
                        self._preempt(victim, batch)
                        if victim is seq:
                            break
                    if seq.num_computed == 0:
                        continue  # preempted itself
                    blocks.allocate(seq.rid, computed + gain)
            elif (len(table) if (table := tables.get(seq.rid)) is not None else 0) * bs < computed + gain:
                # needs another block
                while blocks.num_held(seq.rid) < blocks_for(seq.num_computed + gain, bs):
                    while blocks.num_free == 0:
                        victim = running.pop()
                        self._preempt(victim, batch)
                        if victim is seq:
                            break
                    if seq.num_computed == 0:  # preempted itself
                        break
                    blocks.allocate(
                        seq.rid, min(seq.num_computed + gain, (blocks.num_held(seq.rid) + blocks.num_free) * bs)
                    )
                if seq.num_computed == 0:
                    continue  # preempted itself: running shrank; index i now points past the end or at the next sequence
            if k:
                seq.next_tokens = gain
            decodes.append(seq)
            ctx = computed + 1
            pairs_full += ctx * per_pair + spec_pairs  # 1 + k query tokens (drafts verified in one pass)
            kv_full += ctx
            dec_kv_full += ctx
            if w:
                m = ctx if ctx < w else w
                pairs_window += m * per_pair
                kv_window += m
                dec_kv_window += m
            budget -= per_pair
            i += 1
        batch.pairs_full, batch.kv_tokens_full, batch.decode_kv_full = pairs_full, kv_full, dec_kv_full
        batch.pairs_window, batch.kv_tokens_window, batch.decode_kv_window = pairs_window, kv_window, dec_kv_window
        return self._after_decodes(batch, budget, running) if then_prefill else batch

    def _decodes_at_once(self, batch: Batch, running: list[Sequence], budget: int) -> bool:
        """Step 1 without speculative tokens when nothing can be preempted: every decode fits the token budget
        and a free block is there for each one that fills its last block. The same batch as the loop in
        schedule() builds (decodes in running order, blocks taken in that order); the sums are of integers,
        exact in floats in any order. False (nothing changed) when the loop is needed."""
        bs, w, blocks = self.blocks.block_size, self.window, self.blocks
        if blocks.grouped:
            return False  # sliding groups free and take blocks per sequence: the loop
        decodes = [s for s in running if s.num_output > 0 and s.num_tokens - s.num_computed == 1]
        if len(decodes) > budget:
            return False
        computed = [s.num_computed for s in decodes]
        tables = blocks.tables
        # a table whose blocks are all full: it holds at least the blocks of its c computed tokens, so only when
        # bs divides c can it hold no room for token c + 1
        crossing = [t for s, c in zip(decodes, computed) if not c % bs and len(t := tables[s.rid]) * bs <= c]
        if len(crossing) > blocks.num_free:
            return False
        if crossing:  # the blocks n one-block takes would take, in that order, taken at once
            for table, block in zip(crossing, blocks._take_free_many(len(crossing))):
                table.append(block)
        batch.decodes = decodes
        ctx_sum = float(sum(computed) + len(computed))
        batch.pairs_full = batch.kv_tokens_full = batch.decode_kv_full = ctx_sum
        if w:
            win = float(sum(c + 1 if c + 1 < w else w for c in computed))
            batch.pairs_window = batch.kv_tokens_window = batch.decode_kv_window = win
        return True

    def _after_decodes(self, batch: Batch, budget: int, running: list[Sequence]) -> Batch:
        """Steps 2 and 3 of schedule(): prefill chunks of running sequences, then admissions."""
        cfg, blocks, bs = self.config, self.blocks, self.blocks.block_size
        if self.rank_tokens and budget > self.rank_tokens:  # one DP rank's prompt tokens a step
            budget = self.rank_tokens
        # 2. running sequences still in prefill (chunked)
        for seq in running if len(batch.decodes) < len(running) else ():  # (none when every one decodes)
            if budget <= 0:
                break
            if seq.num_output > 0 and seq.num_tokens - seq.num_computed == 1:  # decoding
                continue
            room = budget
            remaining = seq.num_tokens - seq.num_computed
            if remaining > room and not cfg.chunked_prefill and remaining <= cfg.max_num_batched_tokens:
                continue  # not chunked: it runs whole in a later step
            n = remaining if remaining < room else room
            if blocks.grouped:
                blocks.trim(seq.rid, seq.num_computed)
            if cfg.chunk_whole_or_preempt and (len(running) > 1 or running[0] is not seq):
                # vLLM V1: the chunk's blocks are allocated whole or the newest running request is preempted (alone,
                # it shrinks to what fits below: vLLM's start-up check makes one request of max_model_len fit)
                restored = self._make_room(seq, n, batch)
                if restored is None:
                    break  # preempted itself: vLLM stops scheduling running requests for this step
                budget += restored
            else:
                if blocks.grouped:
                    fit = self._grouped_fit(seq, seq.num_computed, n)
                else:
                    fit = (blocks.num_held(seq.rid) + blocks.num_free) * bs - seq.num_computed
                if n > fit:
                    n = fit
                if n <= 0:
                    continue
            blocks.allocate(seq.rid, seq.num_computed + n)
            self._add_prefill(batch, seq, n)
            budget -= n
        # 3. admissions, FCFS (none in a step that preempted: vLLM V1 admits only when nothing was preempted)
        waiting = self.waiting
        passed_delay = self._passed_delay()
        if batch.preempted:
            return batch
        if waiting and not passed_delay:
            batch.blocked = BLOCKED_DELAY
            return batch
        remember = self.remember_prefix and not blocks.grouped
        ahead = self.receive_before
        if ahead is None:  # an idle engine's loop takes in every request queued so far
            for seq in reversed(waiting):
                if seq.received:
                    break
                seq.received = True
        while waiting:
            if len(running) >= cfg.max_num_seqs:
                batch.blocked = BLOCKED_SEQS
                break
            if budget <= 0:
                batch.blocked = BLOCKED_BUDGET
                break
            seq = waiting[0]
            if not seq.received:
                if ahead is not None and seq.arrival_at >= ahead:
                    batch.blocked = BLOCKED_AHEAD
                    break
                seq.received = True
            room = budget
            hashes = seq.block_hashes(bs) if blocks.enable_prefix_caching else ()
            if remember:  # (hit_used: hits on blocks in use, which take no free block)
                hit_blocks, hit_used, seq.prefix_memo = blocks.prefix_hit(hashes, seq.prefix_memo)
                have = blocks.num_held(seq.rid)
            else:
                hit_blocks = blocks.lookup_prefix(hashes)
            hashes = hashes[:hit_blocks] if hit_blocks < len(hashes) else hashes
            hit_tokens = hit_blocks * bs
            n = seq.num_tokens - hit_tokens
            if n > room:
                if not cfg.chunked_prefill and n <= cfg.max_num_batched_tokens:
                    batch.blocked = BLOCKED_BUDGET  # not chunked: the whole prompt waits for a step with room
                    break
                n = room
            sb = self.state_blocks
            if remember:  # new_blocks_needed(seq.rid, hit_tokens + n, hashes) from the remembered lookup
                need = _new_blocks(hit_tokens + n, bs, have, hit_blocks, hit_used) + sb
            else:
                need = blocks.new_blocks_needed(seq.rid, hit_tokens + n, hashes) + sb
            if need > blocks.num_free and not running:
                # nothing else will free memory: shrink the chunk to what fits (else it would wait forever)
                if blocks.grouped:
                    n = self._grouped_fit(seq, hit_tokens, n, hashes, sb)
                else:
                    n = min(n, (blocks.num_free - sb + hit_blocks) * bs - hit_tokens)
                if n > 0:
                    need = (
                        _new_blocks(hit_tokens + n, bs, have, hit_blocks, hit_used) + sb
                        if remember
                        else blocks.new_blocks_needed(seq.rid, hit_tokens + n, hashes) + sb
                    )
            if need > blocks.num_free or n <= 0:
                batch.blocked = BLOCKED_BLOCKS
                break
            # the reservation keeps room for the running sequences' outputs; with none running it would only hold the
            # candidate back from a pool it fits, for ever (nothing else frees memory): SGLang admits it then
            if running and not self._reserve_ok(seq, need):
                batch.blocked = BLOCKED_RESERVE
                break
            got = blocks.allocate(seq.rid, hit_tokens + n, hashes)
            if got is None:  # cannot happen after the check above; stay safe
                batch.blocked = BLOCKED_BLOCKS
                break
            if sb:
                blocks.allocate(("state", seq.rid), sb * bs)
            blocks.count_query(seq.num_tokens, got)
            seq.num_computed = got
            seq.prefix_memo = None  # (a later preemption gives it new hashes: nothing to remember)
            waiting.popleft()
            running.append(seq)
            batch.admitted.append(seq)
            self._add_prefill(batch, seq, n)
            budget -= n
        return batch

    def _make_room(self, seq: Sequence, n: int, batch: Batch) -> int | None:
        """Free blocks for `n` more prompt tokens of running `seq` by preempting the most recently admitted running
        sequences (vLLM V1 `Scheduler.schedule`: allocate_slots gives a chunk all its blocks or none, and a running
        request it fails for preempts `self.running.pop()` until it fits). None when `seq` preempted itself, else the
        step's token budget given back by decodes taken out of this step.

        vLLM walks its running list once, in order, so a victim behind `seq` was never charged to the budget; this
        scheduler charges decodes first (step 1), so it gives their tokens back (vLLM 0.32.0 does the same
        explicitly, `token_budget += restored`, where its priority policy can pick an already scheduled victim)."""
        blocks, running = self.blocks, self.running
        restored = 0
        while blocks.new_blocks_needed(seq.rid, seq.num_computed + n) > blocks.num_free:
            victim = running.pop()
            if victim in batch.decodes:
                restored += self._unschedule_decode(victim, batch)
            self._preempt(victim, batch)
            if victim is seq:
                return None
        return restored

    def _unschedule_decode(self, seq: Sequence, batch: Batch) -> int:
        """Take back a decode this step had scheduled (its sequence is being preempted): its share of the sums, and
        the tokens it held of the step's budget (returned: 1 + the speculative tokens)."""
        batch.decodes.remove(seq)
        k = self.config.spec_tokens
        ctx = seq.num_computed + 1
        batch.pairs_full -= ctx * (1 + k) + k * (k + 1) / 2
        batch.kv_tokens_full -= ctx
        batch.decode_kv_full -= ctx
        if self.window:
            m = min(ctx, self.window)
            batch.pairs_window -= m * (1 + k)
            batch.kv_tokens_window -= m
            batch.decode_kv_window -= m
        return 1 + k

    def _grouped_fit(self, seq: Sequence, start: int, n: int, hashes=(), extra: int = 0) -> int:
        """The most tokens m <= n past `start` that the free blocks cover in every layer group (0 if none)."""
        blocks = self.blocks
        free = blocks.num_free - extra
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if blocks.new_blocks_needed(seq.rid, start + mid, hashes) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _add_prefill(self, batch: Batch, seq: Sequence, n: int) -> None:
        p = seq.num_computed
        batch.prefills.append((seq, n))
        batch.pairs_full += n * p + n * (n + 1) / 2
        batch.kv_tokens_full += p + n
        if self.window:
            batch.pairs_window += _window_pairs(p, n, self.window)
            batch.kv_tokens_window += min(p + n, self.window)

    def rank_loads(self, batch: Batch) -> list[tuple]:
        """Each DP rank's share of `batch` (StepTimeModel.seconds' ranks): (tokens, decode kv full, decode kv window,
        prefill pairs full, prefill pairs window, prefill kv full, prefill kv window), before the step runs."""
        k, w = self.config.spec_tokens, self.window
        loads = [[0.0] * 7 for _ in range(self.dp_ranks)]
        extra = k * (k + 1) / 2
        for seq in batch.decodes:
            ctx = seq.num_computed + 1
            r = loads[seq.dp_rank]
            r[0] += 1 + k
            r[1] += ctx
            r[3] += ctx * k + extra  # the verify pass's query tokens beyond one a sequence
            if w:
                m = ctx if ctx < w else w
                r[2] += m
                r[4] += m * k
        for seq, n in batch.prefills:
            p = seq.num_computed
            r = loads[seq.dp_rank]
            r[0] += n
            r[3] += n * p + n * (n + 1) / 2
            r[5] += p + n
            if w:
                r[4] += _window_pairs(p, n, w)
                r[6] += min(p + n, w)
        return [tuple(r) for r in loads]

    def finish(self, seq: Sequence) -> None:
        """Remove a finished sequence and free its blocks."""
        self.running.remove(seq)
        self.blocks.free_seq(seq.rid)
        self.blocks.free_seq(("state", seq.rid))
