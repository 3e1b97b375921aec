"""Everything a report shows is escaped (server strings, model names, error messages can hold markup),
and the HTML is self-contained (no network resource, no script)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from kneecap.report.document import Cell, Code, Document, Figure, Heading, KeyValues, Paragraph, Table
from kneecap.report.html import to_html
from kneecap.report.load import load_results
from kneecap.report.markdown import escape_md, to_markdown
from kneecap.report.render import build_document

ALLOWED_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "main",
    "nav",
    "a",
    "h1",
    "h2",
    "h3",
    "p",
    "div",
    "strong",
    "pre",
    "code",
    "table",
    "caption",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "figure",
    "img",
    "figcaption",
    "footer",
    "dl",
    "dt",
    "dd",
}


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


def test_hostile_strings_everywhere_are_text(bench_dir, run_dir, hostile):
    for folder in (bench_dir, run_dir):
        page = to_html(build_document(load_results(folder)))
        tags = _parse(page)
        assert set(tags.tags) <= ALLOWED_TAGS, set(tags.tags) - ALLOWED_TAGS
        assert "<script" not in page.lower()
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert any(hostile in t for t in tags.text)  # shown, as text
        assert not any(k.startswith("on") for _, k, _ in tags.attrs)  # no event handlers


def test_error_message_from_the_server_is_escaped_in_both_formats(refused_bench, hostile, hostile_model):
    import html

    results = load_results(refused_bench)
    doc = build_document(results)
    page, md = to_html(doc), to_markdown(doc)
    (message,) = {m for messages in results.records.error_samples.values() for m in messages}
    assert '"message":"This model\'s maximum context length is 512 tokens' in message  # the server's own body
    assert html.escape(message, quote=False) in page or html.escape(message) in page
    assert escape_md(message) in md
    # the served model name with markup: escaped in both formats, never raw
    assert html.escape(hostile_model, quote=False) in page
    assert hostile not in md and hostile not in page


def test_every_block_kind_escapes_its_text():
    evil = "\"'><img src=x onerror=alert(1)>&"
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    doc = Document(
        evil,
        (
            Heading(evil, 1),
            Heading(evil),
            Paragraph(evil, "warning"),
            Code(evil),
            Table((evil,), ((Cell(evil, "worse"),),), caption=evil),
            KeyValues(((evil, evil),), evil),
            Figure("f", evil, png, evil),
        ),
    )
    page = to_html(doc)
    tags = _parse(page)
    assert tags.tags.count("img") == 1  # only the figure itself
    assert not any(k == "onerror" for _, k, _ in tags.attrs)
    # attribute values stay inside their quotes: the alt text is the evil string, intact
    assert ("img", "alt", evil) in tags.attrs
    md = to_markdown(doc)
    # a fenced code block is shown verbatim by every markdown viewer, so it may hold '<'; nothing else may
    outside_fence = re.sub(r"```sh\n.*?\n```", "", md, flags=re.S)
    assert "<img" not in outside_fence and "&lt;img src=x onerror=alert(1)&gt;&amp;" in outside_fence


def test_markdown_table_cells_cannot_break_the_table():
    assert escape_md("a|b\nc", in_table=True) == "a\\|b c"
    assert escape_md("[x](javascript:alert(1))") == "\\[x\\](javascript:alert(1))"
    assert escape_md("ttft_p99_ms") == "ttft_p99_ms"  # intraword '_' is never emphasis: kept readable
    assert escape_md("_x_ *y*") == "\\_x\\_ \\*y\\*"
    md = to_markdown(Document("t", (Table(("a", "b"), (("1|2", "3"),)),)))
    row = [line for line in md.splitlines() if line.startswith("| 1")][0]
    assert row == "| 1\\|2 | 3 |"


def test_command_line_with_backticks_stays_in_its_fence():
    md = to_markdown(Document("t", (Code("echo ```; rm -rf /"),)))
    assert md.startswith("````sh\necho ```; rm -rf /\n````")


def test_html_is_self_contained(bench_dir, sim_dir, plan_file, run_dir):
    for location in (bench_dir, sim_dir, plan_file, run_dir):
        page = to_html(build_document(load_results(location)))
        tags = _parse(page)
        for tag, key, value in tags.attrs:
            if key in ("src", "href", "srcset", "action", "poster", "data"):
                assert value.startswith(("data:image/png;base64,", "#")), (tag, key, value[:60])
        assert not {"script", "link", "iframe", "object", "embed", "base", "form"} & set(tags.tags)
        style = page[page.index("<style>") : page.index("</style>")]
        assert "url(" not in style and "@import" not in style
        # no http(s) reference anywhere except as visible text (the command line names the server URL)
        for match in re.finditer(r"https?://", page):
            before = page[: match.start()]
            assert before.rfind("<") < before.rfind(">"), "an http(s) URL inside a tag"
        assert "default-src 'none'" in page  # CSP: the browser itself refuses scripts and fetches


def test_summary_strings_with_dollar_signs_do_not_break_plots(bench_dir, hostile_model):
    """The served model name holds '$5 and $\\frac{1}{0}$': plotted as typed, not as mathtext."""
    from kneecap.report import plots

    with plots.keep_figures() as figures:
        doc = build_document(load_results(bench_dir))
    assert any(f.name == "throughput" for f in doc.figures)
    titles = [t.get_text() for fig in figures for ax in fig.axes for t in (ax.title,)]
    assert any(hostile_model in t for t in titles), titles
