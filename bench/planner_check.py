"""The planner's estimate, as admission computes it now, against the peaks committed GPU records measured.

    python bench/planner_check.py runs/bench-pipeline-x2-2026-11-30 runs/bench-pipeline-short-x2-2026-11-30

For a `bench/pipeline_throughput.py` record it re-estimates every rank of every section; for a directory
holding a campaign's `updates.json` (`campaigns/adaptive_gpu_campaign.py`, also `campaign/` inside a pipeline
record) every rank of every update. The estimate is kit.engine.admission.worker_estimate with the GPU regime
(kit.planner.GPU_BF16) and no reserve, for the layout that ran, the microbatch size and count, and the
longest microbatch padded to the CUDA length bucket; the measured peak is the record's
`torch.cuda.max_memory_allocated`. Records made before the regime was corrected carry the old estimate;
this prints the current one, so docs/planner.md's table is reproducible from committed files alone.
No GPU is needed: it reads records and computes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kit.distributed.pipeline import CUDA_LENGTH_BUCKET
from kit.engine.admission import worker_estimate
from kit.model.config import smollm2_17b
from kit.model.shard import Layout
from kit.planner import GPU_BF16

REPO = Path(__file__).resolve().parents[1]


def bucketed(length: int) -> int:
    return -(-int(length) // CUDA_LENGTH_BUCKET) * CUDA_LENGTH_BUCKET


def _row(label: str, shape, layout: Layout, ranks: list[dict], micro: int, seq: int, n_micro: int) -> dict:
    out = []
    for r in ranks:
        est = worker_estimate(shape, layout, r["rank"], (micro, seq), n_micro, dict(GPU_BF16)).total
        peak = r["peak_memory_bytes"]
        out.append({"rank": r["rank"], "peak_gib": round(peak / 2**30, 2), "estimate_gib": round(est / 2**30, 2),
                    "error": round(est / peak - 1, 4)})
    return {"what": label, "ranks": out}


def pipeline_rows(record: dict) -> list[dict]:
    p = record["parameters"]
    shape = smollm2_17b()
    return [_row(f"{record['run_id']} {name}", shape, Layout.from_json(s["layout"]), s["ranks"], p["micro"],
                 bucketed(p["seq"]), p["microbatches"]) for name, s in record["results"]["sections"].items()]


def campaign_rows(updates: list[dict], micro: int, label: str) -> list[dict]:
    rows = []
    shape0 = smollm2_17b()
    for u in updates:
        ranks = [r for r in u["ranks"] if r.get("peak_memory_bytes")]
        if not ranks:
            continue
        layout = Layout(tuple(tuple(r["blocks"]) for r in sorted(u["ranks"], key=lambda r: r["rank"])))
        shape = shape0.with_layers(layout.num_layers)
        rows.append(_row(f"{label} {u['phase']} step {u['step']} ({u['workers']} ranks)", shape, layout, ranks,
                         micro, bucketed(max(u["microbatch_lengths"])), len(u["microbatch_lengths"])))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", help="run directories (pipeline records, or campaign record folders)")
    ap.add_argument("--campaign-microbatch", type=int, default=8,
                    help="documents per microbatch of the campaign's contract (its training.microbatch_size)")
    a = ap.parse_args(argv)
    rows = []
    for d in map(Path, a.records):
        if (d / "run.json").is_file() and json.loads((d / "run.json").read_text()).get("results", {}).get("sections"):
            rows += pipeline_rows(json.loads((d / "run.json").read_text()))
        for updates in sorted([d / "updates.json", *d.glob("*/updates.json")]):
            if updates.is_file():
                rows += campaign_rows(json.loads(updates.read_text()), a.campaign_microbatch, str(updates.parent))
    if not rows:
        raise SystemExit(f"no pipeline sections or campaign updates.json under {', '.join(a.records)}")
    for row in rows:
        print(json.dumps(row))
    worst = max(abs(r["error"]) for row in rows for r in row["ranks"])
    print(json.dumps({"rows": len(rows), "worst_abs_error": worst}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
