"""kit: a notebook-first, reproducible toolkit for sharded Llama training and paired-bootstrap gates.

Layers (a module imports only from its own layer or below; tests/test_layers.py enforces it):
0 pure (digest, inventory, model_config, stats, planner, contract) -> 1 data -> 2 math (model, train)
-> 3 distributed (dist) -> 4 storage (store) -> 5 drivers (seedbuild, adaptive, study, evidence, cli).
"""

__version__ = "0.1.0"
