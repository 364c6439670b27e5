"""kit: a notebook-first, reproducible toolkit for sharded Llama training and paired-bootstrap gates.

Layers (a module imports only from its own layer or below; tests/test_layers.py enforces it):
0 pure (digest, inventory, model.config, stats, planner, contract) -> 1 data -> 2 math (model, train,
numerics) -> 3 distributed -> 4 storage (store) -> 5 drivers (engine, seed, evaluation, adaptive, study,
evidence, cli).
"""

import os

__version__ = "0.1.0"

# The numeric profile (kit/numerics.py explains each setting). These are read by ATen, MKL and OpenMP
# once, at their first use, so they are set here, on `import kit`, before torch computes anything;
# they override the user's environment because a digest must not depend on it. Worker processes
# inherit them. kit.numerics.apply() checks that they took effect and records them.
NUMERIC_PROFILE = "kit-cpu-portable/1"
NUMERIC_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}
os.environ.update(NUMERIC_ENV)
if os.environ.get("KIT_GPU_DETERMINISTIC") == "1":  # cuBLAS reads this when it makes its first handle
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
