"""The shared-gradient method study (seeds/004_c2816a6b0f4864c9.txt): single, dense pair and PowerSGD
pair over one common AdamW, with throughput, wire traffic, GPU cost and the quality screen.

- `schema`: the contract schema and its cross-field rules.
- `prepare`: inputs committed by digest (documents, schedule, final tests, retention probes).
- `arms`: the replica worker and the driver (availability, projection, launch, records).
- `compression_state`: the PowerSGD state committed next to the weights.
- `cost`: projection against the deadline and the bound; the cost table.
- `screens`: freeze, scoring, paired changes, retention bound, quality and speed screens.

kit/cli/study.py holds its commands (`kit study prepare|arm|evaluate|screens|status`);
docs/study.md explains the study; docs/formats/study-records.md ("Shared-gradient study records") its files.
"""

from kit.evidence.inspect import StoreReader, register_store_reader
from kit.study import sidecars as _sidecars

# the run inspection (kit/evidence/inspect.py) reads an arm's store through this reader
register_store_reader(StoreReader("study", _sidecars.store_curves, _sidecars.store_home))
