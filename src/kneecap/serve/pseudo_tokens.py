"""The simulated server's tokenizer: deterministic, documented, exact for kneecap's own prompts.

Rule: a text prompt has one token per whitespace-separated word (`len(text.split())`, at least 1);
a prompt given as token ids has one token per id. Chat requests count the words of every message's
content (no chat-template tokens). Generated text is filler: token i of a response is " " + one word
of FILLER_WORDS, so the same rule counts it back exactly. Token ids of a word are a stable hash
(crc32) into [1000, 33000), so /tokenize answers the same ids on every machine. Owns nothing else.
"""

from __future__ import annotations

import zlib
from typing import Sequence

VOCAB_LOW = 1000  # ids below are "special tokens" in most vocabularies; keep clear of them
VOCAB_SIZE = 32000

FILLER_WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "engines",
    "batch",
    "tokens",
    "in",
    "paged",
    "blocks",
)
FILLER_PIECES = tuple(" " + w for w in FILLER_WORDS)  # one output token each
DETOKENIZE_WORDS = FILLER_WORDS + (
    "and",
    "of",
    "to",
    "is",
    "for",
    "on",
    "with",
    "as",
    "at",
    "by",
    "from",
    "this",
    "that",
    "it",
    "be",
    "or",
)


def encode_text(text: str) -> list[int]:
    """Token ids of a text: one id per word, crc32(word) mapped into the vocabulary."""
    words = text.split() or [""]
    return [VOCAB_LOW + zlib.crc32(w.encode("utf-8")) % (VOCAB_SIZE - VOCAB_LOW) for w in words]


def decode_ids(ids: Sequence[int]) -> str:
    """Text for token ids: one word per id (id modulo a small word list), space-joined."""
    n = len(DETOKENIZE_WORDS)
    return " ".join(DETOKENIZE_WORDS[int(i) % n] for i in ids)


def filler_piece(index: int) -> str:
    """Text of output token `index` (0-based) of any response: ' word'."""
    return FILLER_PIECES[index % len(FILLER_PIECES)]


def filler_text(num_tokens: int) -> str:
    return "".join(filler_piece(i) for i in range(num_tokens))
