"""recommend: the cheapest deployment (GPU, parallelism, dtypes, engine limits, replicas) that meets an SLO
at a stated load, with the Pareto frontier around it and the `kneecap bench` run that would confirm it.

Orchestration over the core: plan_deployment prunes what cannot fit, a roofline bound skips what cannot
win, the simulated engine (find_max over virtual-time levels) prices the rest. Modules: prices (the $/GPU-hour
table), space (the request and the candidate grid), classes (a --classes mix), bound, evaluate, search,
confirm. No flags, no rendering.
"""
