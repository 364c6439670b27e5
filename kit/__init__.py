"""kit: a notebook-first, reproducible toolkit for sharded Llama training and paired-bootstrap gates.

Layers (a module imports only from its own layer or below; tests/test_layers.py enforces it):
0 pure (digest, inventory, model.config, stats, planner, contract) -> 1 data -> 2 math (model, train,
numerics) -> 3 distributed -> 4 storage (store) -> 5 drivers (engine, seed, evaluation, adaptive, study,
evidence, cli).
"""

import importlib

__version__ = "0.1.0"

# The numeric profile (kit/numerics.py explains each setting). `import kit` only names it:
# kit.numerics.apply() sets it, before torch computes anything. Nothing here touches the process.
NUMERIC_PROFILE = "kit-cpu-portable/1"
NUMERIC_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
