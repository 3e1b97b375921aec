"""Behaviour replay: does a serving candidate still answer the frozen cases as expected? Pure checks.

A candidate whose behaviour changes (truncation, quantization, speculative decoding, batching
can all do it) is rejected before any cost comparison (seed 004). Expectation kinds:
exact text (after stripping surrounding whitespace), regex (re.search), JSON schema (the answer
must parse as JSON and validate — jsonschema, Draft 2020-12), must_abstain (the answer declines:
matches ABSTAIN_PATTERN), language (ISO 639-1 code detected by langdetect, seeded for determinism).
"""

from __future__ import annotations

import json
import re

from kneecap.errors import KneecapError
from kneecap.loadplan.schema import Expectation

ABSTAIN_PATTERN = re.compile(
    r"\b(i (?:can(?:no|')t|am unable to|won't|will not|do not know|don't know)|i'm (?:not able|unable|sorry)|"
    r"cannot (?:help|answer|provide)|not able to (?:help|answer)|unable to (?:help|answer|provide)|no information)\b",
    re.IGNORECASE,
)


def check(expect: Expectation, answer: str) -> tuple[bool, str]:
    """(passed, detail) for one answer."""
    if expect.exact is not None:
        ok = answer.strip() == expect.exact.strip()
        return ok, "exact match" if ok else f"expected exactly {expect.exact!r}"
    if expect.regex is not None:
        ok = re.search(expect.regex, answer) is not None
        return ok, "regex matched" if ok else f"no match for /{expect.regex}/"
    if expect.json_schema is not None:
        import jsonschema

        try:
            doc = json.loads(answer)
        except json.JSONDecodeError as exc:
            return False, f"not JSON: {exc.msg}"
        try:
            jsonschema.validate(doc, expect.json_schema)
        except jsonschema.ValidationError as exc:
            return False, f"schema violation: {exc.message}"
        return True, "valid against schema"
    if expect.must_abstain is not None:
        abstained = ABSTAIN_PATTERN.search(answer) is not None
        ok = abstained == expect.must_abstain
        return ok, ("abstained" if abstained else "answered") + ("" if ok else " (unexpected)")
    if expect.language is not None:
        lang = detect_language(answer)
        ok = lang == expect.language.lower()
        return ok, f"language {lang}" + ("" if ok else f", expected {expect.language}")
    return False, "no expectation"


def detect_language(text: str) -> str | None:
    try:
        from langdetect import DetectorFactory, LangDetectException, detect
    except ImportError:
        raise KneecapError(
            "a behaviour case checks the answer's language, which needs the langdetect package",
            "pip install 'kneecap[behaviour]'",
        ) from None

    DetectorFactory.seed = 0  # langdetect is randomised; fix it so replays are reproducible
    try:
        return detect(text)
    except LangDetectException:
        return None


def drift(baseline: dict[str, bool], now: dict[str, bool]) -> list[str]:
    """Cases that passed at the baseline and fail now."""
    return sorted(name for name, ok in baseline.items() if ok and not now.get(name, False))
