"""The plan worksheet and the preflight table as text a person reads (rich tables).

Owns formatting only: it takes a Plan / levers / sweeps / EnginePool / Preflight and returns
renderables; it computes nothing new. rich is imported inside the functions so that
`kneecap plan --json` never loads it.
"""

from __future__ import annotations


from kneecap.model.kv import blocks_for, sequence_kv_bytes_per_gpu
from kneecap.plan.engines import EnginePool
from kneecap.plan.ledger import Plan, kv_factor_lines, whole_on_every_rank
from kneecap.plan.levers import Lever, skipped_levers
from kneecap.plan.preflight import Preflight
from kneecap.plan.sweeps import ContextPoint, TpPoint, paged_below_contiguous
from kneecap.units import GB, GiB, MiB, fmt_bytes


def _e9(num_bytes: int) -> str:
    return f"{num_bytes / GB:,.2f} × 10⁹"


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / GiB:,.2f}"


def _seqs(n: int) -> str:
    return f"{n:,} sequence" + ("" if n == 1 else "s")


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}" if whole else "-"


def gpu_siblings(name: str) -> list[str]:
    """Other catalog parts of the same GPU family ('h100-sxm' -> h100-pcie, h100-nvl): a bare family name
    such as --gpu h100 resolves to one of them, so the worksheet names the part it planned with."""
    from kneecap.hardware import list_gpus

    family = name.split("-")[0]
    return [g.name for g in list_gpus() if g.name != name and g.name.split("-")[0] == family]


def _table(title: str, columns: list[tuple[str, str]]):
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False, pad_edge=False)
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    return table


