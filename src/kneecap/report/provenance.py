"""The top of every page: where the numbers came from (measured / simulated / planned), the exact
command line, and the environment manifest. Pure: summary dict in, document blocks out.
"""

from __future__ import annotations

import shlex

from kneecap.report.document import Banner, Block, Code, KeyValues, Paragraph

MAX_MANIFEST_ITEMS = 80


def _flag(summary: dict, name: str) -> bool | None:
    value = summary.get(name)
    return value if isinstance(value, bool) else None


SIMULATED_SERVER_MARK = "(simulated engine)"  # what `kneecap serve` answers on /version (serve/app.py)


def simulated_server(summary: dict) -> bool:
    """True when the server bench measured identified itself as kneecap's simulated engine: /version says
    `simulated: true` (kept as server.simulated) or its version string is `kneecap-serve X (simulated engine)`."""
    server = summary.get("server") if isinstance(summary.get("server"), dict) else {}
    version = server.get("version")
    return server.get("simulated") is True or (
        isinstance(version, str) and (SIMULATED_SERVER_MARK in version or version.startswith("kneecap-serve"))
    )


def source_banner(kind: str, summary: dict) -> Banner:
    """Measured vs simulated vs planned, from the kind and the model_executed/benchmark_executed flags."""
    model_executed = _flag(summary, "model_executed")
    benchmark_executed = _flag(summary, "benchmark_executed")
    flags = f"model_executed={model_executed}, benchmark_executed={benchmark_executed}"
    if kind == "plan":
        return Banner(
            "PLANNED — nothing was executed",
            "Every number on this page is arithmetic from the model config and the GPU datasheet.",
            "planned",
        )
    # a bench against `kneecap serve` was measured (benchmark_executed) though no model ran: the banner below says so
    measured_simulator = kind == "bench" and benchmark_executed is not False and simulated_server(summary)
    simulated = (
        kind == "simulate" or benchmark_executed is False or (model_executed is False and not measured_simulator)
    )
    if simulated:
        conflict = " (note: kind says bench but the flags say nothing ran on a real server)" if kind == "bench" else ""
        return Banner(
            "SIMULATED — not measured on a real server",
            "Numbers come from kneecap's simulated engine in virtual time (continuous batching, paged KV, "
            f"roofline step times); no model was executed. {flags}{conflict}",
            "simulated",
        )
    if kind == "bench" or (model_executed and benchmark_executed):
        server = summary.get("server") if isinstance(summary.get("server"), dict) else {}
        manifest = summary.get("manifest") if isinstance(summary.get("manifest"), dict) else {}
        target = summary.get("base_url") or server.get("base_url") or manifest.get("base_url")
        if simulated_server(summary):
            where = f" at {target}" if isinstance(target, str) else ""
            return Banner(
                "MEASURED against a simulated engine — no model ran",
                f"kneecap's HTTP client measured a live server{where}, but that server is `kneecap serve`: "
                "kneecap's simulated engine in real time (continuous batching, paged KV, roofline step "
                "times). The client's timings are real; the server's latency and throughput are the "
                f"simulator's. The server identified itself as {server.get('version') or 'simulated'}. "
                f"{flags}",
                "simulated",
            )
        engine = server.get("engine")
        if isinstance(target, str) and isinstance(engine, str):
            target = f"{target} ({engine}{', version ' + str(server['version']) if server.get('version') else ''})"
        where = f" against {target}" if isinstance(target, str) else ""
        return Banner(
            "MEASURED on a real server",
            f"Numbers were measured by kneecap's HTTP client{where}, with streaming timestamps per read. {flags}",
            "measured",
        )
    return Banner(
        "SOURCE UNKNOWN — measured or simulated is not recorded",
        f"This {kind} summary lacks the model_executed / benchmark_executed flags; treat its numbers with care.",
        "warning",
    )


def command_text(command: object) -> str | None:
    """The exact command line, as the user could paste it again."""
    if isinstance(command, str):
        return command
    if isinstance(command, (list, tuple)) and all(isinstance(a, str) for a in command):
        return shlex.join(command)
    return None


def flatten(prefix: str, value: object, out: list[tuple[str, str]]) -> None:
    """Nested dicts/lists -> (dotted.key, text) lines appended to out."""
    if isinstance(value, dict):
        for key, sub in value.items():
            flatten(f"{prefix}.{key}" if prefix else str(key), sub, out)
    elif isinstance(value, (list, tuple)) and not all(isinstance(v, (str, int, float)) for v in value):
        for i, sub in enumerate(value):
            flatten(f"{prefix}[{i}]", sub, out)
    elif isinstance(value, (list, tuple)):
        out.append((prefix, ", ".join(str(v) for v in value) or "—"))
    elif isinstance(value, int) and not isinstance(value, bool):
        out.append((prefix, f"{value:,}"))
    else:
        out.append((prefix, "—" if value is None else str(value)))


def facts_block(entries, caption: str) -> KeyValues | None:
    """(key, value) pairs as compact key/value lines, nested values flattened; None when there are none."""
    items: list[tuple[str, str]] = []
    for key, value in entries:
        flatten(key, value, items)
    return KeyValues(tuple(items), caption=caption, compact=True) if items else None


def manifest_blocks(summary: dict) -> list[Block]:
    """Command line first, then versions and environment as key/value lines."""
    manifest = summary.get("manifest")
    if not isinstance(manifest, dict):
        return [
            Paragraph(
                "No environment manifest in this summary: the command line, versions and "
                "environment that produced it are unknown.",
                "warning",
            )
        ]
    blocks: list[Block] = []
    command = command_text(manifest.get("command"))
    if command:
        blocks.append(Paragraph("Exact command line:"))
        blocks.append(Code(command))
    else:
        blocks.append(Paragraph("The manifest does not record the command line.", "warning"))
    items: list[tuple[str, str]] = []
    for key, value in manifest.items():
        if key == "command":
            continue
        flatten(str(key), value, items)
    if items:
        shown = items[:MAX_MANIFEST_ITEMS]
        caption = "Environment manifest" + (
            f" (first {MAX_MANIFEST_ITEMS} of {len(items)} entries)" if len(items) > MAX_MANIFEST_ITEMS else ""
        )
        blocks.append(KeyValues(tuple(shown), caption=caption, compact=True))
    return blocks


def missing_block(missing: tuple[str, ...]) -> list[Block]:
    if not missing:
        return []
    return [Paragraph("Not in this results folder, so not shown: " + "; ".join(missing) + ".", "muted")]
