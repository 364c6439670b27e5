"""GPU evaluation time at the 1.7B shape: one model's scores on the final roles of a prepared adaptive job.

Run on the GPU host after the campaign's seed and prepare phases (they leave WORK/seed and WORK/prepared):

    python3 -m campaigns.adaptive_gpu_campaign --out $OUT/agc --work /tmp/agc --phases seed,prepare
    PYTHONPATH=. python3 bench/eval_timing.py --prepared /tmp/agc/prepared --out $OUT/eval-timing

It scores the seed exactly as `kit adaptive evaluate --device cuda` scores each of its two models
(kit.adaptive.evaluation._scores, with a fresh score cache so nothing is reused): NLL of every final
task and every retention probe in batches, then a greedy reply to every final task with the cached
decoder (kit/model/cached_decode.py). With random weights no reply ever emits the end token, so every
reply runs the full `max_new_tokens`: the worst case. `kit adaptive evaluate` scores two models, so its
time is about twice the per-model figure (each endpoint is then cached for its next comparison).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import kit.numerics

kit.numerics.apply()  # the numeric profile before torch computes
import torch  # noqa: E402

from kit.adaptive.continued_schema import job_contract  # noqa: E402
from kit.adaptive.evaluation import FINAL_ROLES, role_file  # noqa: E402
from kit.data.chat import load_tokenizer  # noqa: E402
from kit.data.conversations import read_jsonl  # noqa: E402
from kit.digest import load_json_strict, sha256_file  # noqa: E402
from kit.evaluation.scoring import answer_tasks, eval_batch_sizes, load_model, score_nll  # noqa: E402
from kit.evidence.environment import code_state, device_info, versions  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

TARGET_S = 300.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--prepared", required=True, help="a prepared adaptive job (kit adaptive prepare --out)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "eval-timing"))
    ap.add_argument("--run-id", default=None)
    a = ap.parse_args(argv)
    prepared = Path(a.prepared)
    pj = load_json_strict(prepared / "prepared.json")
    c = job_contract(pj)
    seed_dir = pj["locations"]["seed"]
    started = dt.datetime.now(dt.UTC)
    run_id = a.run_id or f"bench-eval-timing-{started.strftime('%Y-%m-%d')}"
    run_dir = Path(a.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(seed_dir)
    data = {k: read_jsonl(*role_file(prepared, r)) for k, r in FINAL_ROLES.items()}
    max_tokens, max_new = c.training.max_tokens, c.evaluation.max_new_tokens
    nll_batch, answer_batch = eval_batch_sizes(a.device)
    timings = {}
    t0 = time.perf_counter()
    model = load_model(seed_dir=seed_dir, device=a.device)
    timings["load_s"] = time.perf_counter() - t0

    def timed(name, fn):
        if a.device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        if a.device == "cuda":
            torch.cuda.synchronize()
        timings[name] = time.perf_counter() - t
        return out

    task_nll = timed("task_nll_s", lambda: score_nll(model, tok, data["tasks"], max_tokens, batch_size=nll_batch))
    ret_nll = timed("retention_nll_s", lambda: score_nll(model, tok, data["retention"], max_tokens, batch_size=nll_batch))
    answers = timed("greedy_answers_s", lambda: answer_tasks(model, tok, data["tasks"], max_new, batch_size=answer_batch))
    scoring = timings["task_nll_s"] + timings["retention_nll_s"] + timings["greedy_answers_s"]
    reply_tokens = [len(tok(x["reply"])["input_ids"]) for x in answers[:64]]
    ended = dt.datetime.now(dt.UTC)
    record = {
        "format": "kit-bench/1", "run_id": run_id, "notebook": None,
        "command": " ".join(["python", "bench/eval_timing.py", *(sys.argv[1:] if argv is None else argv)]),
        "git": code_state(), "versions": versions(runtime=True),
        "parameters": {"device": a.device, "max_tokens": max_tokens, "max_new_tokens": max_new,
                       "nll_batch": nll_batch, "answer_batch": answer_batch,
                       "seed_params": sum(p.numel() for p in model.parameters()),
                       "weights_dtype": str(next(model.parameters()).dtype),
                       "tf32": torch.backends.cuda.matmul.allow_tf32 if a.device == "cuda" else None,
                       "prepared_sha256": sha256_file(prepared / "prepared.json"),
                       "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()},
        "status": "completed",
        "started_at": started.isoformat(timespec="seconds"), "ended_at": ended.isoformat(timespec="seconds"),
        "results": {"final_tasks": len(data["tasks"]), "retention_probes": len(data["retention"]),
                    "timings_s": timings, "scoring_s_per_model": scoring,
                    "evaluate_s_two_models_estimate": 2 * (scoring + timings["load_s"]),
                    "target_s_per_model": TARGET_S, "meets_target": scoring + timings["load_s"] < TARGET_S,
                    "tasks_correct": sum(x["correct"] for x in answers),
                    "mean_task_nll_per_token": sum(x["nll_sum"] for x in task_nll) / max(1, sum(x["tokens"] for x in task_nll)),
                    "mean_retention_nll_per_token": sum(x["nll_sum"] for x in ret_nll) / max(1, sum(x["tokens"] for x in ret_nll)),
                    "reply_tokens_first_64": reply_tokens,
                    "note": "random weights: no reply emits the end token, so every reply runs max_new_tokens"},
    }
    if a.device == "cuda":
        record["results"]["peak_memory_bytes"] = torch.cuda.max_memory_allocated()
    record["device"] = device_info(torch.device(a.device))
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"run_dir": str(run_dir), **{k: record["results"][k] for k in
                      ("final_tasks", "retention_probes", "timings_s", "scoring_s_per_model", "meets_target")}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
