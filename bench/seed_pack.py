"""The small seed's encode-and-pack step, the kit's against the code it replaced, side by side in one process.

    PYTHONPATH=. python3 bench/seed_pack.py --out OUT [--config campaigns/seed-probes/pN.json] [--repeats 2]

The seed build (`kit seed build --scale small`) spent 74 s of a 354 s build on encoding its conversations
and packing them into rows (runs/seed-rebuilds-2026-12-01, `seconds.encode_and_pack`), on the GPU host's
CPU while the GPU waited. This bench reads the build's inputs and trains its tokenizer once, as the build
does, then packs them with the code it replaced (kit/seed/small.py `_pack` and kit/data/chat.py
`encode_single_turns` as they were at BASE = 5c22c05, read from git) and with the kit's `_pack` under
`collection_paused`, alternating, `--repeats` times each. Both outputs are reduced to one sha256 over every
row's ids, target mask and id, the conversation order and the skipped ids, and must be equal: the packed
rows decide the seed's parameter digest. Writes OUT/<run-id>/run.json (kit-bench/1) and prints its results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from kit.data import general_text
from kit.evidence.environment import code_state, device_info, versions
from kit.seed import small

REPO = Path(__file__).resolve().parents[1]


# --- the reference: the code the kit ran before, loaded from git at BASE ---------------------------------
BASE = "5c22c05"  # the last commit before the faster packing


def module_at(commit: str, path: str, name: str) -> types.ModuleType:
    """The module `path` as it was at `commit`, loaded under `name` (its imports resolve to today's kit)."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{commit}:{path}"], capture_output=True, text=True,
                            check=True).stdout
    module = types.ModuleType(name)
    module.__file__ = f"{commit}:{path}"
    sys.modules[name] = module  # dataclasses look their module up while the class body runs
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 (our own code at BASE)
    return module


def reference_packer():
    """BASE's `_pack`, calling BASE's `encode_single_turns`, with the collector on, as the build ran it."""
    chat = module_at(BASE, "kit/data/chat.py", "reference_chat")
    seed = module_at(BASE, "kit/seed/small.py", "reference_small")
    seed.encode_single_turns = chat.encode_single_turns

    def pack(cfg, tokenizer, pad: int, inputs):
        p = seed._pack(cfg, tokenizer, pad, inputs)
        return p.rows, p.conv_order, p.skipped
    return pack


# --- the comparison ----------------------------------------------------------------------------------------
def packed_digest(rows, conv_order, skipped) -> str:
    """sha256 over every row (id, ids as int32, mask as bytes) in order, then the conversation order and the
    skipped ids: equal digests mean the training rows the seed is built from are equal."""
    h = hashlib.sha256()
    for r in rows:
        h.update(r.id.encode() + b"\0")
        h.update(np.asarray(r.input_ids, dtype=np.int32).tobytes())
        h.update(np.asarray(r.target_mask, dtype=np.bool_).tobytes())
    h.update(np.asarray(conv_order, dtype=np.int64).tobytes())
    h.update(json.dumps(skipped).encode())
    return h.hexdigest()


def kit_pack(cfg, tokenizer, pad: int, inputs):
    with small.collection_paused():
        p = small._pack(cfg, tokenizer, pad, inputs)
    return p.rows, p.conv_order, p.skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="a SmallSeedConfig JSON (campaigns/seed-probes/*.json); default: the defaults")
    ap.add_argument("--repeats", type=int, default=2, help="packs of each implementation, alternating")
    ap.add_argument("--out", required=True)
    ap.add_argument("--run-id", default=None)
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats {a.repeats}: expected at least 1")
    cfg = small.SmallSeedConfig.from_json(a.config) if a.config else small.SmallSeedConfig.small()
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    inputs = small._read_inputs(cfg, REPO / small.ALPACA_FILE, REPO / general_text.TEXT_FILE, REPO / "contracts")
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as staging:
        tokenizer, ids = small._train_tokenizer(cfg, inputs, Path(staging))
    t2 = time.perf_counter()
    pad = ids[small.PAD_TOKEN]
    reference = reference_packer()
    runs = {"reference": [], "kit": []}
    digests = {"reference": set(), "kit": set()}
    counts = {}
    for _ in range(a.repeats):
        for name, pack in (("reference", reference), ("kit", kit_pack)):
            gc.collect()
            t = time.perf_counter()
            rows, order, skipped = pack(cfg, tokenizer, pad, inputs)
            runs[name].append(round(time.perf_counter() - t, 2))
            digests[name].add(packed_digest(rows, order, skipped))
            counts[name] = {"rows": len(rows), "conversations_packed": len(order), "skipped": len(skipped)}
            del rows, order, skipped
            print(json.dumps({name: runs[name][-1]}), flush=True)
    identical = len(digests["reference"]) == 1 and digests["reference"] == digests["kit"]
    best = {k: min(v) for k, v in runs.items()}
    run_id = a.run_id or f"bench-seed-pack-{started.strftime('%Y-%m-%d')}"
    run_dir = Path(a.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    import torch

    record = {
        "format": "kit-bench/1", "run_id": run_id, "notebook": "(benchmark script)",
        "command": " ".join(["python", "bench/seed_pack.py", *(sys.argv[1:] if argv is None else argv)]),
        "git": code_state(),
        "versions": versions(runtime=True),
        "parameters": {"reference": f"kit/seed/small.py and kit/data/chat.py at {BASE}", "config": a.config,
                       "repeats": a.repeats, "tasks": cfg.tasks, "task_epochs": cfg.task_epochs,
                       "seq_len": cfg.seq_len, "batch_rows": cfg.batch_rows,
                       "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()},
        "status": "completed" if identical else "failed",
        "started_at": started.isoformat(timespec="seconds"),
        "ended_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": device_info(torch.device("cpu")),
        "results": {"identical": identical, "packed_sha256": sorted(digests["reference"] | digests["kit"]),
                    "counts": counts, "seconds": runs, "best_seconds": best,
                    "kit_over_reference": round(best["kit"] / best["reference"], 4),
                    "inputs_seconds": round(t1 - t0, 2), "tokenizer_seconds": round(t2 - t1, 2)},
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"run_dir": str(run_dir), **record["results"]}))
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
