"""Render a report Document as Markdown (GitHub-flavoured tables), figures as relative PNG links.

Markdown viewers render inline HTML, so text is escaped here too: '&', '<', '>' become entities
and '|' is escaped inside tables; verbatim command lines go in fenced code blocks.
"""

from __future__ import annotations

import re

from kneecap.report.document import (
    Banner,
    Cell,
    Code,
    Definitions,
    Document,
    Figure,
    Heading,
    KeyValues,
    Paragraph,
    Table,
)

# '_' inside a word (ttft_p99_ms) is never emphasis in CommonMark/GFM, so only word-edge '_' is escaped
_MD_SPECIAL = re.compile(r"([\\`*\[\]#])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def escape_md(text: str, in_table: bool = False) -> str:
    """Plain text -> Markdown text that shows the same characters and can never become markup."""
    out = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), out)
    out = " ".join(out.split("\n")) if in_table else out
    return out.replace("|", "\\|") if in_table else out


def _cell(cell: str | Cell) -> str:
    text = cell.text if isinstance(cell, Cell) else cell
    bold = isinstance(cell, Cell) and cell.tone in ("better", "worse", "warning")
    body = escape_md(text, in_table=True)
    return f"**{body}**" if bold and body else body


def _table(columns, rows) -> list[str]:
    lines = [
        "| " + " | ".join(escape_md(c, True) for c in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _caption(text: str | None) -> list[str]:
    return [f"*{escape_md(text)}*", ""] if text else []


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def to_markdown(doc: Document, image_dir: str = "plots") -> str:
    """The whole document; figure `name` is linked as `image_dir/name.png` (written by the caller)."""
    lines: list[str] = []
    for block in doc.blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + escape_md(block.text), ""]
        elif isinstance(block, Banner):
            lines += [f"> **{escape_md(block.title)}**", ">", f"> {escape_md(block.text)}", ""]
        elif isinstance(block, Paragraph):
            text = escape_md(block.text)
            lines += [
                f"*{text}*" if block.tone in ("muted",) else f"**{text}**" if block.tone == "warning" else text,
                "",
            ]
        elif isinstance(block, Code):
            fence = _fence(block.text)
            lines += [fence + "sh", block.text, fence, ""]
        elif isinstance(block, Table):
            lines += _caption(block.caption)
            rows = list(block.rows)
            if block.row_tones:  # mark suspect rows in the first cell so they survive plain-text viewing
                rows = [
                    row
                    if tone != "warning"
                    else (Cell("⚠ " + (row[0].text if isinstance(row[0], Cell) else row[0]), "warning"), *row[1:])
                    for row, tone in zip(rows, block.row_tones)
                ]
            lines += _table(block.columns, rows) + [""]
        elif isinstance(block, KeyValues):
            lines += _caption(block.caption)
            if block.compact:  # many short facts: two pairs per row
                pairs = list(block.items) + ([("", "")] if len(block.items) % 2 else [])
                rows = [(*pairs[i], *pairs[i + 1]) for i in range(0, len(pairs), 2)]
                lines += _table(("item", "value", "item", "value"), rows) + [""]
            else:
                lines += _table(("item", "value"), block.items) + [""]
        elif isinstance(block, Figure):
            lines += [f"![{escape_md(block.title)}]({image_dir}/{block.name}.png)", ""] + _caption(block.caption)
        elif isinstance(block, Definitions):
            lines += _table(("term", "unit", "definition"), block.items) + [""]
    return "\n".join(lines).rstrip() + "\n"
