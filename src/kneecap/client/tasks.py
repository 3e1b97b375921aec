"""Stopping a background asyncio task (a level's loop monitor, its /metrics scraper)."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel `task` (None: nothing to stop) and wait until it has ended; its cancellation is not re-raised."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
