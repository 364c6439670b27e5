"""Issue 9, case 14: property-based tests (hypothesis) of canonical JSON, the manifest validator and the
contract validator.

- Canonical JSON (kit.digest): any JSON value round-trips exactly; canonicalising is idempotent; every
  other serialisation of the same value (indentation, key order, non-ASCII output) canonicalises to
  the same bytes; arbitrary bytes make `loads_strict` / `load_canonical_json` either succeed or raise
  ValueError, and nothing else (nesting deep enough to exhaust the parser's recursion included).
- Manifests (kit.store.commits): every manifest `build_manifest` makes from generated learned states,
  layouts, parents and RNG lists validates and survives a canonical round trip with the same roots;
  `validate_manifest` raises only StoreError on arbitrary values; and any single mutation of a valid
  manifest (a value replaced anywhere, a key removed or added, a list item dropped or repeated) is
  refused, with StoreError, unless it left the manifest equal to the original.
- Contracts (kit.contract.validate with the adaptive contract's schema, then its cross-field rules):
  arbitrary values and random mutations of the tiny contract raise only ContractError; a JSON boolean
  is never accepted where the schema names a number (true == 1 in Python).

The examples are derandomised (the same on every run) and few enough for CI.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support.reliability import REPO

from kit.adaptive.schema import AdaptiveContract, check_rules
from kit.contract import ContractError, Num, Omittable, OneOf, Opt, validate
from kit.digest import canonical_json, load_canonical_json, loads_strict
from kit.record import is_record_class
from kit.store.commits import build_manifest, full_root, learned_state_root, validate_manifest
from kit.store.objects import StoreError

SETTINGS = settings(derandomize=True, deadline=None, max_examples=150,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


# -- canonical JSON --------------------------------------------------------------------------------------------


@SETTINGS
@given(json_values)
def test_canonical_json_round_trips_and_is_idempotent(value):
    data = canonical_json(value)
    assert data.isascii()
    back = loads_strict(data, "generated")
    assert back == value and canonical_json(back) == data
    assert json.dumps(back, sort_keys=True) == json.dumps(value, sort_keys=True)  # -0.0 and 0.0 kept apart


@SETTINGS
@given(json_values, st.integers(0, 3), st.booleans(), st.booleans())
def test_every_serialisation_canonicalises_to_the_same_bytes(value, indent, ascii_only, reverse):
    def reordered(v):
        if isinstance(v, dict):
            return {k: reordered(x) for k, x in (reversed(list(v.items())) if reverse else v.items())}
        return [reordered(x) for x in v] if isinstance(v, list) else v

    text = json.dumps(reordered(value), indent=indent or None, ensure_ascii=ascii_only)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form; only its \u escape can be in a file
        assume(False)
    assert canonical_json(loads_strict(data, "variant")) == canonical_json(value)


@SETTINGS
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()[:-1]))
def test_arbitrary_bytes_raise_only_value_error(data):
    try:
        loads_strict(data, "fuzz")
    except ValueError as e:
        assert str(e).startswith("fuzz: ")


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"a":' * 100_000, b"[" * 5_000 + b"]" * 5_000])
def test_deep_nesting_is_a_value_error(tmp_path, data):
    """json's C parser raises RecursionError past ~1000 levels; the readers report it as ValueError."""
    try:
        loads_strict(data, "deep")
    except ValueError as e:
        assert str(e).startswith("deep: ")
    path = tmp_path / "deep.json"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=str(path)):
        load_canonical_json(path)


# -- manifests ----------------------------------------------------------------------------------------------------

hexdigests = st.binary(min_size=32, max_size=32).map(bytes.hex)


@st.composite
def manifests(draw):
    names = sorted(draw(st.sets(st.text(min_size=1, max_size=12), min_size=0, max_size=6)))
    params = [{"name": n, "dtype": "float32", "shape": draw(st.lists(st.integers(0, 5), max_size=3)),
               "group": draw(st.sampled_from(["default", "grown", "no_decay"])), "age": draw(st.integers(0, 10**6)),
               "param": draw(hexdigests), "exp_avg": draw(hexdigests), "exp_avg_sq": draw(hexdigests)} for n in names]
    cursor = draw(st.dictionaries(st.text(max_size=6), st.integers(0, 10**9), max_size=3))
    stops = sorted(draw(st.lists(st.integers(0, 12), min_size=1, max_size=4)))
    blocks = [[0 if r == 0 else stops[r - 1], stop] for r, stop in enumerate(stops)]
    layout = {"blocks": blocks, "embedding_owner": draw(st.integers(0, len(blocks) - 1)),
              "model_config": draw(hexdigests)}
    rng = [draw(hexdigests) for _ in blocks]
    parent = draw(st.none() | hexdigests)
    return build_manifest({"cursor": cursor, "params": params}, layout, parent, rng)


