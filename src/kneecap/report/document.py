"""A report as plain data: a title and a list of blocks (headings, banners, tables, figures...).

Page builders (sweep, plan, run, compare) produce a Document; markdown.py and html.py render the
same Document, so both formats always say the same thing. Text here is plain text: renderers
escape it for their format. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from kneecap.errors import KneecapError

TONES = ("plain", "measured", "simulated", "planned", "warning", "better", "worse", "muted")


def _check_tone(tone: str) -> None:
    if tone not in TONES:
        raise KneecapError(f"unknown report tone {tone!r}", f"use one of {', '.join(TONES)}")


class _Toned:
    """A paragraph, banner or cell: its tone is checked when it is made."""

    def __post_init__(self) -> None:
        _check_tone(self.tone)


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2  # 1 = page title, 2 = section, 3 = subsection
    anchor: str | None = None

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise KneecapError(f"heading level must be 1, 2 or 3, got {self.level}", "use 1..3")


@dataclass(frozen=True)
class Paragraph(_Toned):
    text: str
    tone: str = "plain"


@dataclass(frozen=True)
class Banner(_Toned):
    """A loud one-line statement at the top of a page (measured vs simulated vs planned)."""

    title: str
    text: str
    tone: str


@dataclass(frozen=True)
class Cell(_Toned):
    text: str
    tone: str = "plain"


CellLike = Union[str, Cell]


@dataclass(frozen=True)
class Table:
    """Columns carry their units in the header, e.g. 'TTFT p99 (ms)'."""

    columns: tuple[str, ...]
    rows: tuple[tuple[CellLike, ...], ...]
    caption: str | None = None
    row_tones: tuple[str, ...] = ()  # optional per-row tone ('warning' marks a suspect level)

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise KneecapError(
                    f"report table row {i} has {len(row)} cells for {len(self.columns)} columns",
                    "this is a bug in the page builder: every row needs one cell per column",
                )
        if self.row_tones and len(self.row_tones) != len(self.rows):
            raise KneecapError("report table row_tones must have one tone per row", "pass one tone per row or none")
        for tone in self.row_tones:
            _check_tone(tone)


@dataclass(frozen=True)
class KeyValues:
    """A two-column list of facts (manifest, ledger lines); `compact` lays many short facts out in a grid."""

    items: tuple[tuple[str, str], ...]
    caption: str | None = None
    compact: bool = False


@dataclass(frozen=True)
class Code:
    """Verbatim text (the exact command line)."""

    text: str


@dataclass(frozen=True)
class Figure:
    """A PNG image. `name` becomes the file name next to the markdown (name.png)."""

    name: str
    title: str
    png: bytes
    caption: str | None = None

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise KneecapError(
                f"figure name {self.name!r} must be letters, digits, '-' or '_'", "use a file-name-safe figure name"
            )
        if not self.png.startswith(b"\x89PNG\r\n\x1a\n"):
            raise KneecapError(f"figure {self.name!r} is not a PNG", "plots must be rendered as PNG bytes")


def drawn(name: str, title: str, png: bytes | None, caption: str | None = None) -> list[Figure]:
    """[the Figure] of a plot that drew, [] of one with nothing to draw (its function returned None)."""
    return [Figure(name, title, png, caption)] if png else []


@dataclass(frozen=True)
class Definitions:
    """The glossary: term, unit, definition."""

    items: tuple[tuple[str, str, str], ...]


Block = Union[Heading, Paragraph, Banner, Table, KeyValues, Code, Figure, Definitions]


@dataclass(frozen=True)
class Document:
    title: str
    blocks: tuple[Block, ...] = field(default_factory=tuple)

    @property
    def figures(self) -> tuple[Figure, ...]:
        return tuple(b for b in self.blocks if isinstance(b, Figure))
