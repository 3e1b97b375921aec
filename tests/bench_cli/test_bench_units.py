"""The bench orchestration's pure pieces: option validation, key handling, splits, resume, exit codes, table."""

from __future__ import annotations

import math

import orjson
import pytest

from kneecap.sweep.credentials import Scrubber, resolve_api_key
from kneecap.sweep.level import LevelTask
from kneecap.sweep.options import BenchOptions, parse_fail_on, parse_shared_prefix
from kneecap.workload import parse_rates
from kneecap.sweep.render import summary_table
from kneecap.sweep.resume import DISCARDED_FILE, set_aside_records
from kneecap.levels import sweep_levels
from kneecap.sweep.workers import deal, split_concurrency, split_rate, split_task
from kneecap.cli.bench import exit_code
from kneecap.errors import KneecapError
from kneecap.workload import make_requests, Workload

BASE = dict(base_url="http://127.0.0.1:1", isl=8, osl=4)


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(concurrency=(1,), rate=(1.0,)), "exactly one of --concurrency and --rate"),
        (dict(), "exactly one of --concurrency and --rate"),
        (dict(concurrency=(1,), base_url="127.0.0.1:8000"), "--base-url"),
        (dict(concurrency=(1,), endpoint="embeddings"), "--endpoint"),
        (dict(concurrency=(1,), requests=10, duration_s=5.0), "at most one of --requests and --duration"),
        (dict(concurrency=(1,), requests=0), "--requests"),
        (dict(concurrency=(1,), timeout_s=0.0), "--timeout"),
        (dict(concurrency=(1,), workers=0), "--workers"),
        (dict(concurrency=(1,), warmup=-1), "--warmup"),
        (dict(concurrency=(1,), api_key_env="A", api_key_file="/x"), "--api-key-env"),
        (dict(concurrency=(1,), isl=None), "--isl"),
    ],
)
def test_bad_options_name_the_flag(kwargs, needle):
    with pytest.raises(KneecapError) as err:
        BenchOptions(**{**BASE, **kwargs})
    assert needle in err.value.one_line()


def test_options_round_trip_through_manifest_dict():
    opts = BenchOptions(**BASE, rate=(0.5, math.inf), warmup=2, fail_on=("errors",))
    again = BenchOptions.from_dict(orjson.loads(orjson.dumps(opts.to_dict())))
    assert again == opts


def test_overrides_win_when_resuming():
    opts = BenchOptions(**BASE, concurrency=(1, 2))
    again = BenchOptions.from_dict(opts.to_dict(), base_url="http://127.0.0.1:2", workers=None)
    assert again.base_url == "http://127.0.0.1:2" and again.workers == 1


def test_request_budget_per_level():
    closed = BenchOptions(**BASE, concurrency=(1, 64))
    assert [closed.requests_for(c) for c in closed.levels] == [10, 256]
    fixed = BenchOptions(**BASE, concurrency=(1, 64), requests=7)
    assert [fixed.requests_for(c) for c in fixed.levels] == [7, 7]
    open_loop = BenchOptions(**BASE, rate=(2.0,), duration_s=5.0)
    assert open_loop.requests_for(2.0) == 10
    timed = BenchOptions(**BASE, concurrency=(2, 4096), duration_s=1.5)
    assert timed.in_rounds and not open_loop.in_rounds
    assert timed.requests_for(2) == 2 * 32  # one round: 32 requests per stream
    assert timed.requests_for(4096) == 20_000  # the memory cap of a round


@pytest.mark.parametrize("text, expected", [("1,2.5", [1.0, 2.5]), (" 4 ", [4.0]), ("inf", [math.inf])])
def test_parse_rates(text, expected):
    assert parse_rates(text) == expected


@pytest.mark.parametrize("text", ["", "0", "-1", "a,b", "1,,0"])
def test_parse_rates_rejects(text):
    with pytest.raises(KneecapError):
        parse_rates(text)


def test_parse_fail_on_and_shared_prefix():
    assert parse_fail_on("errors,slo,errors") == ("errors", "slo")
    with pytest.raises(KneecapError, match="unknown"):
        parse_fail_on("errors,sometimes")
    assert parse_shared_prefix("512x8") == (512, 8)
    assert parse_shared_prefix("64") == (64, 1)
    with pytest.raises(KneecapError):
        parse_shared_prefix("x8")


# -- the API key -----------------------------------------------------------------------------
def test_key_from_default_envs_in_order():
    assert resolve_api_key(environ={"OPENAI_API_KEY": "sk-o"}) == "sk-o"
    assert resolve_api_key(environ={"OPENAI_API_KEY": "sk-o", "KNEECAP_API_KEY": "sk-k"}) == "sk-k"
    assert resolve_api_key(environ={}) is None


