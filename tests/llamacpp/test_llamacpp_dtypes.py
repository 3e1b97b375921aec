"""`kneecap plan --model X.gguf` against what llama.cpp itself reports for real F16 and Q8_0 GGUF files.

The server's log (kept by the fixture, verbosity 4) has llama.cpp's own line
    llama_kv_cache: size =    2.00 MiB (  1024 cells,   2 layers,  4/4 seqs), K (f16):    1.00 MiB, V (f16):    1.00 MiB
(llama-kv-cache.cpp, "%7.2f MiB"; cells per stream, and with kv_unified false one stream per sequence, so
cells x streams = the -c context). kneecap's KV bytes per token x that context must print the same MiB, K and V
each half, in the cache type llama.cpp names. The weight bytes must be the file's tensor sizes, summed here from
each tensor's shape and the gguf package's GGML_QUANT_SIZES (block elements, block bytes), not from kneecap.
"""

from __future__ import annotations

import json
import re

import pytest

from clitools import run_cli

pytestmark = pytest.mark.slow

KV_LINE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
MIB = 1024**2


def _logged_kv(server) -> dict:
    lines = KV_LINE.findall(server.log_path.read_text(errors="replace"))
    assert len(lines) == 1, f"expected one llama_kv_cache size line, got {lines}"
    size, cells, layers, _seqs, streams, k_type, k_mib, v_type, v_mib = lines[0]
    return {
        "size": size,
        "tokens": int(cells) * int(streams),
        "layers": int(layers),
        "k_type": k_type,
        "k_mib": k_mib,
        "v_type": v_type,
        "v_mib": v_mib,
    }


def _file_tensor_bytes(path: str) -> tuple[int, set[str]]:
    gguf = pytest.importorskip("gguf")
    from gguf.constants import GGML_QUANT_SIZES

    total, types = 0, set()
    for t in gguf.GGUFReader(path).tensors:
        block, size = GGML_QUANT_SIZES[t.tensor_type]
        elements = 1
        for d in t.shape:
            elements *= int(d)
        assert elements % block == 0, t.name
        total += elements // block * size
        types.add(t.tensor_type.name.lower())
    return total, types


def _plan(server, *extra: str) -> dict:
    result = run_cli(
        "plan", "--model", server.model_path, "--gpu", "h100-sxm", "--context", str(server.ctx_size), "--json", *extra
    )
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("typed", ["llamacpp_f16", "llamacpp_q8_0"])
def test_plan_kv_size_is_what_llamacpp_logs(typed, request):
    server = request.getfixturevalue(typed)
    logged = _logged_kv(server.server)
    assert logged["tokens"] == server.ctx_size and logged["layers"] == 2
    assert logged["k_type"] == logged["v_type"] == server.cache_type
    kv_flag = () if server.cache_type == "f16" else ("--kv-dtype", server.cache_type)
    plan = _plan(server, *kv_flag)
    if server.cache_type == "f16":
        assert plan["kv_dtype"] in ("f16", "bf16")  # the default; 2 bytes per element either way
    else:
        assert plan["kv_dtype"] == server.cache_type
    per_token = plan["kv_bytes_per_token"]
    # by hand: 2 layers x 2 KV heads x head_dim 32 per K (and per V) row; f16: 64 elements x 2 B = 128 B;
    # q8_0: 64 / 32 blocks x 34 B = 68 B -> 2 layers x (K + V) = 512 B (f16) or 272 B (q8_0) per token
    assert per_token == {"f16": 512, "q8_0": 272}[server.cache_type]
    assert f"{per_token * logged['tokens'] / MIB:.2f}" == logged["size"]
    assert f"{per_token * logged['tokens'] / 2 / MIB:.2f}" == logged["k_mib"] == logged["v_mib"]


@pytest.mark.parametrize("typed", ["llamacpp_f16", "llamacpp_q8_0"])
def test_plan_weight_bytes_are_the_files_tensor_bytes(typed, request):
    server = request.getfixturevalue(typed)
    expected, types = _file_tensor_bytes(server.model_path)
    assert types == {"f32", server.weight_type}  # matrices in the weight type, norm vectors in F32
    plan = _plan(server)
    assert plan["weights_total_bytes"] == plan["ledger"]["weights_bytes"] == expected
    assert plan["weight_dtype"] == server.weight_type
    # llama.cpp counts the same tensors by type when it loads the file
    log = server.server.log_path.read_text(errors="replace")
    assert re.search(rf"llama_model_loader: - type +{server.weight_type}: +\d+ tensors", log), log[-2000:]
