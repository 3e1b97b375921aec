"""The HTTP client: SSE parsing, OpenAI request bodies and chunk decoding, prompts, the async driver,
and what a live server reports about itself (capacity, Prometheus metrics).

Import submodules directly (kneecap.client.driver, ...): aiohttp stays off `kneecap plan`'s import path.
"""
