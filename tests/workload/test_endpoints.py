"""One name per OpenAI endpoint, one check, one refusal: bench, simulate, the client, the embedded server and the
validation data all take them from kneecap.workload.endpoints."""

import pytest
from clitools import run_cli

from kneecap.client import openai
from kneecap.errors import KneecapError
from kneecap.serve import openai_wire
from kneecap.workload import endpoints


def test_paths_and_names():
    assert endpoints.ENDPOINTS == ("completions", "chat")
    assert endpoints.endpoint_path("completions") == "/v1/completions"
    assert endpoints.endpoint_path("chat") == "/v1/chat/completions"
    # the client and the embedded server speak the same names, not copies that could drift
    assert openai.CHAT is endpoints.CHAT and openai.COMPLETIONS is endpoints.COMPLETIONS
    assert openai_wire.CHAT is endpoints.CHAT and openai_wire.COMPLETIONS is endpoints.COMPLETIONS


def test_one_refusal():
    with pytest.raises(KneecapError) as err:
        endpoints.check_endpoint("grpc")
    line = err.value.one_line()
    assert "unknown --endpoint 'grpc'" in line and "--endpoint chat" in line
    with pytest.raises(KneecapError) as body_err:
        openai.request_body(model="m", prompt="hi", max_tokens=4, endpoint="grpc")
    assert body_err.value.one_line() == line


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1", "--isl", "8", "--osl", "4"],
        ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "1", "--requests", "4"],
    ],
)
def test_bench_and_simulate_refuse_alike(argv, tmp_path):
    res = run_cli(*argv, "--endpoint", "grpc", "--out", str(tmp_path / "o"))
    assert res.code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown --endpoint 'grpc'" in lines[0] and "--endpoint chat" in lines[0], res.stderr
