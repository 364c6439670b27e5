"""Which exposure ledger a command uses (kit/evidence/ledger.py, kit/demo.py), and the refusal when the
ledger leaves too few final records: it names the ledger file, the contract that exposed them and --ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.adaptive import prepare as prep
from kit.adaptive.schema import load_adaptive_contract
from kit.data.conversations import instruction_source_range
from kit.demo import demo_ledger
from kit.digest import sha256_file
from kit.evidence.ledger import LEDGER_ENV, ledger_path, record
from kit.evidence.notebook import RUN_DIR_ENV

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "contracts" / "adaptive-shards.tiny.json"
PUBLIC = REPO / "data" / "alpaca_5000.json"


def test_the_ledger_is_the_given_one_then_the_runs_then_the_commands_own_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    # outside kit run: the command's own output folder, never the repository's committed ledger
    assert ledger_path(tmp_path / "P") == tmp_path / "P" / "ledger" / "exposed.jsonl"
    # a scoring records where its preparation read (prepared.json), so --ledger at prepare time holds it
    assert ledger_path(tmp_path / "P", str(tmp_path / "mine.jsonl")) == tmp_path / "mine.jsonl"
    # inside kit run: beside the run's runs/ folder (the committed evidence's, for runs/ of the repository)
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "evidence" / "runs" / "some-run"))
    assert ledger_path(tmp_path / "P", str(tmp_path / "mine.jsonl")) == \
        (tmp_path / "evidence" / "ledger" / "exposed.jsonl").resolve()
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "given.jsonl"))  # given: always that one
    assert ledger_path(tmp_path / "P") == tmp_path / "given.jsonl"


def test_kit_demo_never_uses_the_repositorys_ledger_unless_given(tmp_path, monkeypatch):
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    out = tmp_path / "demo-out"
    assert demo_ledger(out, REPO / "runs") == out / "ledger" / "exposed.jsonl"  # refreshing committed evidence
    assert demo_ledger(out, out / "runs") == (out / "ledger" / "exposed.jsonl").absolute()  # make demo
    assert demo_ledger(out, tmp_path / "campaign" / "runs") == tmp_path / "campaign" / "ledger" / "exposed.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(REPO / "ledger" / "exposed.jsonl"))  # given explicitly: honoured
    assert demo_ledger(out, REPO / "runs") == REPO / "ledger" / "exposed.jsonl"


def test_a_ledger_that_empties_the_final_range_is_refused_naming_ledger_contract_and_option(tmp_path):
    terms = load_adaptive_contract(TINY).terms
    spec = json.loads(TINY.read_text())["evaluation"]["final"]["retention"]
    rng = instruction_source_range(PUBLIC, sha256_file(PUBLIC), spec["start"], spec["stop"], spec["source_name"])
    ledger = tmp_path / "exposed.jsonl"
    exposer = "ab" * 32  # another contract's final scoring opened every record of the range
    record([("final.retention", x.digest, x.id) for x in rng.conversations], exposer, "cd" * 32,
           "an earlier final scoring", ledger, run="medium-adaptive-final-A")
    own = "ef" * 32  # the preparing contract's own earlier scoring of a few: not a cause, not named
    record([("final.retention", x.digest, x.id) for x in rng.conversations[:5]], own, "cd" * 32,
           "its own final scoring", ledger, run="own-final")
    exposed = frozenset(x.digest for x in rng.conversations)
    with pytest.raises(prep.PrepareError) as err:
        prep._final_retention(terms, PUBLIC, {}, lambda conv: True, exposed, ledger, own)
    msg = str(err.value)
    assert own[:12] not in msg and "own-final" not in msg
    assert f"[{spec['start']}, {spec['stop']}) leave 0 eligible" in msg
    assert str(ledger) in msg and f"contract {exposer[:12]}" in msg and "medium-adaptive-final-A" in msg
    assert "--ledger FILE" in msg and LEDGER_ENV in msg
    # the same range against a ledger of one's own: every record eligible, the first `count` taken
    taken, report = prep._final_retention(terms, PUBLIC, {}, lambda conv: True, frozenset(), tmp_path / "own.jsonl")
    assert [x.id for x in taken] == [x.id for x in rng.conversations[: spec["count"]]]
    assert report["excluded"]["ledger"] == 0
