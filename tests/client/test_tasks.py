import asyncio

import pytest

from kneecap.client.tasks import cancel_and_wait


def test_cancel_and_wait_ends_a_running_task_and_accepts_none():
    async def main():
        ticks = []

        async def loop():
            while True:
                ticks.append(1)
                await asyncio.sleep(0.001)

        task = asyncio.get_running_loop().create_task(loop())
        await asyncio.sleep(0.01)
        await cancel_and_wait(task)
        await cancel_and_wait(None)
        return task, len(ticks)

    task, n = asyncio.run(main())
    assert task.cancelled() and n >= 1


def test_cancel_and_wait_lets_a_failure_of_the_task_through():
    async def main():
        async def boom():
            raise ValueError("scrape broke")

        task = asyncio.get_running_loop().create_task(boom())
        await asyncio.sleep(0)
        await cancel_and_wait(task)

    with pytest.raises(ValueError, match="scrape broke"):
        asyncio.run(main())
