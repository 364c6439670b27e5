"""What the seed knew: its training mix by kind and count, its accuracy by family at each difficulty and labelled
samples, all from the seed's build record (seed_build_record.json, found by parameter digest among the kept runs:
kit.evidence.run_index.kept_rows), and what the cohorts teach beyond it (the first final against the seed, by
family, from kit.results)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from kit.digest import load_json_strict
from kit.evidence.report.format import fmt, records_table
from kit.evidence.report.index import index, kept, run_contract
from kit.evidence.report.selection import Selected, Selection
from kit.evidence.results import results, study_evaluations

BUILD_RECORD = "seed_build_record.json"


def seed_digests(runs_dir) -> list[str]:
    idx = index(runs_dir)
    out = []
    for r in idx.runs:
        d = ((run_contract(r) or {}).get("seed") or {}).get("parameter_digest") if r.contract_digest else None
        if d and d not in out:
            out.append(d)
    return out


def build_record(runs_dir: Selected, digest: str) -> tuple[dict, str] | None:
    """(record, run id) of a build of the seed `digest` kept under the runs folder (any selection's folder)."""
    for k in kept(Selection.of(runs_dir).runs_dir):
        f = k.run.dir / BUILD_RECORD
        if f.is_file():
            try:
                rec = load_json_strict(f)
            except ValueError:
                continue
            if rec.get("parameter_digest") == digest:
                return rec, f"{k.kept_in}/{k.run.dir.name}"
    return None


@dataclass(frozen=True, slots=True)
class MixRow:
    """One kind of the seed's training data (in memory; a row of the report's training-mix table): examples, epochs,
    packed conversations (rows of text for general text) and its share of the conversations."""
    kind: str
    examples: Any
    epochs: Any
    packed: Any
    share: str

    @property
    def conversations(self) -> bool:
        """Conversations (the general text's packed rows are not)."""
        return "packed rows" not in self.kind

    def table_row(self) -> dict:
        return {"kind": self.kind, "examples": self.examples, "epochs": self.epochs, "packed": self.packed,
                "share": self.share}


def training_mix(rec: dict) -> list[MixRow]:
    """The seed's training data by kind: examples, epochs and packed conversations, from its build record."""
    data = rec.get("data") or {}
    t = data.get("tasks") or {}
    kinds: list[tuple[str, Any, Any]] = []  # (kind, examples, epochs) of the conversations
    fam = sum((t.get("per_family") or {}).values())
    kinds.append((f"task families at difficulty {t.get('difficulty')} ({', '.join(t.get('per_family') or {})})",
                  fam, t.get("epochs", 1)))
    for key, label in (("practice", "practice primitives"), ("reworded", "reworded tasks"),
                       ("at_dev_difficulty", "tasks at the dev difficulty")):
        x = t.get(key) or {}
        if x.get("count"):
            kinds.append((f"{label} at difficulty {x.get('difficulty')}"
                          + (f" ({', '.join(x['per_family'])})" if x.get("per_family") else ""),
                          x["count"], x.get("epochs", 1)))
    pc = data.get("public_conversations") or {}
    if pc.get("train_range"):
        kinds.append((f"public conversations ({pc.get('name')})", pc["train_range"][1] - pc["train_range"][0],
                      pc.get("epochs", 1)))
    if (data.get("synthetic") or {}).get("count"):
        kinds.append(("synthetic conversations", data["synthetic"]["count"], 1))
    total = sum(examples * epochs for _, examples, epochs in kinds)
    rows = [MixRow(kind=kind, examples=examples, epochs=epochs, packed=examples * epochs,
                   share=f"{100 * examples * epochs / total:.2f}%" if total else "\u2014")
            for kind, examples, epochs in kinds]
    gt = data.get("general_text") or {}
    if gt.get("rows"):
        rows.append(MixRow(kind=f"general text ({gt.get('package')}), packed rows", examples=gt.get("documents_train"),
                           epochs=gt.get("epochs", 1), packed=gt.get("rows"), share="(rows of text, not conversations)"))
    return rows


def seed_html(runs_dir) -> str:
    parts = []

    for digest in seed_digests(runs_dir):
        found = build_record(runs_dir, digest)
        if found is None:
            parts.append(f"<p>The build record of the seed {html.escape(digest[:12])} is not in this evidence.</p>")
            continue
        rec, where = found
        mix = training_mix(rec)
        conv = [r for r in mix if r.conversations]
        total = sum(r.packed for r in conv)
        taught = sum(r.packed for r in conv if "task" in r.kind or "practice" in r.kind)
        built = (f"The seed {digest[:12]} ({fmt(rec.get('params'))} parameters, built in "
                 f"{fmt((rec.get('seconds') or {}).get('total'))} s on {rec.get('device')}; build record {where}) "
                 f"trained on {fmt(total)} packed conversations, {100 * taught / total:.1f}% of them task or practice "
                 "examples:")
        parts.append(f"<p>{html.escape(built)}</p>"
                     + records_table([r.table_row() for r in mix]))
        acc = (rec.get("task_accuracy") or {}).get("at_difficulty") or {}
        if acc:
            fams = sorted({f for d in acc.values() for f in d})
            rows = [{"difficulty": d, **{f: f"{v[f]['correct']}/{v[f]['n']}" for f in fams if f in v}} for d, v in acc.items()]
            parts.append("<p>Its accuracy by family at each difficulty (its build's own samples):</p>" + records_table(rows))
        ex = (rec.get("task_accuracy") or {}).get("examples") or []
        if ex:
            parts.append("<p>Samples from its build record, each labelled with its difficulty:</p>" + records_table(
                [{"difficulty": x.get("difficulty"), "prompt": x.get("prompt"), "reply": x.get("reply"),
                  "correct": x.get("correct")} for x in ex[:4]]))
        df = results(runs_dir)
        df = df[(df["kept_in"] == "") & (df["seed"] == digest) & (df["split"] == "final") & (df["metric"] == "accuracy")
                & ~df["run_id"].isin(study_evaluations(index(runs_dir)))]  # what the cohorts teach: adaptive finals
        if not df.empty:
            run = df["run_id"].iloc[0]
            mine = df[df["run_id"] == run]
            seed = dict(zip(mine[mine["model"] == "seed"]["family"], mine[mine["model"] == "seed"]["value"]))
            other = mine[mine["model"] != "seed"]
            if seed and not other.empty:
                model = other["model"].iloc[0]
                known = ((rec.get("data") or {}).get("tasks") or {}).get("difficulty")
                asked = (rec.get("task_accuracy") or {}).get("difficulty")
                extends = (f" The finals are difficulty-{asked} tasks and the seed trained on these families at "
                           f"difficulty {known} only: the gain is the model extending formats it knew to larger "
                           "sizes." if known is not None and asked is not None and known < asked
                           and not any(((rec.get("data") or {}).get("tasks") or {}).get(k, {}).get("count")
                                       for k in ("at_dev_difficulty", "reworded")) else "")
                gains = {f: v - seed[f] for f, v in zip(other["family"], other["value"]) if f in seed}
                parts.append("<p>" + html.escape(
                    f"What the cohorts teach beyond it, on the final split ({run}: {model} against the seed): "
                    + "; ".join(f"{f} {100 * g:+.1f} points" for f, g in gains.items())
                    + "." + extends) + "</p>")
    return "".join(parts) or "<p>No contract of this evidence pins a seed.</p>"


def show_seed(runs_dir: Selected) -> None:
    from IPython.display import HTML, display  # noqa: PLC0415 - optional: the notebook runtime (kit/evidence/runtime.py)

    selection = Selection.of(runs_dir)  # the notebook cell's DIR/GLOB, parsed once
    display(HTML(seed_html(selection)))
