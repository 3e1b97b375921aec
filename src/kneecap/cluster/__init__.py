"""Scale-out on Ray: a bench level's streams spread over Ray actors across machines (`--ray`), and
simulation grids run as Ray tasks. Ray is optional (`pip install 'kneecap[ray]'`); nothing here
imports it until a command asks for a cluster. Drivers only: no statistics, no sweep order.
"""
