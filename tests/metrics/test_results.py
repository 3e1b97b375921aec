"""ResultsDir: atomic summary, records round trip, resume bookkeeping, manifest redaction."""

from __future__ import annotations

import json
import os

import pytest

from kneecap.errors import KneecapError
from kneecap.metrics.summarize import summarize_level
from kneecap.records import RequestRecord, read_records
from kneecap.results import ResultsDir, build_summary, is_secret_name, redact_argv

FAKE_KEY = "sk-fAkEkEy0123456789abcdef"
FAKE_TOKEN = "zq7-not-a-real-token-zq7"


def one_level(index: int, concurrency: int) -> dict:
    r = RequestRecord(
        request_id=f"r{index}",
        level=index,
        concurrency=concurrency,
        sent_at=0.0,
        first_token_at=0.1,
        end_at=0.3,
        chunk_times=[0.1, 0.3],
        chunk_tokens=[1, 1],
        output_tokens=2,
    )
    return summarize_level([r])


def test_summary_roundtrip_and_atomic_replace(tmp_path):
    results = ResultsDir(tmp_path / "out")
    assert results.read_summary() is None and results.completed_levels() == []
    summary = build_summary("bench", [one_level(0, 1)], None, None, model_executed=True, benchmark_executed=True)
    results.write_summary(summary)
    assert results.read_summary() == json.loads(json.dumps(summary))
    inode = os.stat(results.summary_path).st_ino
    summary2 = build_summary(
        "bench",
        [one_level(0, 1), one_level(1, 2)],
        {"concurrency": 1, "output_tok_s": 6.0},
        None,
        model_executed=True,
        benchmark_executed=True,
    )
    results.write_summary(summary2)
    # replaced by rename (a new file), never rewritten in place; no temp file left behind
    assert os.stat(results.summary_path).st_ino != inode
    assert sorted(p.name for p in results.path.iterdir()) == ["summary.json"]
    assert results.read_summary()["knee"] == {"concurrency": 1, "output_tok_s": 6.0}


def test_failed_summary_write_leaves_the_previous_one(tmp_path):
    results = ResultsDir(tmp_path)
    results.write_summary({"kind": "bench", "levels": []})
    with pytest.raises(KneecapError, match="not JSON-serialisable"):
        results.write_summary({"kind": "bench", "levels": [object()]})
    assert results.read_summary() == {"kind": "bench", "levels": []}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_corrupt_summary_is_a_clear_error(tmp_path):
    results = ResultsDir(tmp_path)
    results.summary_path.write_text("{not json")
    with pytest.raises(KneecapError, match="summary.json is not valid JSON"):
        results.read_summary()


def test_results_path_that_is_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(KneecapError, match="not a folder"):
        ResultsDir(target)


def test_records_writer_and_reader(tmp_path):
    results = ResultsDir(tmp_path)
    assert not results.records_path.exists()
    with results.open_writer() as writer:
        writer.write(RequestRecord(request_id="a", level=0))
    with results.open_writer() as writer:  # resume appends
        writer.write(RequestRecord(request_id="b", level=1))
    assert [r.request_id for r in read_records(results.records_path)] == ["a", "b"]
    assert results.records_path.name == "requests.jsonl"


def test_a_record_line_round_trips_every_field_numpy_values_included(tmp_path):
    import dataclasses

    import numpy as np

    from kneecap.records import dumps_record, read_records

    rec = RequestRecord(
        request_id="r",
        level=2,
        concurrency=8,
        rate=None,
        class_name="chat",
        warmup=True,
        scheduled_at=0.5,
        sent_at=np.float64(0.625),
        first_token_at=0.75,
        first_answer_at=0.8,
        end_at=1.25,
        chunk_times=[0.75, np.float64(1.0)],
        chunk_tokens=[1, np.int64(3)],
        expected_input_tokens=16,
        expected_output_tokens=4,
        prompt_tokens=16,
        output_tokens=4,
        status="error",
        error_kind="http_500",
        error_message='é "quoted"',
        prompt_hash="ab",
        prompt="p",
        extra={"finish_reason": "length", "preempted": np.int64(1)},
    )
    line = dumps_record(rec)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    path = tmp_path / "r.jsonl"
    path.write_bytes(line)
    (back,) = read_records(path)
    assert dataclasses.asdict(back) == {
        k: (v.item() if isinstance(v, np.generic) else v) for k, v in dataclasses.asdict(rec).items()
    } | {"chunk_times": [0.75, 1.0], "chunk_tokens": [1, 3], "extra": {"finish_reason": "length", "preempted": 1}}


