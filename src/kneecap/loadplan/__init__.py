"""Load plans (seed 004): workload classes x states x load steps x repetitions, against serving candidates.

schema.py validates the YAML file; cells.py expands it into ordered cells; verdicts.py judges cells
against SLO budgets and stop limits; capacity.py finds the region that passes in every repetition;
behaviour.py replays frozen behaviour cases; handoff.py writes the reproducible package;
execute.py drives the simulator or a server (the only I/O here).
"""
