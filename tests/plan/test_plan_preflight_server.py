"""`kneecap preflight --server URL` against a local fake engine (stdlib HTTP server on a free port)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

SGLANG_INFO = {
    "max_total_num_tokens": 1_573_854,
    "max_running_requests": 2048,
    "page_size": 1,
    "context_length": 262144,
    "version": "0.5.2",
}
VLLM_METRICS = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",gpu_memory_utilization="0.9",'
    'num_gpu_blocks="8644"} 1.0\n'
)


def serve(routes: dict[str, tuple[str, bytes]]):
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server API)
            seen.append(self.path)
            if self.path in routes:
                ctype, body = routes[self.path]
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_error(404)

        def log_message(self, *args):  # keep the test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, seen


@pytest.fixture
def sglang_server():
    server, seen = serve({"/get_server_info": ("application/json", json.dumps(SGLANG_INFO).encode())})
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def vllm_server():
    models = {"object": "list", "data": [{"id": "m", "owned_by": "vllm", "max_model_len": 8192}]}
    server, seen = serve(
        {
            "/metrics": ("text/plain", VLLM_METRICS.encode()),
            "/v1/models": ("application/json", json.dumps(models).encode()),
        }
    )
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_preflight_reads_sglang_capacity(cli, sglang_server):
    url, seen = sglang_server
    r = cli("preflight", "--server", url, "--isl", "1000", "--osl", "1000", "--concurrency", "512,1024,2048", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kv_capacity_tokens"] == 1_573_854
    assert [lv["verdict"] for lv in doc["levels"]] == ["fits", "tight", "exceeds"]
    assert doc["block_size"] == 1  # SGLang's page size, as the server reported it
    assert doc["server"]["engine"] == "sglang"
    assert "/get_server_info" in seen


def test_preflight_reads_vllm_capacity(cli, vllm_server):
    url, seen = vllm_server
    r = cli("preflight", "--server", url, "--isl", "1000", "--osl", "1000", "--concurrency", "64,128", "--json")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kv_capacity_tokens"] == 138_304  # 8644 blocks x 16
    assert doc["max_safe_concurrency"] == 69
    assert "/metrics" in seen


def test_server_without_capacity_is_a_one_line_error(cli):
    server, _ = serve({"/v1/models": ("application/json", b'{"data": [{"id": "x", "owned_by": "someone"}]}')})
    try:
        r = cli("preflight", "--server", f"http://127.0.0.1:{server.server_address[1]}", "--concurrency", "8")
    finally:
        server.shutdown()
        server.server_close()
    assert r.code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--kv-tokens" in lines[0]