def plan_worksheet(
    plan: Plan,
    levers: list[Lever],
    tps: list[TpPoint],
    contexts: list[ContextPoint],
    engine: EnginePool | None = None,
    prefix_tokens: int | None = None,
) -> list:
    """Renderables, in the worked example's order: KV bytes/token, HBM ledger, allocators, binding, levers, TP, context."""
    from rich.text import Text

    d, m, g, L = plan.deployment, plan.deployment.model, plan.deployment.gpu, plan.ledger
    out: list = []
    out.append(
        Text(
            f"kneecap plan — {m.name} on {d.num_gpus}× {g.name} = {g.label} (TP={d.tp}, PP={d.pp}), "
            f"weights {d.weight_dtype}, KV {d.kv_dtype}, context {plan.context:,} "
            + (
                "(no --mean-context: every sequence at the full context)"
                if plan.worst_case
                else f"(mean {plan.mean_context:,})"
            ),
            style="bold",
        )
    )

    if siblings := gpu_siblings(g.name):
        out.append(
            Text(
                f"  GPU {g.name}: the {g.label} part; the other {g.name.split('-')[0]} parts in the catalog are "
                + ", ".join(f"--gpu {s}" for s in siblings)
            )
        )

    # 1. KV bytes per token
    per_tok = plan.kv_bytes_per_token
    lines = ["", "1. KV bytes per token (whole model, one sequence, all layers)"]
    lines += kv_factor_lines(plan)
    whole_seq = sequence_kv_bytes_per_gpu(m, plan.context, plan.kv_dtype_bytes, 1, 1, plan.block_size, paged=False)
    capped = (
        f" (its sliding-window layers hold only the last {m.sliding_window:,} tokens)"
        if "sliding_attention" in m.layer_types and m.sliding_window and m.sliding_window < plan.context
        else ""
    )
    lines.append(
        f"  = {per_tok:,} bytes = {fmt_bytes(per_tok)} per token per sequence;"
        f" a {plan.context:,}-token sequence carries {fmt_bytes(whole_seq)}{capped}"
    )
    if plan.kv_bytes_per_token_per_gpu != per_tok:
        lines.append(
            f"  per GPU at TP={d.tp}, PP={d.pp}: {plan.kv_heads_per_gpu} KV head(s) per rank"
            f"{' (replicated)' if plan.kv_replicated else ''} → {plan.kv_bytes_per_token_per_gpu:,} B per token"
        )
    if "full_attention" in m.layer_types or "sliding_attention" in m.layer_types:
        lines.append(
            f"  ({m.num_attention_heads} query heads do not appear: queries are recomputed every step; "
            f"only the {m.num_key_value_heads} KV heads are cached)"
        )
    if plan.state_bytes_per_sequence:
        lines.append(
            f"  + {fmt_bytes(plan.state_bytes_per_sequence)} fixed linear-attention state per sequence per GPU"
        )
    out.append(Text("\n".join(lines)))

    # 2. HBM: datasheet vs device, then the ledger
    hb = [
        "",
        "2. The HBM budget (per GPU)",
        f"  datasheet {g.datasheet_bytes / GB:,.0f} GB = {g.datasheet_bytes:,} B = {_gib(g.datasheet_bytes)} GiB"
        f" (GB = 10⁹ bytes, GiB = 2³⁰: planning in 'GB as GiB' invents "
        f"{(g.datasheet_bytes * GiB / GB - g.datasheet_bytes) / GB:,.1f} GB)",
    ]
    if g.device_bytes is not None:
        diff = g.device_bytes - g.datasheet_bytes
        hb.append(
            f"  driver reports {g.device_bytes:,} B = {_gib(g.device_bytes)} GiB "
            f"({'+' if diff >= 0 else '−'}{abs(diff) / GB:,.2f} GB vs the datasheet)"
        )
    else:
        hb.append("  driver-reported total: not in the catalog (UNCONFIRMED)")
    if g.framework_bytes is not None:
        hb.append(f"  PyTorch reports ≈ {_gib(g.framework_bytes)} GiB total capacity")
    acct = d.hbm if isinstance(d.hbm, str) else f"{d.hbm:,} B"
    hb.append(f"  planning with: {acct} = {L.hbm_bytes:,} B" + (f", mem-util {d.mem_util}" if d.mem_util != 1 else ""))
    out.append(Text("\n".join(hb)))
    t = _table("", [("Component", "left"), ("Bytes", "right"), ("GiB", "right"), ("% of HBM", "right")])
    params = d.params_override or m.total_params
    t.add_row("HBM (per GPU)", _e9(L.hbm_bytes), _gib(L.hbm_bytes), "100.0")
    if L.reserved_bytes:
        t.add_row(
            f"Left unused (mem-util {d.mem_util})",
            _e9(L.reserved_bytes),
            _gib(L.reserved_bytes),
            _pct(L.reserved_bytes, L.hbm_bytes),
        )
    from kneecap.model.weights import weight_bits

    if plan.weights_source.startswith("checkpoint (mixed"):
        wlabel = "Weights, as the checkpoint ships (mixed dtypes)"
    elif len(m.param_parts) > 1 and not d.params_override:
        wlabel = f"Weights, {params / 1e9:.4g}e9 at {d.weight_dtype} (embed/norms/lm_head as shipped)"
    else:
        wlabel = f"Weights, {params / 1e9:.4g}e9 × {weight_bits(d.weight_dtype) / 8:g} B ({d.weight_dtype})"
    if m.encoder_params and not d.params_override:
        wlabel += (
            " + vision tower: not loaded (--language-only)"
            if d.language_only
            else f" + {m.encoder_params / 1e9:.3g}e9 vision tower at bf16"
        )
    if d.num_gpus > 1:
        wlabel += f" / {d.num_gpus}"
        whole = whole_on_every_rank(d)
        if whole:
            wlabel += f", but {', '.join(whole)} whole on each GPU" + (" of a stage" if d.pp > 1 else "")
    t.add_row(wlabel, _e9(L.weights_bytes), _gib(L.weights_bytes), _pct(L.weights_bytes, L.hbm_bytes))
    over = (
        "Activations + workspace + graphs"
        if plan.pool_source == "ledger" and engine is None
        else "Kept by the engine (activation peak, non-torch, graphs"
        + (", margin)" if engine is not None and engine.sizing_margin_bytes else ")")
    )
    # (engine mode with a predicted profile run: the encoder's profile is in the activation peak it describes)
    predicted = engine is not None and engine.activation_profile is not None
    if d.vision_profile is not None and plan.pool_source == "ledger" and not predicted:
        images, peak, kept = d.vision_profile
        over += (
            f": the larger of the rest's and vLLM's start-up profile of the vision tower ({images} images at once,"
            f" {_gib(peak)} GiB), + its {_gib(kept)} GiB of cached outputs"
        )
    t.add_row(over, _e9(L.overhead_bytes), _gib(L.overhead_bytes), _pct(L.overhead_bytes, L.hbm_bytes))
    if plan.pool_source == "ledger" and d.frag_fraction > 0:
        t.add_row(
            f"Fragmentation headroom ({d.frag_fraction:g} of what's left)",
            _e9(L.fragmentation_bytes),
            _gib(L.fragmentation_bytes),
            _pct(L.fragmentation_bytes, L.hbm_bytes),
        )
    t.add_row(
        "KV cache pool", _e9(L.kv_pool_bytes), _gib(L.kv_pool_bytes), _pct(L.kv_pool_bytes, L.hbm_bytes), style="bold"
    )
    out.append(t)
    out.append(Text(pool_line(plan)))

    if engine is not None:
        out.append(engine_section(engine, plan))

    # 3. Contiguous vs paged
    bs = plan.block_size
    nblk = blocks_for(plan.mean_context, bs)
    per_gpu = " per GPU" if d.num_gpus > 1 else ""
    sec = [
        "",
        "3. Max concurrency, two allocators",
        f"  (a) contiguous, reserve {plan.context:,} tokens: {fmt_bytes(plan.seq_bytes_contiguous)} per sequence{per_gpu}"
        f" → {_seqs(plan.max_seqs_contiguous)}",
        f"  (b) paged, {bs}-token blocks{_overridden(plan)}: {plan.mean_context:,} tokens = {nblk:,} blocks = {nblk * bs:,} slots = "
        f"{fmt_bytes(plan.seq_bytes_paged)} per sequence{per_gpu} → {_seqs(plan.max_seqs_paged)}",
    ]
    if plan.worst_case:
        sec.append(
            f"  no --mean-context given: (b) assumes every sequence holds all {plan.context:,} tokens, the worst case."
            " Paging charges what a sequence really holds; at a typical mean context:"
        )
        sec += [f"      mean {mean:>6,} tokens → {_seqs(seqs)}" for mean, seqs in plan.typical_means()]
        sec.append("  pass --mean-context N (your traffic's mean prompt + output tokens) for the number to configure")
    elif plan.max_seqs_contiguous:
        sec.append(
            f"  ratio {plan.max_seqs_paged / plan.max_seqs_contiguous:.1f}×: nothing got faster, nothing was added;"
            " paging just does not reserve a length the request never reaches"
        )
    out.append(Text("\n".join(sec)))
    w = _table(
        "",
        [("Scheme", "left"), ("Waste per sequence", "right"), ("% of its allocation", "right"), ("Bounded by", "left")],
    )
    w.add_row(
        "Contiguous",
        fmt_bytes(plan.contiguous_waste_bytes),
        f"{100 * plan.contiguous_waste_fraction:.1f}%",
        "nothing — grows with the advertised context",
    )
    slots = nblk * bs
    w.add_row(
        "Paged",
        fmt_bytes(plan.paged_waste_bytes),
        f"{100 * (slots - plan.mean_context) / slots:.2f}%",
        f"≤ {plan.paged_waste_bound_tokens} tokens = {plan.paged_waste_bound_bytes / MiB:.2f} MiB, always",
    )
    out.append(w)

    # 4. Binding
    cap = plan.compute_batch_cap
    if plan.binding == "hbm" and plan.worst_case:
        typical = plan.typical_means()
        example = next((f"; at a {mean:,}-token mean, {seqs:,}" for mean, seqs in typical if mean == 2000), "")
        text = (
            f"\n4. HBM binds{'' if cap is None else f' ({plan.max_seqs_paged:,} < compute cap {cap:,})'}. "
            f"Only {plan.max_concurrency:,} sequences fit if every one holds {plan.context:,} tokens{example}."
            " The number to configure (vLLM --max-num-seqs, SGLang --max-running-requests) depends on your"
            " mean context: pass --mean-context N."
        )
    elif plan.binding == "hbm":
        why = f"{plan.max_seqs_paged:,} < compute cap {cap:,}" if cap is not None else "no compute cap given"
        text = (
            f"\n4. HBM binds ({why}). Configure max concurrent sequences = {plan.max_concurrency:,}"
            f" (vLLM --max-num-seqs, SGLang --max-running-requests)."
        )
    else:
        text = (
            f"\n4. Compute binds: the cap of {cap:,} is below the {plan.max_seqs_paged:,} sequences memory holds;"
            " buy per-step speed, not memory."
        )
    out.append(Text(text))

    # 5. Levers
    at = f"max seqs at {plan.mean_context:,} tokens per sequence" + (", the worst case" if plan.worst_case else "")
    lt = _table(
        f"\n5. Levers ({at}; each change is flags to add to this command)",
        [
            ("Lever", "left"),
            ("Change", "left"),
            ("KV pool (GiB)", "right"),
            ("Max seqs", "right"),
            ("× base", "right"),
            ("GPUs", "right"),
            ("Note", "left"),
        ],
    )
    lt.add_row("(base)", "", _gib(L.kv_pool_bytes), f"{plan.max_seqs_paged:,}", "1.0", str(d.num_gpus), "")
    for lv in levers:
        lt.add_row(
            lv.name, lv.change, _gib(lv.kv_pool_bytes), f"{lv.max_seqs:,}", f"{lv.gain:.1f}", str(lv.num_gpus), lv.note
        )
    out.append(lt)
    out += [Text(f"  not offered — {why}") for why in skipped_levers(plan)]
    if prefix_tokens is None:
        out.append(Text("  prefix sharing: pass --prefix-tokens N (a shared system prompt) to price it"))

    # 6. TP sweep
    if tps:
        tt = _table(
            f"\n6. Tensor parallelism (the trap beyond the KV-head count; {at})",
            [
                ("TP", "right"),
                ("KV heads per GPU", "right"),
                ("KV pool (GiB)", "right"),
                ("Max seqs", "right"),
                ("Gain over previous", "right"),
                ("vs TP=1", "right"),
            ],
        )
        first = next((p.max_seqs for p in tps if p.fits and p.max_seqs), None)
        mla_only = set(m.layer_types) <= {"mla", "linear_attention"}
        for p in tps:
            heads = ("whole latent" if mla_only else str(p.kv_heads_per_gpu)) + (
                " (replicated)" if p.replicated else ""
            )
            if not p.fits:
                tt.add_row(str(p.tp), heads, "weights do not fit", "0", "—", "—")
                continue
            tt.add_row(
                str(p.tp),
                heads,
                _gib(p.kv_pool_bytes),
                f"{p.max_seqs:,}",
                "—" if p.gain is None else f"{p.gain:.2f}×",
                f"{p.max_seqs / first:.1f}×" if first else "—",
            )
        out.append(tt)
        rep = [p for p in tps if p.replicated and p.fits and "mla" not in m.layer_types]
        if rep:
            out.append(
                Text(
                    f"  With num_key_value_heads = {m.num_key_value_heads}, TP={m.num_key_value_heads} already puts one KV "
                    f"head per rank; beyond it the cache is replicated and only the weight shards shrink."
                )
            )
        elif "mla" in m.layer_types:
            out.append(Text("  MLA: every rank keeps the whole latent, so TP only frees weight memory."))

    # 7. Context sweep
    ct = _table(
        "\n7. Advertised context",
        [
            ("Context", "right"),
            ("Contiguous bytes/seq", "right"),
            ("Contiguous max seqs", "right"),
            ("Paged max seqs", "right"),
        ],
    )
    for c in contexts:
        ct.add_row(
            f"{c.context:,}" + (" (model max)" if c.model_max else ""),
            fmt_bytes(c.seq_bytes_contiguous),
            f"{c.contiguous:,}",
            f"{c.paged:,}",
        )
    out.append(ct)
    top = m.max_position_embeddings
    if top and plan.context > top:
        out.append(Text(f"  --context {plan.context:,} exceeds the model's advertised maximum of {top:,} tokens"))
    if why := paged_below_contiguous(plan, contexts):
        out.append(Text(f"  {why}"))
    notes = [n for n in plan.notes if engine is None or n not in engine.notes]  # the engine section printed those
    if notes:
        out.append(Text("\nNotes:\n" + "\n".join(f"  - {n}" for n in notes)))
    return out


