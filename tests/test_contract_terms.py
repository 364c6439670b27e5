"""Contracts parsed once into frozen typed sections (kit.contract.parse, Contract.terms)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

from kit.adaptive.continued_schema import load_continued_contract
from kit.adaptive.schema import load_adaptive_contract
from kit.contract import ContractKeyWarning, Section, load_contract, parse
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
    with pytest.warns(ContractKeyWarning, match=r"kit\.fake reads contract field 'b' by key"):
        exec(compile("value = terms.get('b')", "<kit module>", "exec"), {"__name__": "kit.fake", "terms": terms})  # noqa: S102
