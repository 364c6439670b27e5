"""The development curve (kit/adaptive/dev_curve.py): every commit of a lineage scored on the development
roles, each point equal to what a development comparison of that model records, in training order only."""

from __future__ import annotations

import shutil

import pytest
import torch
from support.engine_workers import engine_config

from kit.adaptive.dev_curve import CURVE_FORMAT, curve_sidecars, dev_curve
from kit.adaptive.evaluation import EvaluateRequest, evaluate
from kit.adaptive.sidecars import accuracy_sidecars
from kit.digest import load_json_strict
from kit.distributed.group import Group
from kit.engine.session import Session
from kit.model.shard import even_layout
from kit.store.start import start_from_seed
from kit.train.optim import GroupConfig

MAX_TOKENS = 256


def _commit(seed, home, cursor):
    """A commit at `cursor` of the model in seed directory `seed`."""
    opt = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0}
    s = Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(4, 1), start_from_seed(str(seed)),
                engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), {"default": GroupConfig(**opt)})
    root, _ = s.commit(dict(cursor))
    return root


def _scaled_seed(seed, out):
    """The seed with its final norm tripled: another model, so that its scores differ."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(seed, out)
    t = load_file(str(out / "model.safetensors"))
    t["model.norm.weight"] = t["model.norm.weight"] * 3.0
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


@pytest.fixture
def lineage(prepared, tmp_path):
    p = tmp_path / "prepared"
    shutil.copytree(prepared["out"], p)
    home = tmp_path / "A"
    r4 = _commit(prepared["seed"], home, {"step": 4, "cohort": 0, "cohort_step": 4})
    r8 = _commit(_scaled_seed(prepared["seed"], tmp_path / "scaled"), home, {"step": 8, "cohort": 0, "cohort_step": 8})
    return {"p": p, "seed": prepared["seed"], "specs": [f"seed:{prepared['seed']}", f"{home}:{r4}", f"{home}:{r8}"],
            "tmp": tmp_path}


def test_each_point_is_what_a_development_comparison_of_that_model_records(lineage):
    seed, (s0, s4, s8) = lineage["seed"], lineage["specs"]
    out = lineage["tmp"] / "work" / "dev-curve.json"
    record = dev_curve(lineage["p"], {"A": [s0, s4, s8]}, out, str(seed), MAX_TOKENS, 4)
    assert record == load_json_strict(out) and record["format"] == CURVE_FORMAT
    points = record["points"]
    assert [(p["step"], p["cohort"], p["cohort_step"]) for p in points] == [(0, None, 0), (4, "A", 4), (8, "A", 8)]
    # the independent path: a development comparison of the endpoint against the seed, in another folder
    ev = evaluate(EvaluateRequest(prepared=lineage["p"], candidate=s8, baseline=s0, split="dev",
                                  out=lineage["tmp"] / "other" / "dev.json", tokenizer_dir=str(seed),
                                  max_tokens=MAX_TOKENS, max_new_tokens=4))
    acc = accuracy_sidecars(ev)["accuracy_by_family"]
    for point, side in ((points[2], "candidate"), (points[0], "baseline")):
        assert {f: (a["n"], a["correct"]) for f, a in point["accuracy"].items()} == \
               {f: (a["n"], a[f"correct_{side}"]) for f, a in acc.items()}
    tokens = sum(x["tokens"] for x in ev["tasks"])
    assert points[2]["task_nll_per_token"] == pytest.approx(sum(x["cand_nll"] for x in ev["tasks"]) / tokens,
                                                            rel=1e-12)
    assert points[0]["retention_nll_per_token"] == pytest.approx(
        sum(x["base_nll"] for x in ev["retention"]) / sum(x["tokens"] for x in ev["retention"]), rel=1e-12)
    # the step-4 commit holds the seed's weights: the same scores; the scaled endpoint scores otherwise
    assert points[1]["task_nll_per_token"] == points[0]["task_nll_per_token"]
    assert points[2]["task_nll_per_token"] != points[0]["task_nll_per_token"]
    # sidecars: one row per family and point, and one NLL row per point
    side = curve_sidecars(record)
    families = len(points[0]["accuracy"])
    assert len(side["dev_curve"]["rows"]) == 3 * families and len(side["dev_curve_nll"]["rows"]) == 3


def test_scores_are_shared_with_the_development_comparisons_through_their_cache(lineage):
    seed, (s0, _, s8) = lineage["seed"], lineage["specs"]
    work = lineage["tmp"] / "work"
    evaluate(EvaluateRequest(prepared=lineage["p"], candidate=s8, baseline=s0, split="dev", out=work / "dev-A.json",
                             tokenizer_dir=str(seed), max_tokens=MAX_TOKENS, max_new_tokens=4))
    cached = set((work / "score-cache").iterdir())
    assert len(cached) == 2
    dev_curve(lineage["p"], {"A": [s0, s8]}, work / "dev-curve.json", str(seed), MAX_TOKENS, 4)
    assert set((work / "score-cache").iterdir()) == cached  # both models read back, none scored again


def test_a_lineage_out_of_training_order_or_empty_is_refused(lineage):
    seed, (s0, s4, s8) = lineage["seed"], lineage["specs"]
    out = lineage["tmp"] / "curve.json"
    with pytest.raises(ValueError, match="strictly increasing"):
        dev_curve(lineage["p"], {"A": [s0, s8, s4]}, out, str(seed), MAX_TOKENS, 4)
    with pytest.raises(ValueError, match="at least one model"):
        dev_curve(lineage["p"], {"A": []}, out, str(seed), MAX_TOKENS, 4)
    with pytest.raises(ValueError, match="HOME:FULL_ROOT"):
        dev_curve(lineage["p"], {"A": [s0, "nowhere"]}, out, str(seed), MAX_TOKENS, 4)
    assert not out.exists()


def test_the_report_draws_the_committed_tiny_curve_with_every_arm():
    """The `dev_curve` sidecar of runs/demo-adaptive-dev-curve drawn as the report draws it: a PNG, and alt
    text that names every arm with its first and last pooled accuracy."""
    import json
    from pathlib import Path

    from kit.evidence.report.figures import dev_curve_figure

    table = json.loads((Path(__file__).resolve().parents[1] / "runs" / "demo-adaptive-dev-curve" / "metrics" /
                        "dev_curve.json").read_text())
    png, alt = dev_curve_figure(table, "t")
    assert png.startswith(b"\x89PNG")
    at = {c: i for i, c in enumerate(table["columns"])}
    for arm in {r[at["arm"]] for r in table["rows"]}:
        pooled = sorted((r[at["step"]], r[at["accuracy"]]) for r in table["rows"]
                        if r[at["arm"]] == arm and r[at["family"]] == "all")
        assert f"{arm} from " in alt and f"at update {pooled[-1][0]}" in alt
    assert dev_curve_figure({"columns": ["x"], "rows": []}, "t") is None  # another shape: no figure


def test_the_curve_does_not_depend_on_the_order_of_the_lineages(lineage, tmp_path):
    """A run record keeps LINEAGES as canonical JSON (sorted keys), so a replay passes the arms sorted: the curve
    must come out the same bytes whatever order the dict had (a replay of the demo wrote A2-control first)."""
    seed, (s0, _, s8) = lineage["seed"], lineage["specs"]
    made = [dev_curve(lineage["p"], lineages, tmp_path / f"curve-{i}.json", str(seed), MAX_TOKENS, 4)
            for i, lineages in enumerate(({"B": [s0, s8], "A": [s0]}, {"A": [s0], "B": [s0, s8]}))]
    assert (tmp_path / "curve-0.json").read_bytes() == (tmp_path / "curve-1.json").read_bytes()
    assert [p["arm"] for p in made[0]["points"]] == ["A", "B", "B"]