def test_named_env_must_exist_and_message_does_not_hold_a_key(tmp_path):
    with pytest.raises(KneecapError, match="MY_KEY"):
        resolve_api_key(env_name="MY_KEY", environ={"OPENAI_API_KEY": "sk-secret"})
    path = tmp_path / "key"
    path.write_text("sk-from-file\n")
    assert resolve_api_key(file_path=str(path), environ={}) == "sk-from-file"
    path.write_text("sk-a\nsk-b\n")
    with pytest.raises(KneecapError) as err:
        resolve_api_key(file_path=str(path), environ={})
    assert "sk-a" not in err.value.one_line()
    with pytest.raises(KneecapError, match="cannot read"):
        resolve_api_key(file_path=str(tmp_path / "missing"), environ={})


def test_scrubber():
    scrub = Scrubber("sk-123")
    assert scrub("bad key sk-123 given") == "bad key *** given"
    assert scrub(None) is None
    assert Scrubber(None)("sk-123") == "sk-123"


# -- spreading a level over workers --------------------------------------------------------------
@pytest.mark.parametrize("c, n, expected", [(10, 3, [4, 3, 3]), (2, 4, [1, 1]), (1024, 2, [512, 512])])
def test_split_concurrency_conserves_streams(c, n, expected):
    assert split_concurrency(c, n) == expected
    assert sum(split_concurrency(c, n)) == c


def test_split_task_conserves_requests_and_load():
    specs = tuple(make_requests(Workload.fixed(8, 4), 11, seed=1))
    closed = split_task(LevelTask(level=0, kind="concurrency", value=5, specs=specs, epoch=0.0), 2)
    assert [t.value for t in closed] == [3, 2]
    assert sorted(s.request_id for t in closed for s in t.specs) == sorted(s.request_id for s in specs)
    opened = split_task(LevelTask(level=0, kind="rate", value=3.0, specs=specs, epoch=0.0, seed=4), 3)
    assert sum(t.value for t in opened) == pytest.approx(3.0)
    assert len({t.seed for t in opened}) == 3  # independent arrival streams
    assert split_rate(8.0, 4) == [2.0] * 4
    assert deal([1, 2, 3, 4, 5], 2) == [(1, 3, 5), (2, 4)]


def test_plan_levels_gives_sweep_unique_request_indices():
    opts = BenchOptions(**BASE, concurrency=(1, 4), requests=5, warmup=2)
    plans = sweep_levels(opts)
    assert [(p.first_index, p.num_requests, p.num_warmup) for p in plans] == [(0, 5, 2), (10**9, 5, 2)]
    from kneecap.sweep.bench_workload import BenchWorkload

    work = BenchWorkload(opts)
    indices = [s.index for p in plans for s in work.level(p, warmup=True).specs]
    indices += [s.index for p in plans for r in range(3) for s in work.level(p, warmup=False, round_index=r).specs]
    assert len(indices) == len(set(indices)) == 2 * (2 + 3 * 5)  # warmup and every round: prompts never repeat


# -- resume ------------------------------------------------------------------------------------
def test_set_aside_keeps_finished_levels_only(tmp_path):
    path = tmp_path / "requests.jsonl"
    lines = [orjson.dumps({"request_id": f"r{i}", "level": lvl}) + b"\n" for i, lvl in enumerate([0, 0, 1, 1, 2])]
    path.write_bytes(b"".join(lines) + b'{"request_id": "torn", "lev')
    kept, moved = set_aside_records(path, {0, 1})
    assert (kept, moved) == (4, 2)
    assert path.read_bytes() == b"".join(lines[:4])
    aside = (tmp_path / DISCARDED_FILE).read_bytes().splitlines()
    assert aside[0] == lines[4].rstrip() and aside[1].startswith(b'{"request_id": "torn"')
    assert set_aside_records(path, {0, 1}) == (4, 0)  # idempotent


# -- exit codes and the table -------------------------------------------------------------------
LEVEL = {
    "concurrency": 4,
    "requests": 10,
    "completed": 8,
    "failed": 2,
    "output_tok_s": 123.4,
    "total_tok_s": 200.0,
    "request_s": 1.5,
    "ttft_ms": {"p50": 12.3, "p99": 150.0},
    "itl_ms": {"p50": 5.0, "p99": 9.0},
    "tpot_ms": {"p50": 5.1},
    "e2e_ms": {"p99": 2500.0},
    "errors": {"http_500": 2},
    "slo": {"met": False, "breaches": []},
}