def pool_line(plan: Plan) -> str:
    """The pool in blocks and tokens, as arithmetic that holds: blocks x block for one kind of layer; for vLLM's
    layer groups the token slots and the tokens of whole requests of the plan's context (kv_capacity_tokens)."""
    blocks, bs, g = plan.num_kv_blocks, plan.block_size, plan.kv_groups
    if g is None:
        return f"  pool = {blocks:,} blocks of {bs} tokens = {blocks * bs:,} tokens"
    groups = sum(n for _, n in g.groups)
    return (
        f"  pool = {blocks:,} blocks of {bs} tokens ({blocks:,} × {bs} = {blocks * bs:,} token slots, shared by "
        f"{groups} layer groups); a {plan.context:,}-token request takes {g.blocks_per_request(plan.context):,} "
        f"of them, so the pool holds {plan.kv_capacity_tokens:,} tokens of such requests"
    )


# what SGLang's start-up logs published with a URL show in use before the weights load (their catalog total less
# "Load weight begin. avail mem"; tests/plan/data/sglang_preload_logs.json, which tests/plan/test_plan_sglang_preload.py
# holds this range to)
SGLANG_PRELOAD_GIB_PUBLISHED = "0.38-0.60 GiB at TP 1, 0.86-2.46 GiB at TP 4 to 16"
# the figure each engine logs for its weights as loaded, and what PyTorch's caching allocator counts in it
_LOADED_AS = {
    "vllm": ("vLLM", "'Model loading took'", "blocks"),  # torch.cuda.memory_allocated once the load is over
    "sglang": ("SGLang", "'Load weight end' mem usage", "segments"),  # the free-memory drop after empty_cache
}


