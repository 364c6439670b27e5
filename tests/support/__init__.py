"""Helpers shared by the test modules, and the launcher entries the tests' workers run.

Test modules import from here (`from support.engine import OPT`), never from each other; fixtures
live in tests/conftest.py. Launched workers import these modules by name (entries such as
`support.engine_workers:train_worker`), so their PYTHONPATH carries tests/ (`launch_env()`).
"""