@pytest.mark.parametrize(
    "fail_on, summary, code",
    [
        ((), {"levels": [LEVEL], "stopped": {"at": 4, "reason": "error_rate"}}, 0),
        (("errors",), {"levels": [LEVEL]}, 1),
        (("slo",), {"levels": [LEVEL]}, 1),
        (("stopped",), {"levels": [LEVEL], "stopped": None}, 0),
        (("stopped",), {"levels": [LEVEL], "stopped": {"at": 4, "reason": "error_rate"}}, 1),
        (
            ("stopped",),
            {"levels": [LEVEL], "stopped": {"at": 4, "reason": "server_dead"}},
            3,
        ),  # a dead server: 3, always
        ((), {"levels": [LEVEL], "stopped": {"at": 4, "reason": "server_dead"}}, 3),
        (("errors",), {"levels": [dict(LEVEL, failed=0)]}, 0),
        (("errors",), {"levels": [LEVEL], "status": "interrupted"}, 130),
    ],
)
def test_exit_code(fail_on, summary, code):
    assert exit_code(summary, fail_on)[0] == code


def test_table_has_units_and_dashes_for_missing():
    from rich.console import Console

    summary = {
        "load": "concurrency",
        "levels": [LEVEL, {"concurrency": 8, "requests": 0}],
        "knee": {"concurrency": 4},
        "skipped": [{"concurrency": 16, "index": 2, "reason": "preflight_exceeds"}],
        "stopped": {"at": 16, "reason": "preflight_exceeds"},
    }
    console = Console(width=250, record=True)
    console.print(summary_table(summary))
    text = console.export_text()
    for needle in (
        "TTFT p99 (ms)",
        "out tok/s",
        "E2E p99 (s)",
        "123",
        "150",
        "2.50",
        "knee",
        "http_500×2",
        "skipped: preflight_exceeds",
        "stopped at concurrency 16",
    ):
        assert needle in text, needle
    row_8 = next(line for line in text.splitlines() if line.startswith("│  8 "))
    assert "—" in row_8 and " 0 " not in row_8  # no data is a dash, never a fake zero


def test_records_file_reads_one_level_from_an_offset(tmp_path):
    from kneecap.sweep.resume import RecordsFile
    from kneecap.records import RecordWriter, RequestRecord

    path = tmp_path / "requests.jsonl"
    records = RecordsFile(path)
    assert records.tell() == 0 and list(records.level_records(0)) == []
    with RecordWriter(path) as writer:
        writer.write(RequestRecord(request_id="a", level=0))
        offset = records.tell()
        writer.write(RequestRecord(request_id="b", level=1))
        writer.write(RequestRecord(request_id="c", level=0))  # e.g. a stray record: filtered by level
        writer.write(RequestRecord(request_id="d", level=1))
    with open(path, "ab") as fh:
        fh.write(b'{"request_id": "torn", "level": 1')
    assert [r.request_id for r in records.level_records(1, offset)] == ["b", "d"]
    assert [r.request_id for r in records.level_records(0)] == ["a", "c"]
    assert [r.request_id for r in records.level_records(0, offset)] == ["c"]


def test_shared_prefix_reaches_the_request_specs():
    from kneecap.sweep.bench_workload import BenchWorkload

    opts = BenchOptions(**BASE, concurrency=(2,), requests=8, shared_prefix_tokens=6, num_prefix_groups=2)
    specs = BenchWorkload(opts).level(sweep_levels(opts)[0], warmup=False).specs
    assert {s.prefix_tokens for s in specs} == {6}
    assert {s.prefix_group for s in specs} <= {0, 1} and len(specs) == 8


def test_prefix_cache_hit_rate_from_usage_only_where_the_server_has_no_prefix_counters():
    from kneecap.sweep.http_levels import scraped_server_metrics

    # /metrics with prefix counters (vLLM, SGLang, kneecap serve): its own rate, whatever the usage said
    with_counters = scraped_server_metrics({"prefix_cache_hit_rate": 0.25}, [], cached_fraction=0.5)
    assert (
        with_counters["prefix_cache_hit_rate"] == 0.25 and with_counters["prefix_cache_hit_rate_source"] == "prometheus"
    )
    # /metrics without them (llama.cpp): the responses' cached tokens over their prompt tokens, said so
    without = scraped_server_metrics({"prefix_cache_hit_rate": None, "kv_usage_max": 0.1}, [], cached_fraction=0.5)
    assert (without["source"], without["prefix_cache_hit_rate"], without["prefix_cache_hit_rate_source"]) == (
        "prometheus",
        0.5,
        "usage",
    )
    # no /metrics at all: the level's source is the usage
    bare = scraped_server_metrics(None, [], cached_fraction=0.5)
    assert (bare["source"], bare["prefix_cache_hit_rate"], bare["kv_usage_max"]) == ("usage", 0.5, None)
    # nothing said either way
    assert scraped_server_metrics(None, [])["source"] == "none"
    assert scraped_server_metrics({"prefix_cache_hit_rate": None}, [])["prefix_cache_hit_rate_source"] is None
