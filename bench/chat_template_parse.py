"""Investigation, not product code: the CPU time vLLM 0.11.0's API server spends per /v1/chat/completions request
parsing the model's Jinja chat template (bench/short_prompt_pacing.py names it as the candidate for the dead time
before GPUStack's short-prompt runs start).

    $KNEECAP_VLLM_PYTHON bench/chat_template_parse.py TEMPLATE.jinja [TEMPLATE.jinja ...]
    $KNEECAP_VLLM_PYTHON bench/chat_template_parse.py --markdown bench/templates/*.jinja SDIST/examples/*.jinja

--markdown prints one table row per template and the host (CPU model, cores, load average before and after): what
bench/results/chat_template_parse.md holds and kneecap's --endpoint chat prices vLLM 0.11.0's requests with
(kneecap.sim.config.CHAT_TEMPLATE_PARSE_MS).

Needs only jinja2 (the vLLM venv has it; kneecap's does not). For each template it repeats what vLLM 0.11.0's
resolve_chat_template_kwargs (vllm/entrypoints/chat_utils.py:1575-1599) does on every request: a new
jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols), parse the whole template,
jinja2.meta.find_undeclared_variables (vLLM also adds its AssistantTracker extension, left out here), and prints the
process CPU milliseconds per call, beside one render of an already compiled template (what transformers' cached
apply_chat_template costs) for a 128-word user message. Templates to try: vLLM's examples/tool_chat_template_deepseekr1
.jinja and tool_chat_template_deepseekv3.jinja (in the vLLM sdists), a model's own chat_template from its
tokenizer_config.json or chat_template.jinja.
"""

from __future__ import annotations

import platform
import sys
import time

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.sandbox
from hostinfo import host


def _env():
    return jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )


def parse_ms(template: str, repeats: int = 200) -> float:
    """CPU ms per vLLM 0.11.0-style per-request parse of `template`."""
    t0 = time.process_time()
    for _ in range(repeats):
        jinja2.meta.find_undeclared_variables(_env().parse(template))
    return (time.process_time() - t0) / repeats * 1e3


def render_ms(template: str, repeats: int = 200) -> float:
    """CPU ms per render of the compiled template for one 128-word user message."""
    compiled = _env().from_string(template)
    messages = [{"role": "user", "content": "word " * 128}]
    try:
        compiled.render(messages=messages, add_generation_prompt=True, bos_token="")
    except Exception:  # a template that needs more than one user message (tools, a system turn): not timed
        return float("nan")
    t0 = time.process_time()
    for _ in range(repeats):
        compiled.render(messages=messages, add_generation_prompt=True, bos_token="")
    return (time.process_time() - t0) / repeats * 1e3


def main(argv: list[str]) -> int:
    markdown = "--markdown" in argv
    paths = [a for a in argv if a != "--markdown"]
    if not paths:
        print("error: name at least one chat template file; e.g. examples/tool_chat_template_deepseekr1.jinja")
        return 2
    if markdown:
        print(f"host before: {host()}; jinja2 {jinja2.__version__}, Python {platform.python_version()}\n")
        print("| template | chars | parse ms CPU per request | compiled render ms |")
        print("|---|---:|---:|---:|")
    for path in paths:
        with open(path, encoding="utf-8") as f:
            template = f.read()
        parse, render = parse_ms(template), render_ms(template)
        if markdown:
            print(f"| {path} | {len(template)} | {parse:.2f} | {render:.3f} |")
        else:
            print(f"{path}: {len(template)} chars, parse {parse:.2f} ms CPU per request, render {render:.3f} ms")
    if markdown:
        print(f"\nhost after: {host()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
