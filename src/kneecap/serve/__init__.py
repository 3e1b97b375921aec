"""`kneecap serve`: the simulated engine in real time behind an OpenAI-compatible HTTP server.

pseudo_tokens.py the documented deterministic tokenizer (one whitespace-separated word = one token)
openai_wire.py  response bodies and SSE chunk bytes (completions and chat, vLLM's field layout)
prefix.py       content prefix caching: prompt token ids -> the simulator's prefix groups (never aliasing)
realtime.py     one asyncio task stepping kneecap.sim.engine.Engine against the wall clock
prom.py         /metrics in vLLM's Prometheus names
app.py          the aiohttp routes
"""
