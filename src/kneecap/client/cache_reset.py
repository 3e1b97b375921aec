"""Ask a server to drop its prefix cache before a level (so a level starts cold, whatever ran before it): vLLM's
POST /reset_prefix_cache, SGLang's POST /flush_cache, kneecap serve's /reset_prefix_cache. Returns the endpoints
that accepted; an engine with neither (llama.cpp) is left as it is."""

from __future__ import annotations

RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")


def reset_prefix_cache(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> list[str]:
    import urllib.request

    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    done = []
    for path in RESET_PATHS:
        try:
            req = urllib.request.Request(root + path, data=b"", method="POST", headers=headers)
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                if resp.status < 300:
                    done.append(path)
        except Exception:  # no such endpoint, or it refused (requests still running): nothing was reset there
            pass
    return done