def _as_loaded(engine: EnginePool) -> str:
    """What follows "weights X GiB" in both engines' sections: what the load holds beside the weights (RoPE caches,
    vLLM's MXFP4 padding, the caching allocator's share), summed to the figure the engine logs."""
    name, logged, counts = _LOADED_AS[engine.engine]
    loaded = engine.weights_bytes + engine.expert_pad_bytes + engine.rope_cache_bytes + engine.load_extra_bytes
    out = ""
    if engine.rope_cache_bytes:
        caches = "caches" if " + " in engine.rope_caches else "cache"
        out += f" + RoPE cos/sin {caches} {engine.rope_cache_bytes / 2**20:,.0f} MiB ({engine.rope_caches})"
    if engine.load_extra_bytes:
        out += (
            f" + {engine.load_extra_bytes / 2**20:,.1f} MiB as {name} allocates them (vocabulary padded to 64 rows,"
            f" tensors every GPU keeps whole, PyTorch's allocator {counts})"
        )
    if engine.rope_cache_bytes or engine.expert_pad_bytes or engine.load_extra_bytes:
        out += f" = {_gib(loaded)} GiB ({logged})"
    return out


def engine_section(engine: EnginePool, plan: Plan | None = None):
    from rich.text import Text

    lines = [
        "",
        f"Engine model: {engine.engine} {engine.version} (docs/engine-model.md)",
        f"  total {_gib(engine.total_bytes)} GiB × {engine.fraction} = {_gib(engine.budget_bytes)} GiB budget;"
        f" weights {_gib(engine.weights_bytes)} GiB",
    ]
    if engine.pool_given:
        lines[-1] = (
            f"  KV pool as the engine logged it (--kv-pool-gib): {_gib(engine.kv_pool_bytes)} GiB, counted as "
            + (
                (
                    "vLLM lays it out"
                    + (
                        " (its hybrid allocator keeps Mamba / linear-attention state blocks in it)"
                        if "linear_attention" in engine.layout
                        else ""
                    )
                )
                if engine.engine == "vllm"
                else "SGLang lays it out (attention KV only; a Mamba state pool apart)"
            )
        )
    elif engine.engine == "vllm":
        if engine.expert_pad_bytes:
            lines[-1] += f" + {_gib(engine.expert_pad_bytes)} GiB: {engine.experts_note}"
        elif engine.experts_note:
            lines[-1] += f" ({engine.experts_note})"
        lines[-1] += _as_loaded(engine)
        lines.append(
            f"  − activation peak {_gib(engine.activation_bytes)} − non-torch {_gib(engine.non_torch_bytes)}"
            f" − CUDA graphs {_gib(engine.cudagraph_bytes)}"
            + (f" − kept free after warm-up {_gib(engine.sizing_margin_bytes)}" if engine.sizing_margin_bytes else "")
            + f" GiB = KV {_gib(engine.kv_pool_bytes)} GiB"
        )
        if engine.load_note and not engine.load_extra_bytes:
            lines.append(f"    weights as loaded: {engine.load_note}")
        if engine.activation_source:
            lines.append(f"    activation peak: {engine.activation_source}")
        if engine.non_torch_source:
            lines.append(f"    non-torch: {engine.non_torch_source}")
        if engine.cudagraph_source:
            lines.append(f"    CUDA graphs: {engine.cudagraph_source}")
    else:  # SGLang: mem_fraction_static of the memory free before the weights load, less what the load takes
        lines[-1] = (
            f"  (total {_gib(engine.total_bytes)} − in use before the weights {_gib(engine.non_torch_bytes)}) GiB"
            f" × {round(engine.fraction, 3):g} = {_gib(engine.budget_bytes)} GiB budget"
        )
        if engine.fraction_source == "sglang default":
            lines.append(f"    mem_fraction_static {round(engine.fraction, 3):g}: {engine.fraction_note}")
        if not engine.non_torch_bytes:
            lines.append(
                "    in use before the weights: not known, 0 taken (the CUDA context, NCCL and custom all-reduce:"
                f" {SGLANG_PRELOAD_GIB_PUBLISHED} in published logs, by GPU, TP and release; docs/engine-model.md);"
                " pass --non-torch-gib = total − your log's 'Load weight begin. avail mem'"
            )
        lines.append(f"  − weights {_gib(engine.weights_bytes)} GiB{_as_loaded(engine)}")
        if engine.state_pool_bytes:
            lines.append(f"  − Mamba state pool {_gib(engine.state_pool_bytes)} GiB")
        lines.append(
            f"  = KV {_gib(engine.kv_pool_bytes)} GiB, whole tokens (activations and graphs live in the other"
            f" {1 - engine.fraction:.2f} of the free memory)"
        )
    dp = engine.dp_attention_ranks
    if dp:  # SGLang --enable-dp-attention: every figure above is one DP rank's, each rank logs its own pool
        lines.insert(
            2,
            f"  per DP rank: each of the {dp} GPUs is a DP rank with its own pool, sized as below from the weights"
            " it holds",
        )
        lines.append(
            f"  each of the {dp} DP ranks would log (its own pool; {dp} × {engine.log_kv_cache_tokens:,} ="
            f" {engine.log_kv_cache_tokens_all_ranks:,} tokens over the ranks):"
        )
    else:
        lines.append("  the engine would log:")
    lines += [f"    {line}" for line in engine.log_lines]
    lines.append(
        f"  kneecap's capacity (its own count, not a line the engine prints): {engine.kv_capacity_tokens:,} tokens"
        + (f" per DP rank, {dp * engine.kv_capacity_tokens:,} over the {dp} ranks" if dp else "")
    )
    if engine.capacity_explained:
        lines.append(f"    why they differ: {engine.capacity_explained}")
    if plan is not None and plan.kv_groups is not None and plan.mean_context < plan.context:
        per = plan.kv_groups.blocks_per_request(plan.mean_context, in_flight=1)
        lines.append(
            f"    at a {plan.mean_context:,}-token mean context a sequence holds {per:,} blocks over the "
            f"groups: {plan.max_seqs_paged:,} sequences at once (section 3)"
        )
    lines += [f"  note: {note}" for note in engine.notes]
    return Text("\n".join(lines))


