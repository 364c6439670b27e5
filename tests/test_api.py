"""The public API: `kit.__all__` names kit/api.py's objects, resolved on first use, and the package's own
modules never take them from the facade (which would make `import kit` depend on the drivers)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kit

KIT = Path(kit.__file__).resolve().parent


def test_all_names_the_api_and_each_name_resolves_to_its_definition():
    import kit.api

    assert kit.__all__ == ["NUMERIC_ENV", "NUMERIC_PROFILE", "__version__", "numerics", *kit.API_NAMES]
    # kit/api.py imports exactly the API: no name missing from it, none imported and left unnamed
    imported = [a.asname or a.name for node in ast.parse(Path(kit.api.__file__).read_text()).body
                if isinstance(node, ast.ImportFrom) and node.module != "kit" for a in node.names]
    assert sorted(imported) == sorted(kit.API_NAMES) and len(set(kit.API_NAMES)) == len(kit.API_NAMES)
    for name in kit.api.__all__:
        assert getattr(kit, name) is getattr(kit.api, name), name
    # what the issue asks a notebook author to find there
    from kit.adaptive.evaluation import EvaluateRequest, evaluate
    from kit.adaptive.train import CohortRequest, train
    from kit.engine.session import Session
    from kit.study.arms import ArmRequest, run_arm

    assert (kit.Session, kit.train_cohort, kit.CohortRequest, kit.run_arm, kit.ArmRequest) == \
        (Session, train, CohortRequest, run_arm, ArmRequest)
    assert (kit.evaluate_adaptive, kit.EvaluateRequest) == (evaluate, EvaluateRequest)
    with pytest.raises(AttributeError, match="no attribute 'Sesion'"):
        kit.Sesion  # noqa: B018 - a typo is an AttributeError, not a silent import


def test_no_kit_module_imports_an_api_name_from_the_package():
    offenders = []
    for path in sorted(KIT.rglob("*.py")):
        if path.name == "api.py" and path.parent == KIT:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "kit" and node.level == 0:
                offenders += [f"{path.relative_to(KIT)}: from kit import {a.name}" for a in node.names
                              if a.name in kit._API]
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "kit" \
                    and node.attr in kit._API:
                offenders.append(f"{path.relative_to(KIT)}:{node.lineno} kit.{node.attr}")
    assert not offenders, "\n".join(offenders)


def test_requests_refuse_bad_fields_naming_them():
    from kit.adaptive.bindings import TrainRefused
    from kit.refs import CommitRef, SeedRef
    from kit.study.arms import ArmRefused

    with pytest.raises(TrainRefused, match=r"CohortRequest\.workers = 0; expected a positive int"):
        kit.CohortRequest("p", "s", "h", "A", 0)
    with pytest.raises(TrainRefused, match=r"CohortRequest\.cohort = 'D'"):
        kit.CohortRequest("p", "s", "h", "D", 1)
    with pytest.raises(ArmRefused, match=r"ArmRequest\.compile_blocks = 'yes'"):
        kit.ArmRequest("study", "single", "seed", compile_blocks="yes")
    # a notebook's "not given" ("" and 0) reads as None; the start and reference are typed refs
    r = kit.CohortRequest("p", "s", "h", "B", 2, resume="r" * 64, reference="f" * 64, source_home="", until=0)
    assert (r.source_home, r.until) == (None, None)
    assert r.start() == CommitRef("h", "r" * 64) and r.reference_ref() == CommitRef("h", "f" * 64)
    assert kit.CohortRequest("p", "s", "h", "A", 2).start() == SeedRef("s") == \
        kit.CohortRequest("p", "s", "h", "A", 2).reference_ref()
    arm = kit.ArmRequest("study", "dense", "seed", resume="a" * 64, until=0, seconds_per_update=0.0)
    assert (arm.until, arm.seconds_per_update) == (None, None)
    assert arm.start() == CommitRef(str(Path("study") / "arms" / "dense" / "home"), "a" * 64)