@SETTINGS
@given(manifests())
def test_built_manifests_validate_and_round_trip(manifest):
    validate_manifest(manifest, "generated")
    back = load_bytes(canonical_json(manifest))
    validate_manifest(back, "reloaded")
    assert back == manifest
    assert learned_state_root(back["learned_state"]) == manifest["learned_state_root"]
    assert full_root(back["learned_state_root"], back["layout"], back["parent"], back["rng"]) == manifest["full_root"]


def load_bytes(data: bytes):
    return loads_strict(data, "manifest bytes")


@SETTINGS
@given(json_values)
def test_manifest_validator_raises_only_store_errors(value):
    try:
        validate_manifest(value, "fuzz")
    except StoreError as e:
        assert str(e).startswith("fuzz")


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _mutate(data, obj):
    """One random edit of a deep copy of `obj`: replace, delete, add or repeat at a random place."""
    obj = copy.deepcopy(obj)
    paths = list(_paths(obj))
    path = data.draw(st.sampled_from(paths[1:]), label="path")
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    op = data.draw(st.sampled_from(["replace", "delete", "add", "repeat"]), label="op")
    if op == "replace":
        parent[key] = data.draw(json_values, label="value")
    elif op == "delete":
        del parent[key]
    elif op == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=8), label="new key")] = data.draw(json_values, label="value")
    elif op in ("add", "repeat") and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    else:
        parent[key] = copy.deepcopy(parent[key])
    return obj


@SETTINGS
@given(manifests(), st.data())
def test_any_change_to_a_valid_manifest_is_refused(manifest, data):
    mutated = _mutate(data, manifest)
    try:
        validate_manifest(mutated, "mutated")
    except StoreError as e:
        assert str(e).startswith("mutated")
        return
    # accepted: only possible when the edit changed nothing (both roots cover every other field)
    assert canonical_json(mutated) == canonical_json(manifest)


# -- contracts -------------------------------------------------------------------------------------------------------

TINY = json.loads((REPO / "contracts" / "adaptive-shards.tiny.json").read_text())


def _validate_contract(value) -> None:
    check_rules(AdaptiveContract.from_json(value, "contract.json"), "contract.json")  # the rules read the terms


def test_tiny_contract_is_valid():
    _validate_contract(TINY)


@SETTINGS
@given(json_values)
def test_contract_validator_raises_only_contract_errors_on_any_value(value):
    try:
        _validate_contract(value)
    except ContractError as e:
        assert str(e).startswith("contract.json")


@settings(derandomize=True, deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_contract_validator_raises_only_contract_errors_on_mutations(data):
    mutated = _mutate(data, TINY)
    try:
        _validate_contract(mutated)
    except ContractError as e:
        assert str(e).startswith("contract.json")


def _numeric_leaves(spec, value, path=()):
    """Paths of the contract whose schema admits only numbers (Num, int, float, numeric literals)."""
    if isinstance(spec, (Opt, Omittable)):
        spec = spec.spec
    if is_record_class(spec):
        spec = spec.spec()
    if isinstance(spec, dict):
        for k, sub in spec.items():
            if isinstance(sub, Omittable) and k not in value:
                continue  # a field the contract may leave out (e.g. the medium scale's pilot binding)
            yield from _numeric_leaves(sub, value[k], (*path, k))
    elif isinstance(spec, Num) or spec in (int, float) or (
            isinstance(spec, OneOf) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                            for v in spec.values)):
        yield path


@pytest.mark.parametrize("flag", [True, False])
def test_a_boolean_is_never_a_number(flag):
    leaves = list(_numeric_leaves(AdaptiveContract, TINY))
    assert ("version",) in leaves and ("growth", "at_step") in leaves and len(leaves) > 40
    accepted = []
    for path in leaves:
        mutated = copy.deepcopy(TINY)
        parent = mutated
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = flag
        try:
            validate(mutated, AdaptiveContract, "", "contract.json")
        except ContractError:
            continue
        accepted.append(".".join(path))
    assert accepted == []


def test_declared_error_types_are_value_errors():
    """What the properties above allow is what callers catch: both are ValueError subclasses."""
    assert issubclass(StoreError, ValueError) and issubclass(ContractError, ValueError)
