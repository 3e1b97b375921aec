"""`kneecap serve`'s real-time wrapper keeps its memory bounded: the engine forgets the end times of
steps no held request needs, and every stream still gets exactly its tokens."""

from __future__ import annotations

import asyncio

from simkit import deployment
from kneecap.serve import realtime
from kneecap.sim.config import EngineConfig
from kneecap.sim.engine import Engine


class _Target:
    """What RealtimeEngine needs of a serve target: a fresh engine."""

    def new_engine(self) -> Engine:
        return Engine(deployment(block_size=16), EngineConfig(max_num_seqs=8, max_num_batched_tokens=256), 4096)


def test_serve_engine_forgets_finished_steps_and_streams_stay_exact(monkeypatch):
    monkeypatch.setattr(realtime, "STEP_TIMES_KEPT", 32)

    async def go():
        rt = realtime.RealtimeEngine(_Target(), time_scale=1e-3)  # a thousand times faster than real time
        rt.start()
        try:
            longest = 0
            for wave in range(6):  # waves of 4 requests of 60 output tokens: about 60 steps each
                slots = [rt.submit(20, 60) for _ in range(4)]
                while not all(s.done for s in slots):
                    await asyncio.sleep(0.001)
                    longest = max(longest, len(rt.engine.step_end_at))
                assert all(s.error is None and s.ready == 60 for s in slots), [(s.error, s.ready) for s in slots]
            return rt, longest
        finally:
            await rt.stop()

    rt, longest = asyncio.run(go())
    steps_run = rt.engine.stats.num_steps
    assert steps_run >= 6 * 60  # the engine really ran all those steps (prefill gives the first token)
    assert longest <= 32 + 2 * 60  # at most a wave or two past the threshold, never the whole history (360)
    assert len(rt.engine.step_end_at) < steps_run / 4
