"""Ownership manifests: which worker owns which blocks and tensors, as the capacity planner assigns
them (contiguous blocks; the embedding owner also holds the tied head and the final norm), for every
worker count the contract uses and for the grown depth. `kit adaptive prepare` writes them into the
prepared job (`ownership.json`, docs/formats/adaptive-preparation.md); training reads its layout back with `planned_layout`."""

from __future__ import annotations

import re
from pathlib import Path

from kit.adaptive.formats import (
    OWNERSHIP_FORMAT,
    OwnershipManifests,
    PlannedLayout,
    WorkerShare,
    load_layout_choices,
)
from kit.adaptive.schema import REGIMES, AdaptiveContract
from kit.model.config import LlamaShape
from kit.planner import MemoryModel, MicrobatchShape, WorkerCapacity, plan, shape_with_growth

OWNERSHIP_FILE = "ownership.json"


def _block_of(name: str) -> int | None:
    m = re.match(r"^model\.layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def memory_model_of(terms: AdaptiveContract) -> dict:
    """The contract's planner regime and reserve as kit.planner.MemoryModel fields (planning and admission)."""
    return {**REGIMES[terms.planner.regime], "reserve_bytes": terms.planner.reserve_bytes}


def planned_layout(prepared: Path, layers: int, workers: int):
    """The planner's layout for `workers` at depth `layers` from the prepared ownership manifest (verified
    by check_inputs before any worker starts), or None when the manifest has none for that pair."""
    path = Path(prepared) / OWNERSHIP_FILE
    if not path.is_file():  # a job prepared without ownership manifests (kit continued prepare): even split
        return None
    for x in load_layout_choices(path).layouts:
        if x.workers == workers and x.num_hidden_layers == layers:
            layout = x.layout()
            layout.validate(layers)
            return layout
    return None


def _layout_manifest(terms: AdaptiveContract, shape: LlamaShape, names: dict[str, int | None], workers: int,
                     grown: bool) -> PlannedLayout:
    """One planner assignment and, per worker, the tensor names it owns (blocks; rank 0 also the rest)."""
    tr = terms.training
    docs = max(terms.cohorts.A.documents_per_update, terms.cohorts.B.documents_per_update)
    # The plan counts every microbatch of an update in flight: an upper bound of what the tick schedule
    # keeps (min(M, 2W) on the embedding owner, less elsewhere; kit/distributed/pipeline.in_flight), kept so that
    # prepared manifests (and every digest downstream of them) stay as committed. Each worker's admission
    # (kit.engine.admission.worker_estimate) counts its own rank's exact terms before it allocates.
    mb = MicrobatchShape(tr.microbatch_size, tr.max_tokens, -(-docs // tr.microbatch_size))
    model = MemoryModel(**memory_model_of(terms))
    capacity = terms.planner.worker_memory_bytes
    p = plan(shape, [WorkerCapacity(f"worker{i}", capacity) for i in range(workers)], mb, model)
    detail = []
    for rank, ((a, b), est) in enumerate(zip(p.ranges, p.estimates)):
        owned = sorted(n for n, blk in names.items() if blk is not None and a <= blk < b)
        owned += sorted(n for n, blk in names.items() if blk is None) if rank == p.embedding_owner else []
        detail.append(WorkerShare(rank=rank, blocks=(a, b), owns_embedding=rank == p.embedding_owner,
                                  estimate_bytes=est.total, utilization=p.utilizations[rank], tensors=tuple(owned)))
    return PlannedLayout(workers=workers, num_hidden_layers=shape.num_hidden_layers, grown=grown,
                         blocks=tuple(tuple(r) for r in p.ranges), embedding_owner=p.embedding_owner,
                         peak_utilization=p.peak_utilization, per_worker=tuple(detail))


def ownership_manifests(terms: AdaptiveContract, shape: LlamaShape, inv: dict, inv_digest: str) -> dict:
    """Planner layouts for the seed depth at every worker count of the contract, and for the grown depth: the
    JSON of ownership.json (`OwnershipManifests`, built by keyword).

    Equal capacities (planner.worker_memory_bytes each): the assignment then minimises the largest
    estimate, and the value only decides feasibility. Grown tensors are the copy block's names under
    the new block indices (kit/model/growth.py); they are not in the seed.
    """
    names = {n: _block_of(n) for n in inv}
    g = terms.growth
    grown_names = dict(names)
    copied = [n for n, blk in names.items() if blk == g.copy_block]
    for k in range(g.add_blocks):
        new = shape.num_hidden_layers + k
        grown_names |= {n.replace(f"model.layers.{g.copy_block}.", f"model.layers.{new}.", 1): new for n in copied}
    counts = sorted({terms.cohorts.A.workers, terms.migration.to_workers, terms.cohorts.B.workers})
    layouts = [_layout_manifest(terms, shape, names, w, False) for w in counts]
    layouts.append(_layout_manifest(terms, shape_with_growth(shape, g.add_blocks), grown_names,
                                    terms.cohorts.B.workers, True))
    return OwnershipManifests(format=OWNERSHIP_FORMAT, seed_inventory_digest=inv_digest, regime=terms.planner.regime,
                              worker_memory_bytes=terms.planner.worker_memory_bytes,
                              reserve_bytes=terms.planner.reserve_bytes, layouts=tuple(layouts)).to_json()
