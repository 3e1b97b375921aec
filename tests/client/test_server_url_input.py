"""Server URLs and API keys as users hand them in: a URL carrying a key (user:password@, ?api_key=) and a key
holding a line break are one error naming where the problem is, never repeating the secret."""

from __future__ import annotations

import pytest

from kneecap.client.server_info import check_server_url
from kneecap.errors import KneecapError
from kneecap.sweep.credentials import resolve_api_key


@pytest.mark.parametrize(
    "url,said",
    [
        ("http://bob:sk-SECRET@127.0.0.1:8000", "carries credentials"),
        ("http://sk-SECRET@127.0.0.1:8000", "carries credentials"),
        ("http://127.0.0.1:8000/?api_key=sk-SECRET", "?query or #fragment"),
        ("http://127.0.0.1:8000/v1#sk-SECRET", "?query or #fragment"),
        ("http://127.0.0.1:99999", "not a valid URL"),
        ("127.0.0.1:8000", "must be an http(s) URL"),
    ],
)
def test_a_url_kneecap_cannot_use_is_named_without_its_secret(url, said):
    with pytest.raises(KneecapError) as exc:
        check_server_url(url, "--base-url")
    line = exc.value.one_line()
    assert said in line and "SECRET" not in line, line
    assert "http://127.0.0.1:8000" in line or said == "not a valid URL" or said.startswith("must"), line


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "https://host.example/", "http://[::1]:8000/v1"])
def test_server_roots_pass(url):
    check_server_url(url, "--base-url")


def test_a_key_with_a_line_break_is_named_by_its_variable_never_shown():
    with pytest.raises(KneecapError) as exc:
        resolve_api_key(environ={"KNEECAP_API_KEY": "sk-SECRET\nX-Other: 1"})
    line = exc.value.one_line()
    assert "KNEECAP_API_KEY" in line and "control character" in line and "SECRET" not in line, line
    with pytest.raises(KneecapError, match="MY_KEY holds a control character"):
        resolve_api_key("MY_KEY", environ={"MY_KEY": "sk-a\tb"})
    assert resolve_api_key(environ={"OPENAI_API_KEY": "  sk-fine \n"}) == "sk-fine"
