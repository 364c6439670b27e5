"""Development scoring of a study: one model (the seed or a commit) on the prepared development tasks.

A study contract with the optional `data.dev` gets `prepared/dev_tasks.jsonl` (kit/study/prepare.py);
a study pilot (campaigns/study_pilot.py) scores candidates on it to fix the contract's free choices. The
decision to know: only the development file is read. Its sha256 is checked against prepared.json alone
(`load_prepared` would re-hash every prepared file, final tasks included), nothing is written to the
exposure ledger (development tasks are never final), and the candidate freeze is never touched, so arms
may still run after a development scoring. Run as `python -m kit.study.dev --study STUDY --seed SEED
[--home HOME --root FULL_ROOT] --out FILE [--device cuda]`.

The record (docs/formats/study-records.md, "Shared-gradient study records"): greedy answers and summed task NLL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from kit import numerics
from kit.data.chat import load_tokenizer
from kit.data.conversations import read_jsonl
from kit.digest import write_canonical_json
from kit.evaluation.scoring import answer_tasks, eval_batch_sizes, load_model, score_nll
from kit.evidence.dev_evaluation_format import DevEvaluation, ModelSource, ProbeScore, SeedSource, TaskScore
from kit.inventory import parameter_digest
from kit.study.formats import StudyPreparedJob
from kit.study.prepare import DEV_FILE, PREPARED_DIR, PreparedError, check_seed, load_prepared_job

DEV_EVAL_FORMAT = "kit.study.dev-evaluation/1"


class DevScoringRefused(ValueError):
    pass


def dev_tasks_file(study_dir: str | os.PathLike) -> tuple[Path, str, Any, StudyPreparedJob]:
    """(prepared/dev_tasks.jsonl, its sha256, the prepared contract's terms, prepared.json) after checking the file against
    prepared.json and the contract against its recorded digest; refused when the study has no `data.dev`."""
    try:
        prepared, contract, _ = load_prepared_job(study_dir, only=(DEV_FILE,))
    except PreparedError as e:
        hint = "; the study's contract has no 'data.dev' (add one and prepare a new study directory)"
        raise DevScoringRefused(str(e) + (hint if "field 'files' has no" in str(e) else "")) from None
    out = Path(study_dir) / PREPARED_DIR
    got = prepared.files[DEV_FILE]
    return out / DEV_FILE, got, contract.terms, prepared


def score_dev(study_dir: str | os.PathLike, seed_dir: str | os.PathLike, out: str | os.PathLike,
              home: str | None = None, root: str | None = None, device: str = "cpu") -> DevEvaluation:
    """Score the seed (no `home`) or the commit `home`:`root` on the development tasks; write `out`."""
    if (home is None) != (root is None):
        raise DevScoringRefused(f"--home {home!r} --root {root!r}: give both (a commit) or neither (the seed)")

    path, sha, terms, prepared = dev_tasks_file(study_dir)
    check_seed(prepared, seed_dir)  # the tokenizer and the reference weights are the prepared ones
    tasks = read_jsonl(path)
    t0 = time.perf_counter()
    if home is None:
        source: SeedSource | ModelSource = SeedSource(seed_dir=str(seed_dir), parameter_digest=parameter_digest(seed_dir))
        model = load_model(seed_dir=str(seed_dir), device=device)
    else:
        assert root is not None, "home and root come together (checked above)"
        source = ModelSource(home=str(home), full_root=root)
        model = load_model(home=str(home), root=root, device=device)
    tokenizer = load_tokenizer(seed_dir)
    nll_batch, answer_batch = eval_batch_sizes(device)
    answers = answer_tasks(model, tokenizer, tasks, terms.evaluation.max_new_tokens, batch_size=answer_batch)
    nll = score_nll(model, tokenizer, tasks, terms.data.max_tokens, batch_size=nll_batch)
    record = DevEvaluation(
        format=DEV_EVAL_FORMAT, label="seed" if home is None else "commit", source=source, dev_tasks_sha256=sha,
        tasks=tuple(TaskScore.from_json(t, f"answer {i}") for i, t in enumerate(answers)),
        task_nll=tuple(ProbeScore.from_json(r, f"task NLL {i}") for i, r in enumerate(nll)),
        seconds=time.perf_counter() - t0,
        device=device if device != "cpu" else None)  # CPU records keep their bytes: no `device`
    write_canonical_json(out, record.to_json())
    return record


def main(argv=None) -> int:
    numerics.apply()  # digests and scores are compared across machines: the kit's numeric profile first
    p = argparse.ArgumentParser(allow_abbrev=False, prog="python -m kit.study.dev", description=__doc__.split("\n\n")[0])
    p.add_argument("--study", required=True, help="the prepared study directory (its contract has data.dev)")
    p.add_argument("--seed", required=True, help="the seed directory the study was prepared from")
    p.add_argument("--home", help="checkpoint store of the commit to score (default: score the seed)")
    p.add_argument("--root", help="full root of that commit")
    p.add_argument("--out", required=True, help="the development evaluation record to write (JSON)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    a = p.parse_args(argv)
    try:
        rec = score_dev(a.study, a.seed, a.out, a.home, a.root, a.device)
    except DevScoringRefused as e:
        print(f"python -m kit.study.dev: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": a.out, "tasks": len(rec.tasks), "correct": sum(r.correct for r in rec.tasks)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
