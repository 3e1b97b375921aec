"""Investigation, not product code: does PyTorch's caching allocator explain the weights vLLM logs beyond the tensors?

    python bench/vllm_load_allocation.py

A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, default settings: requests rounded to
512 B; requests over 1 MiB take the large pool, whose new segments are 20 MiB for requests under 10 MiB and rounded up
to 2 MiB otherwise; a block is split only when more than 1 MiB would remain, else the whole block counts as
allocated; best fit; adjacent free blocks coalesce) run over the tensors
vLLM allocates while it builds a model, in construction order. Prints the allocated bytes after the load (what
"Model loading took" reads: vLLM's DeviceMemoryProfiler, platforms/cuda.py get_current_memory_usage:
torch.cuda.max_memory_allocated after reset_peak_memory_stats) against the plain sum of the tensors, for the vLLM
start-up-log records of tests/plan/data/engine_startup_logs.json. The tensor lists (shapes per TP rank, construction
order, the RoPE caches' float32 temporaries) are written by hand from vLLM 0.19.0's model files for these models only.
"""

MiB = 2**20


def rnd(n):
    return max(512, (n + 511) // 512 * 512)


class Block:
    def __init__(s, seg, off, size, free):
        s.seg, s.off, s.size, s.free = seg, off, size, free


class Alloc:
    def __init__(s):
        s.blocks = []
        s.allocated = 0
        s.nseg = 0

    def malloc(s, n):
        n = rnd(n)
        if n <= MiB:
            s.allocated += n
            return ("small", n)
        cand = [b for b in s.blocks if b.free and b.size >= n]
        if cand:
            b = min(cand, key=lambda b: (b.size, b.seg, b.off))
        else:
            size = 20 * MiB if n < 10 * MiB else (n + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
            b = Block(s.nseg, 0, size, True)
            s.nseg += 1
            s.blocks.append(b)
        if b.size - n > MiB:
            rest = Block(b.seg, b.off + n, b.size - n, True)
            s.blocks.append(rest)
            b.size = n
        b.free = False
        s.allocated += b.size
        return b

    def release(s, b):
        if isinstance(b, tuple):
            s.allocated -= b[1]
            return
        b.free = True
        s.allocated -= b.size
        # coalesce with free neighbours in the same segment
        seg = sorted((x for x in s.blocks if x.seg == b.seg), key=lambda x: x.off)
        merged = []
        for x in seg:
            if merged and merged[-1].free and x.free:
                merged[-1].size += x.size
                s.blocks.remove(x)
            else:
                merged.append(x)


def rope_ops(rows, dim, scaled=False, B=2):
    """base.py: inv_freq, t (, t / factor), freqs, cos, sin, cat (fp32), free temporaries, .to(bf16), free fp32."""
    return (
        [("a", "inv", dim // 2 * 4), ("a", "t", rows * 4)]
        + ([("a", "t2", rows * 4), ("f", "t")] if scaled else [])
        + [
            ("a", "freqs", rows * dim // 2 * 4),
            ("a", "cos", rows * dim // 2 * 4),
            ("a", "sin", rows * dim // 2 * 4),
            ("a", "cache32", rows * dim * 4),
        ]
        + [("f", k) for k in ("inv", "t2" if scaled else "t", "freqs", "cos", "sin")]
        + [("a", None, rows * dim * B), ("f", "cache32")]
    )


def run(ops):
    a = Alloc()
    named = {}
    plain = 0
    for op in ops:
        if isinstance(op, int):
            a.malloc(op)
            plain += rnd(op)
        elif op[0] == "a":
            h = a.malloc(op[2])
            if op[1]:
                named[op[1]] = h
            else:
                plain += rnd(op[2])
        else:
            a.release(named.pop(op[1]))
    return a.allocated, plain


def dense(
    h, heads, kv, hd, inter, layers, vocab, tied, tp=1, bias=False, ropes=(), norms=2, qknorm=False, B=2, prefix=()
):
    v = -(-vocab // (64 * tp)) * 64 * tp // tp  # VocabParallelEmbedding pads to 64 x tp
    ops = list(prefix) + [v * h * B]
    for i in range(layers):
        ops += [(heads + 2 * kv) // tp * hd * h * B] + ([(heads + 2 * kv) // tp * hd * B] if bias else [])
        ops += [heads // tp * hd * h * B]
        if qknorm:
            ops += [hd * B, hd * B]
        for at, rows, dim, scaled in ropes:
            if at == i:
                ops += rope_ops(rows, dim, scaled)
        ops += [2 * inter // tp * h * B, inter // tp * h * B] + [h * B] * norms
    ops += [h * B]
    if not tied:
        ops += [v * h * B]
    return ops


def siglip(layers=27, h=1152, inter=4304, patch=14, img=896, text_h=3840, B=2):
    n = (img // patch) ** 2
    ops = [h * 3 * patch * patch * B, h * B, n * h * B, n * 8]
    for _ in range(layers):
        ops += [
            3 * h * h * B,
            3 * h * B,
            h * h * B,
            h * B,
            h * B,
            h * B,
            inter * h * B,
            inter * B,
            h * inter * B,
            h * B,
            h * B,
            h * B,
        ]
    ops += [h * B, h * B, h * text_h * B, h * B]
    return ops


models = {  # name: (ops, logged 'Model loading took' GiB)
    "llama-3.1-8b tp1": (dense(4096, 32, 8, 128, 14336, 32, 128256, False, ropes=[(0, 131072, 128, False)]), 14.99),
    "llama-3.1-8b tp2": (
        dense(4096, 32, 8, 128, 14336, 32, 128256, False, tp=2, ropes=[(0, 131072, 128, False)]),
        7.51,
    ),
    "llama-3.1-8b tp4": (
        dense(4096, 32, 8, 128, 14336, 32, 128256, False, tp=4, ropes=[(0, 131072, 128, False)]),
        3.77,
    ),
    "qwen2.5-7b tp1": (
        dense(3584, 28, 4, 128, 18944, 28, 152064, False, bias=True, ropes=[(0, 32768, 128, False)]),
        14.25,
    ),
    "qwen2.5-7b tp2": (
        dense(3584, 28, 4, 128, 18944, 28, 152064, False, tp=2, bias=True, ropes=[(0, 32768, 128, False)]),
        7.12,
    ),
    "qwen2.5-7b tp4": (
        dense(3584, 28, 4, 128, 18944, 28, 152064, False, tp=4, bias=True, ropes=[(0, 32768, 128, False)]),
        3.55,
    ),
    "qwen3-8b tp1": (
        dense(4096, 32, 8, 128, 12288, 36, 151936, False, qknorm=True, ropes=[(0, 40960, 128, False)]),
        15.27,
    ),
    "qwen3-0.6b tp1": (
        dense(1024, 16, 8, 128, 3072, 28, 151936, True, qknorm=True, ropes=[(0, 40960, 128, False)]),
        1.12,
    ),
    "qwen3-32b tp1": (
        dense(5120, 64, 8, 128, 25600, 64, 151936, False, qknorm=True, ropes=[(0, 40960, 128, False)]),
        61.03,
    ),
    "qwen3-32b tp2": (
        dense(5120, 64, 8, 128, 25600, 64, 151936, False, tp=2, qknorm=True, ropes=[(0, 40960, 128, False)]),
        30.59,
    ),
    "codellama-7b": (dense(4096, 32, 32, 128, 11008, 32, 32016, False, ropes=[(0, 16384, 128, False)]), 12.56),
    "gemma-7b": (dense(3072, 16, 16, 256, 24576, 28, 256000, True, ropes=[(0, 8192, 256, False)]), 15.91),
    "gemma-2-2b": (dense(2304, 8, 4, 256, 9216, 26, 256000, True, norms=4, ropes=[(0, 8192, 256, False)]), 4.9),
    "gemma-2-9b": (dense(3584, 16, 8, 256, 14336, 42, 256000, True, norms=4, ropes=[(0, 8192, 256, False)]), 17.22),
    "gemma-2-27b": (dense(4608, 32, 16, 128, 36864, 46, 256000, True, norms=4, ropes=[(0, 8192, 128, False)]), 50.72),
    "gemma-3-12b": (
        dense(
            3840,
            16,
            8,
            256,
            15360,
            48,
            262208,
            True,
            norms=4,
            qknorm=True,
            prefix=siglip(text_h=3840),
            ropes=[(0, 131072, 256, False), (5, 1048576, 256, True)],
        ),
        23.31,
    ),
    "gemma-3-27b": (
        dense(
            5376,
            32,
            16,
            128,
            21504,
            62,
            262208,
            True,
            norms=4,
            qknorm=True,
            prefix=siglip(text_h=5376),
            ropes=[(0, 131072, 128, False), (5, 1048576, 128, True)],
        ),
        51.45,
    ),
}
for k, (ops, logged) in models.items():
    got, plain = run(ops)
    print(
        f"{k:18s} plain {plain / 2**30:8.4f}  allocator {got / 2**30:8.4f} GiB (+{(got - plain) / MiB:5.1f} MiB)"
        + f"  logged {logged}"
    )
