"""The client setup bench and run share (kneecap.client.setup): bad servers fail before the first level
with one line, and prompts are only sent in a way the server accepted."""

from __future__ import annotations

import functools
import http.server
import json
import textwrap
import threading

import pytest

from kneecap.client.server_info import ServerInfo
from kneecap.client.setup import (
    CHECK_USER,
    DEFAULT_TOKEN_IDS,
    UNCALIBRATED_TEXT,
    CheckAnswer,
    client_config,
    prompt_candidates,
    settle_prompts,
)
from kneecap.errors import KneecapError
from servers.scripted import start_scripted_server


@pytest.fixture
def scripted():
    servers = []

    def start(**knobs):
        url, srv = start_scripted_server(**knobs)
        servers.append(srv)
        return url, srv

    yield start
    for srv in servers:
        srv.stop()


@pytest.fixture
def html_server(tmp_path):
    """Not an OpenAI server: Python's static file server (404 HTML for /v1/models, 501 for POST)."""
    (tmp_path / "index.html").write_text("<html><body>a web site</body></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def bench(cli, url, tmp_path, *extra, env=None):
    out = tmp_path / "out"
    r = cli(
        "bench",
        "--base-url",
        url,
        "--isl",
        "16",
        "--osl",
        "4",
        "--concurrency",
        "1,2",
        "--requests",
        "4",
        "--out",
        str(out),
        "--no-report",
        "--quiet",
        *extra,
        env=env,
    )
    return r, out


def posts(srv) -> list[dict]:
    return [e for e in srv.log() if e.get("path", "").startswith("/v1/") and e["path"] != "/v1/models"]


def assert_one_line(stderr: str) -> None:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr


def test_a_wrong_api_key_stops_before_any_request_with_one_line(cli, scripted, tmp_path):
    url, srv = scripted(api_key="the-right-key")
    r, out = bench(cli, url, tmp_path, env={"KNEECAP_API_KEY": "a-wrong-key"})
    assert r.code == 2 and "refused the API key (HTTP 401)" in r.stderr and "--api-key-env" in r.stderr
    assert_one_line(r.stderr)
    assert "a-wrong-key" not in r.stderr and not out.exists()
    assert posts(srv) == []  # no completion was even tried: no retry storm
    r, out = bench(cli, url, tmp_path, env={"KNEECAP_API_KEY": "the-right-key"})
    assert r.code == 0, r.stderr


def test_a_model_the_server_does_not_serve_is_named_with_the_models_it_does(cli, scripted, tmp_path):
    url, srv = scripted(check_model=True, model="served-one")
    r, out = bench(cli, url, tmp_path, "--model", "not-served")
    assert r.code == 2 and "does not serve model 'not-served'" in r.stderr and "served-one" in r.stderr
    assert_one_line(r.stderr)
    assert not out.exists() and posts(srv) == []


@pytest.mark.parametrize("model", [None, "some-model"])
def test_a_server_that_is_not_openai_compatible_is_named_as_such(cli, html_server, tmp_path, model):
    r, out = bench(cli, html_server, tmp_path, *(["--model", model] if model else []))
    assert r.code == 2 and "is not an OpenAI-compatible server" in r.stderr, r.stderr
    assert ("POST /v1/completions answered HTTP 501" if model else "GET /v1/models answered HTTP 404") in r.stderr
    assert_one_line(r.stderr)
    assert not out.exists()


def test_a_small_vocabulary_server_gets_prompts_it_accepts_and_exact_lengths(cli, scripted, tmp_path):
    """vLLM states no vocabulary; ids from [1000, 30000) were HTTP 400 on a 260-token model. The scripted
    server refuses ids >= 260 as vLLM does; its /tokenize ids are not in range either, so the check moves
    on to text calibrated by /tokenize, and every request of every level completes."""
    url, srv = scripted(vocab_size=260)
    r, out = bench(cli, url, tmp_path, "--json")
    assert r.code == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["prompts"]["way"] == "text_server_tokenize"
    summary = json.loads((out / "summary.json").read_text())
    assert all(
        lv["completed"] == 4 and lv["failed"] == 0 and lv["token_mismatch"]["prompt"] == 0 for lv in summary["levels"]
    )
    checks = [e for e in srv.log() if (e.get("body") or {}).get("user") == CHECK_USER]
    assert [e.get("status", 200) for e in checks] == [400, 200]  # one refused way, one accepted, then the sweep


def test_run_against_a_small_vocabulary_server_completes(cli, scripted, tmp_path):
    url, srv = scripted(vocab_size=260)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        textwrap.dedent(f"""\
        name: small-vocab
        classes:
          c: {{input: 12, output: 3}}
        state: {{warmup_requests: 0}}
        load: {{steps: [1, 2], requests_per_cell: 4}}
        stop: {{stop_on_suspect: false}}
        candidates:
          - name: srv
            target: {{kind: server, base_url: "{url}", timeout_s: 10}}
        """)
    )
    # the prompts are what is tested: a loaded machine's event-loop lag (a suspect cell) must not stop the ramp
    r = cli("run", str(plan), "--out", str(tmp_path / "o"), "--json", "--no-report")
    assert r.code == 0, r.stderr
    cells = json.loads(r.stdout)["cells"]
    assert [c["metrics"]["failed"] for c in cells] == [0, 0] and all(c["metrics"]["completed"] == 4 for c in cells)


