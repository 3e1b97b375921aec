"""Capacity planning: the HBM ledger (ledger.py), levers and sweeps on changed deployments
(levers.py, sweeps.py), engine pool models (engines.py), the sweep preflight (preflight.py)
and the worksheet text (render.py). Pure except render, which only formats.
"""
