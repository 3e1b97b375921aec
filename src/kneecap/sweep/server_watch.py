"""Per-level server metrics without touching the driver's event loop.

kneecap.client.server_metrics.MetricsPoller is an asyncio task; the level's event loop belongs to
the driver (or lives in worker processes), so the poller runs on a small event loop of its own in
a background thread, scraping GET /metrics about once a second. Owns that thread only.
"""

from __future__ import annotations

import asyncio
import threading

POLL_INTERVAL_S = 1.0  # one scrape a second: a negligible load on the client and the server
STOP_TIMEOUT_S = 10.0  # the last scrape is bounded by the poller's own 2 s timeout


class ThreadedMetricsPoller:
    """Context manager: scrape the server's /metrics from entry to exit; `result()` -> dict or None."""

    def __init__(self, base_url: str, api_key: str | None, interval_s: float = POLL_INTERVAL_S):
        self._base_url = base_url
        self._api_key = api_key
        self._interval_s = interval_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._result: dict | None = None
        self._samples: list[dict] = []

    def _main(self) -> None:
        from kneecap.client.server_metrics import MetricsPoller

        async def watch() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            poller = MetricsPoller(self._base_url, self._interval_s, api_key=self._api_key)
            poller.start()
            self._ready.set()
            await self._stop.wait()
            self._result = (await poller.stop()).to_dict()
            self._samples = [
                dict(
                    at_s=x.at_s,
                    kv_usage=x.kv_usage,
                    running=x.running,
                    waiting=x.waiting,
                    preemptions_total=x.preemptions_total,
                )
                for x in poller.samples
            ]

        try:
            asyncio.run(watch())
        except Exception:  # scraping must never break a level; the level just has no server metrics
            self._result = None
        finally:
            self._ready.set()

    def __enter__(self) -> "ThreadedMetricsPoller":
        self._thread = threading.Thread(target=self._main, name="kneecap-metrics-poller", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=STOP_TIMEOUT_S)
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None and self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop already ended
                pass
        if self._thread is not None:
            self._thread.join(timeout=STOP_TIMEOUT_S)

    def samples(self) -> list[dict]:
        """Every scrape of the level: at_s (time.perf_counter), kv_usage (0-1), running, waiting, preemptions_total."""
        return self._samples

    def result(self) -> dict | None:
        """kv_usage_max (0-1), running_max, waiting_max, preemptions_delta, num_samples... or None."""
        return self._result
