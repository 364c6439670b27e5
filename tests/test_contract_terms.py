"""Contracts read once into their declared frozen classes (kit.record.Record, Contract.terms)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.adaptive import schema as adaptive_rules
from kit.adaptive.continued_schema import load_continued_contract
from kit.adaptive.schema import load_adaptive_contract
from kit.contract import ContractError, Record, load_contract
from kit.digest import sha256_json
from kit.record import Omittable, build, spec_field
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
    assert isinstance(terms, Record)
    # the typed reading loses nothing: written back, it is the file's JSON (hence the same digest)
    assert terms.to_json() == contract.data == json.loads(path.read_text())
    assert sha256_json(terms.to_json()) == contract.digest
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


@dataclass(frozen=True, slots=True, kw_only=True)
class _Extra(Record):
    x: float = spec_field(float)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Probe(Record):
    kind: str = spec_field(str)
    n: int = spec_field(int)
    extra: _Extra | None = spec_field(Omittable(_Extra))


def test_omitted_field_reads_none_and_is_not_contained(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"kind": "k", "n": 3}))
    terms = load_contract(f, _Probe, "k").terms
    assert terms.extra is None and "extra" not in terms and "n" in terms
    assert terms.to_json() == {"kind": "k", "n": 3}  # omitted stays omitted
    f.write_text(json.dumps({"kind": "k", "n": 3, "extra": {"x": 1.5}}))
    terms = load_contract(f, _Probe, "k").terms
    assert terms.extra.x == 1.5 and "extra" in terms


def test_terms_have_no_key_access():
    """Code reads attributes: a contract, its terms and their objects have no item access by field name (the
    type checker follows attributes; a string key would fail only when its line runs)."""
    contract = load_adaptive_contract(REPO / "contracts/adaptive-shards.tiny.json")
    for value in (contract, contract.terms, contract.terms.training):
        with pytest.raises(TypeError):
            value["training"]  # the read itself is the test
    assert not hasattr(contract.terms, "get")


def _every_committed_contract_version():
    """Every version of contracts/*.json the history holds (a run records its contract by digest and finds it in
    contracts/ now or at its commit: kit.evidence.report.index.contract_for)."""
    log = subprocess.run(["git", "-C", str(REPO), "log", "--format=", "--raw", "--no-abbrev", "--", "contracts/*.json"],
                         capture_output=True, text=True, check=True).stdout
    blobs = sorted({line.split()[3] for line in log.splitlines() if line.startswith(":")} - {"0" * 40})
    for blob in blobs:
        text = subprocess.run(["git", "-C", str(REPO), "cat-file", "blob", blob], capture_output=True, text=True,
                              check=True).stdout
        yield blob, json.loads(text)


def test_every_committed_contract_version_reads_back_to_its_digest():
    """Each contract version ever committed reads into its class and writes back the same JSON (hence the same
    digest a run recorded); one of an earlier schema, which today's class refuses, still reads losslessly (the
    reading of kit/record.py's `build`, as campaigns/exposure_sensitivity.py reads a recorded contract)."""
    from kit.adaptive.continued_schema import ContinuedContract
    from kit.adaptive.schema import AdaptiveContract
    from kit.study.schema import StudyContract

    classes = {"adaptive-shards": AdaptiveContract, "continued-learning": ContinuedContract,
               "shared-gradient-study": StudyContract}
    validated = 0
    for blob, data in _every_committed_contract_version():
        cls = classes.get(data.get("kind"))
        if cls is None:
            continue
        try:
            terms = cls.from_json(data, blob)
            validated += 1
        except ContractError:
            terms = build(data, cls)
        assert sha256_json(terms.to_json()) == sha256_json(data), blob
    assert validated >= len(list(_committed_contracts()))


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