def test_every_prompt_way_refused_is_one_error_naming_tokenizer():
    info = ServerInfo(base_url="http://127.0.0.1:9", engine=None)
    cfg = client_config("http://127.0.0.1:9", model="m", endpoint="completions", api_key=None, timeout_s=5)
    ways = [
        c
        for c in prompt_candidates(info, endpoint="completions", model="m", api_key=None, salt="s")
        if c.way in (DEFAULT_TOKEN_IDS, UNCALIBRATED_TEXT)
    ]

    def refuse(cfg, content, timeout_s):
        return CheckAnswer(400, message="no", json_answer=True)

    with pytest.raises(KneecapError) as err:
        settle_prompts(cfg, ways, input_tokens=16, send=refuse)
    assert "refused every kind of prompt" in err.value.message and "--tokenizer" in err.value.hint


def test_a_chat_template_overhead_is_measured_by_the_check_and_kept():
    info = ServerInfo(base_url="http://127.0.0.1:9", engine="sglang")
    cfg = client_config("http://127.0.0.1:9", model="m", endpoint="chat", api_key=None, timeout_s=5)

    class Words:
        def count(self, text):
            return len(text.split())

    way = prompt_candidates(info, endpoint="chat", model="m", api_key=None, salt="s")[0]
    way = type(way)(way.way, way.detail, exact=False, counter=Words(), salt="s")

    def template(cfg, content, timeout_s):  # the server counts 9 template tokens around the text
        return CheckAnswer(200, prompt_tokens=len(content.split()) + 9, json_answer=True)

    chosen = settle_prompts(cfg, [way], input_tokens=30, send=template)
    assert chosen.overhead_tokens == 9 and chosen.exact
    from kneecap.workload import RequestSpec

    p = chosen.make(seed=1).prompt_for(
        RequestSpec(index=0, request_id="r", class_name="c", input_tokens=30, output_tokens=2)
    )
    assert len(p.content.split()) == 21 and p.num_tokens == 30


def test_prompts_are_new_every_run_unless_the_salt_is_given_again(cli, scripted, tmp_path):
    url, srv = scripted()

    def run(name, *extra):
        out = tmp_path / name
        r = cli(
            "bench",
            "--base-url",
            url,
            "--isl",
            "16",
            "--osl",
            "2",
            "--concurrency",
            "2",
            "--requests",
            "6",
            "--out",
            str(out),
            "--no-report",
            "--quiet",
            *extra,
        )
        assert r.code == 0, r.stderr
        salt = json.loads((out / "manifest.json").read_text())["bench_options"]["prompt_salt"]
        records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
        # by request id: at C=2 the records are written in completion order, which may differ between runs
        return salt, {rec["request_id"]: rec["prompt_hash"] for rec in records}

    salt_a, a = run("a")
    salt_b, b = run("b")
    salt_c, c = run("c", "--prompt-salt", salt_a)
    assert salt_a != salt_b and not set(a.values()) & set(b.values())  # same seed, new run: no prompt repeated
    assert salt_c == salt_a and c == a  # the recorded salt repeats the run's prompts exactly
    from kneecap.sweep.options import BenchOptions

    opts = BenchOptions(base_url=url, osl=2, isl=16, concurrency=(2,), prompt_salt=salt_a)
    assert BenchOptions.from_dict(opts.to_dict()).prompt_salt == salt_a  # what --resume reloads
    with pytest.raises(KneecapError):
        BenchOptions(base_url=url, osl=2, isl=16, concurrency=(2,), prompt_salt="")
