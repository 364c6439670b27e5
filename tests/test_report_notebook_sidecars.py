"""The sidecars the notebooks record through one kit call each (kit.adaptive.sidecars, kit.study.sidecars)
and the report's curve figure they display: values against hand-counted oracles, and refusals."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kit.adaptive.sidecars import accuracy_sidecars, attempt_throughput, commit_specs, gate_sidecars
from kit.digest import write_canonical_json
from kit.evidence.report.sidecars import curves_figure
from kit.study.formats import (
    ArmRecord,
    ArmTraffic,
    ColumnCounters,
    CompressorStats,
    LogicalTrafficSummary,
    UpdateRow,
)
from kit.study.sidecars import arm_sidecars


def test_accuracy_sidecars_count_each_family_and_the_answers_gained_and_lost():
    # family a: candidate 2/2, baseline 1/2; family b: candidate 0/1, baseline 1/1
    tasks = [{"family": "a", "cand_correct": True, "base_correct": True},
             {"family": "a", "cand_correct": True, "base_correct": False},
             {"family": "b", "cand_correct": False, "base_correct": True}]
    out = accuracy_sidecars({"tasks": tasks})
    acc = out["accuracy_by_family"]
    assert list(acc) == ["a", "b", "all"]
    assert (acc["a"]["n"], acc["a"]["correct_candidate"], acc["a"]["correct_baseline"]) == (2, 2, 1)
    assert acc["b"]["accuracy_candidate"] == 0.0 and acc["b"]["accuracy_baseline"] == 1.0
    assert acc["all"]["accuracy_candidate"] == pytest.approx(2 / 3)
    assert json.dumps(acc)  # plain Python values: the sidecar is canonical JSON
    assert out["generated_answers"] == {"gained": 1, "lost": 1, "net": 0}


def test_gates_are_refused_on_development_roles():
    with pytest.raises(ValueError, match="field split = 'dev'.*final roles only"):
        gate_sidecars({"split": "dev"}, {}, {"contract": {"kind": "adaptive-shards"}}, "A_vs_seed")


def test_commit_specs_split_at_the_last_colon_and_refuse_a_bare_root():
    assert commit_specs({"A": "out/a:b/home:" + "f" * 64}) == {"A": {"home": "out/a:b/home", "root": "f" * 64}}
    with pytest.raises(ValueError, match="candidate 'B' = 'abc': expected 'HOME:FULL_ROOT'"):
        commit_specs({"B": "abc"})


def test_attempt_throughput_reads_the_attempt_that_made_the_commits(tmp_path):
    commits = [{"full_root": "1" * 64}]
    for name, made, updates in (("0001", [], [(9.0, 90)]), ("0002", commits, [(1.5, 30), (0.5, 10)])):
        d = tmp_path / "attempts" / name
        d.mkdir(parents=True)
        write_canonical_json(d / "attempt.json", {"attempt": name, "status": "completed", "commits": made,
                                                  "fetched_bytes": [100, 28]})
        (d / "updates.jsonl").write_text("".join(json.dumps({"seconds": s, "tokens": t}) + "\n" for s, t in updates))
    got = attempt_throughput(str(tmp_path), commits, 2)
    assert got == {"attempt": "0002", "status": "completed", "workers": 2, "updates": 2, "assistant_tokens": 40,
                   "update_seconds": 2.0, "assistant_tokens_per_s": 20.0, "fetched_bytes": 128}
    with pytest.raises(ValueError, match="no attempt.json has field commits equal to the 1 commit"):
        attempt_throughput(str(tmp_path), [{"full_root": "2" * 64}], 2)


def test_arm_sidecars_leave_out_what_the_arm_did_not_produce_and_flatten_traffic():
    unavailable = ArmRecord(format="kit.study.arm/1", arm="dense", workers=1, reduction="none", device="cpu", home="H",
                            contract_digest="c", prepared_digest="p", resume_root=None, until=1, attempts=1,
                            status="unavailable", reason="no GPU", projection=None, started_at=None, ended_at=None,
                            updates=None, commits=(), endpoint=None, measurement=None, traffic=None, cost=None)
    assert arm_sidecars(unavailable) == {} == arm_sidecars(unavailable.to_json())
    row = UpdateRow(step=1, ce_sum=5.0, kl_sum=0.0, objective=2.5, target_tokens=2, input_tokens=4, documents=1,
                    local_documents=1, grad_norm=1.0, clip_factor=1.0, seconds=0.1, warmup=False, gradient_bytes=64,
                    overhead_bytes=0)
    logical = LogicalTrafficSummary(
        world=1, updates=1, warmup_updates=0, dense_equivalent_bytes_per_update=0, gradient_bytes_total=64,
        overhead_bytes_in_updates_total=0, overhead_bytes_between_updates_total=0, sent_bytes_total=64,
        sent_bytes_per_update_with_warmup_and_overhead=64.0, gradient_bytes_per_update_after_warmup=64.0,
        compression_ratio_after_warmup=None, compression_ratio_with_warmup_and_overhead=None,
        ring_wire_bytes_total_estimate=0)
    ran = dataclasses.replace(unavailable, updates=(row,),
                              traffic=ArmTraffic(interfaces={}, logical_per_rank=(logical,)))
    out = arm_sidecars(ran)
    assert out == arm_sidecars(ran.to_json())  # the record, or its JSON as kit.run_arm returns it
    assert out["loss_curves"] == [{"step": 1, "objective": 2.5, "grad_norm": 1.0, "clip_factor": 1.0,
                                   "seconds": 0.1, "gradient_bytes": 64}]
    assert out["traffic_per_rank"] == [{"rank": 0, **logical.to_json()}]
    assert "powersgd_columns" not in out
    columns = ColumnCounters(p_dead=5, q_dead=2, q_redrawn=2, calls_with_dead_p=1)
    stats = CompressorStats(calls=3, warmup_calls=1, dense_equivalent_bytes=0, compressed_bytes=0,
                            dense_equivalent_bytes_after_warmup=0, compressed_bytes_after_warmup=0,
                            compression_ratio_after_warmup=None, compression_ratio_overall=None, step=3,
                            compressed_names=1, dense_names=1, last_call=None, columns=columns)
    ran = dataclasses.replace(ran, traffic=ArmTraffic(interfaces={}, logical_per_rank=(logical,),
                                                      powersgd_per_rank=(stats,)))
    assert arm_sidecars(ran)["powersgd_columns"] == [{"rank": 0, **columns.to_json()}]
    older = dataclasses.replace(stats, columns=None)  # records before the dead-column counters
    ran = dataclasses.replace(ran, traffic=ArmTraffic(interfaces={}, logical_per_rank=(logical,),
                                                      powersgd_per_rank=(older,)))
    assert "powersgd_columns" not in arm_sidecars(ran)


def test_curves_figure_draws_curves_and_refuses_a_table():
    assert curves_figure([{"update": 1, "loss": 2.0}, {"update": 2, "loss": 1.5}], "t")[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="t: a sidecar shaped as table, expected curves"):
        curves_figure({"columns": ["a"], "rows": [[1]]}, "t")
