"""Layer 5 driver: the adaptive sharded learning experiment (seeds/000_68e22071b780b909.txt).

The flow is contract -> prepare -> train (cohort A with the 2 -> 3 migration and its uninterrupted
control; cohort B with growth and its fixed-depth control) -> evaluate (development) -> select ->
evaluate (final) -> gates. `schema` validates the frozen contract (contracts/adaptive-shards*.json);
`prepare` turns the contract, the seed's headers and the data sources into digest-bound role files,
the per-update schedule, the planner's ownership manifests, `prepared.json` and the input and
source commitments (`adaptive-shards-inputs.json`) that training re-checks before its first update.
`train` runs a cohort arm with the local launcher; `torchrun` runs it as one rank of a torchrun group
across hosts with nothing shared on disk.
"""

from kit.adaptive import sidecars as _sidecars
from kit.evidence.inspect import StoreReader, register_store_reader

# the run inspection (kit/evidence/inspect.py) reads an adaptive run's store through this reader
register_store_reader(StoreReader("adaptive", _sidecars.store_curves, _sidecars.store_home))
