"""Contracts parsed once into frozen typed sections (kit.contract.parse, Contract.terms)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

from kit.adaptive import schema as adaptive_rules
from kit.adaptive.continued_schema import load_continued_contract
from kit.adaptive.schema import load_adaptive_contract
from kit.contract import ContractError, ContractKeyWarning, Section, load_contract, parse
from kit.study import schema as study_rules
from kit.study.schema import load_study_contract

REPO = Path(__file__).resolve().parents[1]
LOADERS = {"adaptive-shards": load_adaptive_contract, "continued-learning": load_continued_contract,
           "shared-gradient": load_study_contract}


def _committed_contracts():
    for path in sorted((REPO / "contracts").glob("*.json")):
        loader = next((f for prefix, f in LOADERS.items() if path.name.startswith(prefix)), None)
        if loader is not None:
            yield path, loader


@pytest.mark.parametrize("path,loader", list(_committed_contracts()), ids=lambda v: getattr(v, "name", ""))
def test_every_committed_contract_parses_and_writes_back_its_file(path, loader):
    contract = loader(path)
    terms = contract.terms
    assert isinstance(terms, Section)
    # the typed reading loses nothing: written back, it is the file's JSON (hence the same digest)
    assert terms.to_json() == contract.data == json.loads(path.read_text())
    assert terms.kind == contract.data["kind"]
    assert terms.training.max_grad_norm == contract.data["training"]["max_grad_norm"]


def test_sections_are_frozen_and_maps_read_only():
    terms = load_adaptive_contract(REPO / "contracts/adaptive-shards.tiny.json").terms
    with pytest.raises(dataclasses.FrozenInstanceError):
        terms.training.max_grad_norm = 2.0
    with pytest.raises(TypeError):
        terms.cohorts["A"] = None  # a MapOf field: a read-only mapping
    again = load_adaptive_contract(REPO / "contracts/adaptive-shards.tiny.json").terms
    assert again == terms  # two readings of one file are equal values


def test_keyword_field_reads_with_trailing_underscore():
    terms = load_continued_contract(REPO / "contracts/continued-learning.tiny.json").terms
    assert terms.start.from_ == json.loads((REPO / "contracts/continued-learning.tiny.json").read_text())["start"]["from"]


def test_omitted_field_reads_none_and_is_not_contained(tmp_path):
    from kit.contract import Omittable

    schema = {"kind": str, "n": int, "extra": Omittable({"x": float})}
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"kind": "k", "n": 3}))
    terms = load_contract(f, schema, "k").terms
    assert terms.extra is None and "extra" not in terms and "n" in terms
    assert terms.to_json() == {"kind": "k", "n": 3}  # omitted stays omitted
    with pytest.raises(KeyError):
        terms["extra"]
    f.write_text(json.dumps({"kind": "k", "n": 3, "extra": {"x": 1.5}}))
    terms = load_contract(f, schema, "k").terms
    assert terms.extra.x == 1.5 and "extra" in terms


def test_key_reads_warn_from_kit_modules_only():
    terms = parse({"a": 1, "b": {"c": 2}}, {"a": int, "b": {"c": int}}, "probe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert terms.get("b").get("c") == 2 and terms.get("z", 7) == 7
        assert terms["b"]["c"] == 2  # a notebook cell or a test: the committed notebooks' reads still work
    code = compile("value = terms['a']", "<kit module>", "exec")
    with pytest.warns(ContractKeyWarning, match=r"kit\.fake reads contract field 'a' by key; read the attribute \.a"):
        exec(code, {"__name__": "kit.fake", "terms": terms})  # noqa: S102 -- code run as if a kit module's
    contract = load_adaptive_contract(REPO / "contracts/adaptive-shards.tiny.json")
    with pytest.warns(ContractKeyWarning, match=r"kit\.fake reads contract field 'training' by key"):
        exec(compile("value = contract['training']", "<kit module>", "exec"), {"__name__": "kit.fake", "contract": contract})  # noqa: S102
    with pytest.warns(ContractKeyWarning, match=r"kit\.fake reads contract field 'b' by key"):
        exec(compile("value = terms.get('b')", "<kit module>", "exec"), {"__name__": "kit.fake", "terms": terms})  # noqa: S102


def _refusal(loader, name: str, edit, tmp_path) -> str:
    data = json.loads((REPO / "contracts" / name).read_text())
    edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError) as e:
        loader(path)
    return str(e.value).removeprefix(f"{path}: ")


def test_cross_field_rules_read_the_terms_and_name_values_as_written(tmp_path):
    """The experiments' cross-field rules run on `Contract.terms` (a key read from kit warns, an error under
    pytest); a refused value is shown as the file wrote it (a list, not the terms' tuple)."""
    adaptive = load_adaptive_contract(REPO / "contracts" / "adaptive-shards.tiny.json")
    adaptive_rules.check_rules(adaptive.terms, "a.json")
    adaptive_rules.check_comparisons(adaptive.terms, "a.json")
    study_rules.check_rules(load_study_contract(REPO / "contracts" / "shared-gradient.tiny.json").terms, "s.json")

    def dev_role(d):
        d["data"]["dev"] = {"count": 2, "role": "study-train", "seed": 1, "difficulty": 1}

    def baseline_cycle(d):
        d["comparisons"]["A"]["baseline"] = "B"

    def families(d):
        d["tasks"]["families"] = d["tasks"]["families"][:1]

    assert _refusal(load_study_contract, "shared-gradient.tiny.json", dev_role, tmp_path) == (
        "field 'data.dev.role' = 'study-train'; expected a role name containing 'dev', so that seed builds "
        "exclude its tasks")
    assert _refusal(load_adaptive_contract, "adaptive-shards.tiny.json", baseline_cycle, tmp_path) == (
        "field 'comparisons.A.baseline' = 'B'; expected a chain of baselines that ends at 'seed'")
    first = json.loads((REPO / "contracts" / "adaptive-shards.tiny.json").read_text())["tasks"]["families"][0]
    assert _refusal(load_adaptive_contract, "adaptive-shards.tiny.json", families, tmp_path).startswith(
        f"field 'tasks.families' = [{first!r}]; expected exactly the four families [")