def test_completed_levels_for_resume(tmp_path):
    results = ResultsDir(tmp_path)
    partial = dict(one_level(2, 4), partial=True)
    missing_keys = {"concurrency": 8, "level": 3, "requests": 5}
    results.write_summary(
        build_summary(
            "simulate",
            [one_level(0, 1), one_level(1, 2), partial, missing_keys],
            None,
            None,
            model_executed=False,
            benchmark_executed=True,
        )
    )
    assert results.completed_levels() == [0, 1]


def test_build_summary_shape_and_validation():
    s = build_summary(
        "simulate",
        [],
        None,
        {"at": 8, "reason": "error_rate", "detail": "x"},
        model_executed=False,
        benchmark_executed=True,
        seed=7,
    )
    assert list(s) == ["kind", "levels", "knee", "stopped", "manifest", "model_executed", "benchmark_executed", "seed"]
    assert s["manifest"] == "manifest.json" and s["model_executed"] is False
    with pytest.raises(KneecapError, match="summary kind"):
        build_summary("plan", [], None, None, model_executed=False, benchmark_executed=False)


@pytest.mark.parametrize(
    "name, secret",
    [
        ("--api-key", True),
        ("--openai-api-key", True),
        ("--hf-token", True),
        ("--token", True),
        ("--client-secret", True),
        ("--password", True),
        ("Authorization", True),
        ("x-api-key", True),
        ("--max-tokens", False),
        ("--kv-tokens", False),
        ("--tokenizer", False),
        ("--model", False),
        ("--no-keepalive", False),
        ("--keep-prompts", False),
        ("--base-url", False),
        ("--api-key-env", False),
        ("--api-key-file", False),
        ("api_key_env", False),
        ("hf_token_path", False),
    ],
)
def test_is_secret_name(name, secret):
    assert is_secret_name(name) is secret


def test_redact_argv_forms():
    argv = [
        "kneecap",
        "bench",
        "--api-key",
        FAKE_KEY,
        f"--token={FAKE_TOKEN}",
        "--max-tokens",
        "128",
        "-H",
        f"Authorization: Bearer {FAKE_TOKEN}",
        "--header",
        f"x-api-key: {FAKE_TOKEN}",
        "--base-url",
        f"https://user:{FAKE_TOKEN}@example.com/v1?api_key={FAKE_TOKEN}&x=1",
        "--model",
        "m",
        "--prompt-note",
        f"uses {FAKE_KEY}",
    ]
    got = redact_argv(argv)
    text = " ".join(got)
    assert FAKE_KEY not in text and FAKE_TOKEN not in text
    assert got[:8] == ["kneecap", "bench", "--api-key", "<redacted>", "--token=<redacted>", "--max-tokens", "128", "-H"]
    assert "--model m" in text and "example.com/v1" in text and "x=1" in text


def test_manifest_never_contains_the_key(tmp_path):
    results = ResultsDir(tmp_path)
    argv = [
        "kneecap",
        "bench",
        "--base-url",
        "http://127.0.0.1:1/v1",
        "--api-key",
        FAKE_KEY,
        "-H",
        f"Authorization: Bearer {FAKE_TOKEN}",
    ]
    extra = {
        "headers": {"Authorization": f"Bearer {FAKE_TOKEN}", "Accept": "text/event-stream"},
        "api_key": FAKE_KEY,
        "server": {"url": "http://127.0.0.1:1", "notes": [f"key {FAKE_KEY}"]},
        "bench_options": {
            "api_key_env": "MY_KEY_VAR",
            "api_key_file": None,
            "max_tokens": 64,
            "token_id_prompts": True,
        },
    }
    manifest = results.write_manifest(argv, extra)
    results.write_summary(
        build_summary("bench", [], None, None, model_executed=True, benchmark_executed=True, manifest=manifest)
    )
    for path in tmp_path.rglob("*"):
        data = path.read_bytes()
        assert FAKE_KEY.encode() not in data and FAKE_TOKEN.encode() not in data, path
    on_disk = results.read_manifest()
    assert on_disk["headers"]["Accept"] == "text/event-stream"
    # where the key lives (an env variable name) and non-string settings survive for --resume
    assert on_disk["bench_options"] == {
        "api_key_env": "MY_KEY_VAR",
        "api_key_file": None,
        "max_tokens": 64,
        "token_id_prompts": True,
    }
    assert on_disk["command"][:4] == ["kneecap", "bench", "--base-url", "http://127.0.0.1:1/v1"]
    for key in ("kneecap_version", "python", "os", "cpu_model", "cpu_count", "gpus", "created_at"):
        assert key in on_disk
    assert os.uname().nodename not in results.manifest_path.read_text()  # hostname-free
