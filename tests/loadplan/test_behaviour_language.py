"""Language checks in behaviour cases need the optional langdetect package (kneecap[behaviour])."""

from __future__ import annotations

import sys

import pytest

from kneecap.errors import KneecapError
from kneecap.loadplan.behaviour import detect_language


def test_language_is_detected_when_langdetect_is_installed():
    pytest.importorskip("langdetect")
    assert detect_language("The quick brown fox jumps over the lazy dog near the river bank.") == "en"


def test_without_langdetect_a_language_check_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "langdetect", None)  # as if it were not installed
    with pytest.raises(KneecapError) as info:
        detect_language("bonjour tout le monde")
    assert "kneecap[behaviour]" in info.value.hint
