"""Render a report Document as ONE self-contained HTML page: inline CSS, PNGs as base64 data URIs,
no scripts, no fonts or anything else fetched from the network.

Safety: every piece of text passes through html.escape (quote=True) exactly once, here; nothing
is inserted raw. A Content-Security-Policy meta tag forbids scripts and any non-inline resource,
so even a renderer bug could not make the page run code or reach the network.
"""

from __future__ import annotations

import base64
import re
from html import escape

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

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #1f2328; background: #f6f8fa; }
main { max-width: 1360px; margin: 0 auto; padding: 24px 28px 60px; background: #fff; min-height: 100vh; }
h1 { font-size: 26px; margin: 0 0 14px; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 15px; margin: 22px 0 8px; }
p { margin: 8px 0; }
nav { font-size: 13px; margin: 0 0 16px; color: #57606a; }
nav a { color: #0969da; text-decoration: none; margin-right: 14px; }
.banner { border-radius: 8px; padding: 12px 16px; margin: 12px 0 18px; border: 2px solid; }
.banner strong { display: block; font-size: 17px; letter-spacing: .02em; }
.tone-measured { background: #dafbe1; border-color: #1a7f37; color: #0f5323; }
.tone-simulated { background: #fff1e5; border-color: #bc4c00; color: #762c00; }
.tone-planned { background: #ddf4ff; border-color: #0969da; color: #0a3069; }
.tone-warning { background: #fff8c5; border-color: #9a6700; color: #4d2d00; }
p.tone-warning, p.tone-muted { padding: 6px 10px; border-radius: 6px; border: 1px solid #d4a72c; }
p.tone-muted { background: #f6f8fa; border-color: #d0d7de; color: #57606a; }
pre { background: #0d1117; color: #e6edf3; padding: 10px 14px; border-radius: 6px; overflow-x: auto;
      font: 12.5px/1.45 ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", monospace; white-space: pre-wrap;
      word-break: break-all; }
.table-wrap { overflow-x: auto; margin: 6px 0 16px; border: 1px solid #d0d7de; border-radius: 6px; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
caption { caption-side: top; text-align: left; padding: 6px 10px; color: #57606a; font-style: italic; }
th, td { padding: 5px 9px; border-bottom: 1px solid #eaeef2; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; position: sticky; top: 0; white-space: normal; overflow-wrap: normal;
     hyphens: none; min-width: 4.5em; }
.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.text { white-space: normal; overflow-wrap: normal; }
th.num, th.text { white-space: normal; }
td.long { min-width: 220px; max-width: 560px; overflow-wrap: break-word; }
td:first-child { white-space: nowrap; }
tr.row-warning td { background: #fff8c5; }
td.tone-better { color: #1a7f37; font-weight: 600; }
td.tone-worse { color: #cf222e; font-weight: 600; }
td.tone-warning { color: #9a6700; font-weight: 600; background: transparent; border: 0; }
td.tone-muted { color: #8c959f; }
table.kv td:first-child { color: #57606a; width: 240px; }
table.kv td { text-align: left; white-space: normal; word-break: break-word; }
table.glossary td { text-align: left; white-space: normal; vertical-align: top; }
table.glossary td:first-child { font-weight: 600; white-space: nowrap; }
.grid-caption { color: #57606a; font-style: italic; font-size: 12.5px; margin: 10px 0 4px; }
dl.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 2px 18px; margin: 0 0 16px;
          padding: 8px 10px; border: 1px solid #d0d7de; border-radius: 6px; font-size: 12.5px; }
dl.grid div { display: flex; flex-wrap: wrap; column-gap: 8px; min-width: 0; }
dl.grid dt { color: #57606a; white-space: nowrap; }
dl.grid dd { margin: 0; overflow-wrap: break-word; min-width: 0; }
dl.grid dd.num { white-space: nowrap; }
figure { margin: 14px 0 22px; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #d0d7de; border-radius: 6px; }
figcaption { font-size: 12.5px; color: #57606a; margin-top: 4px; }
figcaption strong { color: #1f2328; }
footer { margin-top: 40px; font-size: 12px; color: #8c959f; }
"""


_NUMBER = re.compile(r"^(?:—|[+\-−]?[\d,]*\.?\d+(?:e[+\-]?\d+)?(?: ?(?:%|×|GiB|GB|ms|s|tok/s|req/s))?)$")


NUM_ATTR = ' class="num"'


def _is_numeric(text: str) -> bool:
    return bool(_NUMBER.match(text.strip())) if text.strip() else True


def _td(cell: str | Cell, numeric: bool) -> str:
    text, tone = (cell.text, cell.tone) if isinstance(cell, Cell) else (cell, "plain")
    classes = ["num" if numeric else "long" if len(text) > 40 else "text"]
    if tone != "plain":
        classes.append(f"tone-{tone}")
    return f'<td class="{" ".join(classes)}">{escape(text)}</td>'


def _table(columns, rows, caption: str | None, row_tones=(), css_class: str = "", header: bool = True) -> str:
    """Numeric columns (every cell a number, with or without its unit) align right; text aligns left."""
    texts = [[c.text if isinstance(c, Cell) else c for c in row] for row in rows]
    numeric = [i > 0 and bool(texts) and all(_is_numeric(row[i]) for row in texts) for i in range(len(columns))]
    head = (
        (
            "<thead><tr>"
            + "".join(f'<th class="{"num" if n else "text"}">{escape(c)}</th>' for c, n in zip(columns, numeric))
            + "</tr></thead>"
        )
        if header
        else ""
    )
    body = []
    for i, row in enumerate(rows):
        tone = row_tones[i] if row_tones else "plain"
        attr = f' class="row-{tone}"' if tone != "plain" else ""
        body.append(f"<tr{attr}>" + "".join(_td(c, n) for c, n in zip(row, numeric)) + "</tr>")
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    cls = f' class="{css_class}"' if css_class else ""
    return f'<div class="table-wrap"><table{cls}>{cap}{head}<tbody>{"".join(body)}</tbody></table></div>'


def _anchor(text: str, used: set[str]) -> str:
    base = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-") or "section"
    anchor, i = base, 2
    while anchor in used:
        anchor, i = f"{base}-{i}", i + 1
    used.add(anchor)
    return anchor


def to_html(doc: Document) -> str:
    """The whole page as one string; the only way text gets in is through html.escape."""
    parts: list[str] = []
    used: set[str] = set()
    toc: list[tuple[str, str]] = []
    for block in doc.blocks:
        if isinstance(block, Heading):
            anchor = _anchor(block.anchor or block.text, used)
            if block.level == 2:
                toc.append((anchor, block.text))
            parts.append(f'<h{block.level} id="{escape(anchor)}">{escape(block.text)}</h{block.level}>')
        elif isinstance(block, Banner):
            parts.append(
                f'<div class="banner tone-{block.tone}" role="note"><strong>{escape(block.title)}</strong>'
                f"{escape(block.text)}</div>"
            )
        elif isinstance(block, Paragraph):
            cls = f' class="tone-{block.tone}"' if block.tone != "plain" else ""
            parts.append(f"<p{cls}>{escape(block.text)}</p>")
        elif isinstance(block, Code):
            parts.append(f"<pre><code>{escape(block.text)}</code></pre>")
        elif isinstance(block, Table):
            parts.append(_table(block.columns, block.rows, block.caption, block.row_tones))
        elif isinstance(block, KeyValues) and block.compact:
            cap = f'<p class="grid-caption">{escape(block.caption)}</p>' if block.caption else ""
            cells = "".join(
                f"<div><dt>{escape(k)}</dt><dd{NUM_ATTR if _is_numeric(v) else ''}>{escape(v)}</dd></div>"
                for k, v in block.items
            )
            parts.append(f'{cap}<dl class="grid">{cells}</dl>')
        elif isinstance(block, KeyValues):
            parts.append(_table(("item", "value"), block.items, block.caption, css_class="kv", header=False))
        elif isinstance(block, Figure):
            data = base64.b64encode(block.png).decode("ascii")
            caption = f"<strong>{escape(block.title)}.</strong> {escape(block.caption or '')}"
            parts.append(
                f'<figure id="fig-{escape(block.name)}"><img alt="{escape(block.title)}" '
                f'src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption></figure>'
            )
        elif isinstance(block, Definitions):
            parts.append(_table(("term", "unit", "definition"), block.items, None, css_class="glossary"))
    nav = "<nav>" + "".join(f'<a href="#{escape(a)}">{escape(t)}</a>' for a, t in toc) + "</nav>" if toc else ""
    # the title heading comes first, then the table of contents
    if parts and parts[0].startswith("<h1"):
        body = parts[0] + nav + "".join(parts[1:])
    else:
        body = nav + "".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}<footer>Rendered by kneecap report. Self-contained: no scripts, "
        "no network resources.</footer></main></body></html>\n"
    )