def preflight_table(result: Preflight) -> list:
    from rich.text import Text

    title = Text(
        f"Preflight: {result.kv_capacity_tokens:,} KV tokens ({result.source}), ISL {result.isl:,} + OSL {result.osl:,}"
    )
    t = _table(
        "",
        [
            ("C", "right"),
            ("Peak tokens", "right"),
            ("Steady tokens", "right"),
            ("Headroom", "right"),
            ("Verdict", "left"),
        ],
    )
    style = {"fits": "green", "tight": "yellow", "exceeds": "red"}
    for lv in result.levels:
        t.add_row(
            f"{lv.concurrency:,}",
            f"{lv.peak_tokens:,}",
            f"{lv.steady_tokens:,}",
            f"{lv.headroom_tokens:,}",
            lv.verdict,
            style=style[lv.verdict],
        )
    out: list = [
        title,
        t,
        Text(
            f"max safe concurrency: {result.max_safe_concurrency:,}"
            f" (peak {result.isl + result.osl:,} tokens per sequence, in whole {result.block_size}-token blocks)"
        ),
    ]
    fixes = [f"  C={lv.concurrency:,} {lv.verdict}: {lv.remedy.text}" for lv in result.levels if lv.remedy]
    if fixes:
        out.append(Text("What would make it fit:\n" + "\n".join(fixes)))
    if any(lv.verdict == "tight" for lv in result.levels):
        out.append(
            Text(
                "tight: only the steady state fits (ISL + OSL/2 per sequence); expect preemption when "
                "requests start together."
            )
        )
    out += [Text(f"note: {n}") for n in result.notes]
    return out


def print_renderables(renderables: list) -> None:
    """Print to stdout with rich, wide enough for the tables when stdout is not a terminal."""
    import sys

    from rich.console import Console

    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120, highlight=False)
    for r in renderables:
        console.print(r)


def _overridden(plan) -> str:
    """Words after the block size where the engine overrides the user's --block-size (the notes say why)."""
    if plan.block_size_requested is None:
        return ""
    return f" (the engine overrides --block-size {plan.block_size_requested}; see the notes)"
