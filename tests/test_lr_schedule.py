"""The contracts' learning-rate schedule (kit/train/schedule.py): its values, its validation, and that a
session's optimizer really trains at the scheduled rate."""

import itertools
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.adaptive.schema import load_adaptive_contract
from kit.contract import LR_SCHEDULE, ContractError
from kit.engine.session import Session
from kit.record import build
from kit.study.schema import load_study_contract
from kit.train.optim import GroupConfig
from kit.train.schedule import lr_factor

ROOT = Path(__file__).resolve().parents[1]
WARM_COSINE = {"warmup_updates": 4, "after": "cosine", "floor_ratio": 0.1}


def typed(schedule):
    """A schedule as the drivers pass it: the contract's typed `training.lr_schedule` (kit.contract.LrWarmup)."""
    return build(schedule, LR_SCHEDULE)


def test_constant_is_one_everywhere():
    assert [lr_factor(typed("constant"), k, 8) for k in range(8)] == [1.0] * 8


def test_warmup_then_cosine_to_the_floor():
    f = [lr_factor(typed(WARM_COSINE), k, 12) for k in range(12)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]  # linear: (k + 1) / W
    assert f[4] == 1.0 and f[-1] == pytest.approx(0.1, abs=1e-15)  # cosine starts at the peak, ends at the floor
    assert lr_factor(typed(WARM_COSINE), 8, 13) == pytest.approx(0.55, abs=1e-15)  # half-way: the mean of peak and floor
    assert all(a >= b for a, b in itertools.pairwise(f[4:]))


def test_warmup_then_constant():
    s = {"warmup_updates": 2, "after": "constant", "floor_ratio": 0.0}
    assert [lr_factor(typed(s), k, 5) for k in range(5)] == [0.5, 1.0, 1.0, 1.0, 1.0]


def _with_schedule(tmp_path, name, schedule, study=False):
    c = json.loads((ROOT / "contracts" / name).read_text())
    c["training"]["lr_schedule"] = schedule
    p = tmp_path / name
    p.write_text(json.dumps(c))
    return (load_study_contract if study else load_adaptive_contract)(p)


def test_contracts_accept_a_schedule(tmp_path):
    c = _with_schedule(tmp_path, "adaptive-shards.tiny.json", WARM_COSINE)
    assert c.terms.training.lr_schedule.to_json() == WARM_COSINE
    s = _with_schedule(tmp_path, "shared-gradient.tiny.json", WARM_COSINE, study=True)
    assert s.terms.training.lr_schedule.to_json() == WARM_COSINE
    # the committed contracts are unchanged: constant (adaptive) or absent (study)
    assert load_adaptive_contract(ROOT / "contracts/adaptive-shards.tiny.json").terms.training.lr_schedule == "constant"
    assert "lr_schedule" not in load_study_contract(ROOT / "contracts/shared-gradient.tiny.json").terms.training


@pytest.mark.parametrize("schedule, message", [
    ("cosine", r"training\.lr_schedule"),
    ({"warmup_updates": 0, "after": "cosine", "floor_ratio": 0.1}, r"training\.lr_schedule\.warmup_updates"),
    ({"warmup_updates": 2, "after": "linear", "floor_ratio": 0.1}, r"training\.lr_schedule\.after"),
    ({"warmup_updates": 2, "after": "cosine", "floor_ratio": 1.5}, r"training\.lr_schedule\.floor_ratio"),
    ({"warmup_updates": 2, "after": "cosine"}, r"training\.lr_schedule\.floor_ratio"),
    ({"warmup_updates": 2, "after": "cosine", "floor_ratio": 0.1, "peak": 1}, r"training\.lr_schedule\.peak"),
    ({"warmup_updates": 10_000, "after": "cosine", "floor_ratio": 0.1}, r"warmup_updates = 10000; expected fewer"),
])
def test_bad_schedules_are_refused_naming_the_field(tmp_path, schedule, message):
    with pytest.raises(ContractError, match=message):
        _with_schedule(tmp_path, "adaptive-shards.tiny.json", schedule)
    with pytest.raises(ContractError, match=message):
        _with_schedule(tmp_path, "shared-gradient.tiny.json", schedule, study=True)


def test_session_scales_every_group_from_its_peak_rate():
    peak = {"default": GroupConfig(1e-3, 0.9, 0.95, 1e-8, 0.0), "grown": GroupConfig(4e-4, 0.9, 0.95, 1e-8, 0.0)}
    fake = SimpleNamespace(peak_groups=peak, engine=SimpleNamespace(optimizer=SimpleNamespace(groups=dict(peak))))
    Session.set_lr_factor(fake, 0.25)
    assert fake.engine.optimizer.groups == {"default": replace(peak["default"], lr=2.5e-4),
                                            "grown": replace(peak["grown"], lr=1e-4)}
    Session.set_lr_factor(fake, 1.0)  # from the peak again, not compounded
    assert fake.engine.optimizer.groups == peak
