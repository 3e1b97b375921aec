"""The simulated engine: continuous batching over a paged KV pool, in virtual time.

blocks.py     paged KV block manager (plain data: ref counts, prefix cache by block hash)
scheduler.py  one scheduling decision per step (decodes first, chunked prefill, FCFS, preemption)
dp_ranks.py   SGLang's DP attention: a scheduler per rank, each over its own share of the KV pool
steptime.py   roofline step time: max(compute, memory) + TP/PP communication + fixed overhead
config.py     EngineConfig with named vLLM-like and SGLang-like defaults
engine.py     the Engine: add_request / step(now) -> StepOutcome, records and trace
setup.py      plan -> SimDeployment (config, block count, step-time model) -> new_engine()
level_driver.py  the virtual-clock driver of the one level runner; SimulateOptions
sweep.py      the virtual-clock driver: closed loop, open loop, all at once; levels -> records
"""
