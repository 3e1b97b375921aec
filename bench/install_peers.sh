#!/usr/bin/env bash
# Install the peer load generators that bench/compare_clients.py measures kneecap against,
# into their OWN virtualenv under bench/.peers/ (gitignored), never into the project's .venv.
#
#   vLLM:   `vllm bench serve`'s code (vllm/benchmarks/**) taken from the vllm wheel, unpacked
#           without installing vllm itself (torch/CUDA are not needed to run the client side);
#           bench/peer_vllm.py stubs the few vllm modules the client imports but never uses here.
#   aiperf: NVIDIA AIPerf, installed from PyPI (pure Python).
#
# Versions are pinned so that measurements can be repeated. Needs network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")"
VLLM_VERSION="${VLLM_VERSION:-0.33.0}"
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
PY="${PYTHON:-python3}"

mkdir -p .peers
if [ ! -x .peers/venv/bin/python ]; then
  "$PY" -m venv .peers/venv
  .peers/venv/bin/pip install -q --upgrade pip
fi
# aiperf brings aiohttp, numpy, tqdm, regex, transformers: also all that vLLM's client needs.
.peers/venv/bin/pip install -q "aiperf==${AIPERF_VERSION}" aiohttp numpy tqdm regex

if [ ! -f ".peers/vllm_src/vllm/benchmarks/serve.py" ]; then
  .peers/venv/bin/pip download -q "vllm==${VLLM_VERSION}" --no-deps -d .peers/wheels
  mkdir -p .peers/vllm_src
  .peers/venv/bin/python - "$VLLM_VERSION" <<'EOF'
import glob, sys, zipfile
wheel = sorted(glob.glob(f".peers/wheels/vllm-{sys.argv[1]}-*.whl"))[-1]
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if n.startswith("vllm/benchmarks/")]
    zf.extractall(".peers/vllm_src", names)
print(f"unpacked {len(names)} files of vllm/benchmarks from {wheel}")
EOF
fi
# aiperf needs a Hugging Face tokenizer to build its synthetic prompts; the hub is not reachable
# here, so write a local byte-level one (256 byte tokens, no merges) with the `tokenizers` package.
if [ ! -f .peers/tokenizer/tokenizer.json ]; then
  mkdir -p .peers/tokenizer
  .peers/venv/bin/python - <<'PYEOF'
import json
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.save(".peers/tokenizer/tokenizer.json")
with open(".peers/tokenizer/tokenizer_config.json", "w") as fh:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1000000}, fh)
PYEOF
fi
echo "peers ready: $(.peers/venv/bin/python -c 'import aiperf, importlib.metadata as m; print("aiperf", m.version("aiperf"))'), vllm ${VLLM_VERSION} benchmarks in bench/.peers/vllm_src"
