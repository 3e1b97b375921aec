"""A parsed trace's rows, whatever the format (kneecap.workload.traces, kneecap.workload.agentic read them)."""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.workload import TRACE_BLOCK_TOKENS

BAILIAN_BLOCK_TOKENS = 16  # the Qwen-Bailian traces hash 16-token blocks (their README)


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace, as the file says it (timestamp in seconds, lengths in tokens)."""

    line: int  # 1-based line in the file (the CSV header is line 1)
    timestamp_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None  # Mooncake, Qwen-Bailian, Weka agentic
    key: int | None = None  # sessions (Qwen-Bailian's chat_id, a Weka request's place): this request's id
    after_keys: tuple[int, ...] = ()  # the requests whose answers must be back before it goes (none: a root)
    think_s: float = 0.0  # the user's or agent's time between the last of those answers and this request


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its rows in file order, and rows the format marks as failed (BurstGPT)."""

    source: str
    format: str  # "mooncake" | "bailian" | "weka" | "burstgpt"
    rows: tuple[TraceRow, ...]
    failed_rows: tuple[int, ...] = ()  # lines of BurstGPT rows with 0 response tokens (not replayable)
    hash_block_tokens: int | None = None  # tokens a hash id stands for, where the file says (Weka's block_size)

    @property
    def block_tokens(self) -> int:
        """Tokens one hash id stands for."""
        return self.hash_block_tokens or (BAILIAN_BLOCK_TOKENS if self.format == "bailian" else TRACE_BLOCK_TOKENS)
