"""Shared fixtures: tiny Hugging Face Llama directories written by transformers itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import kit
import kit.numerics

# The test process computes under the same profile as the launched workers and the CLI, so in-process
# and launched results are comparable bit for bit.
kit.numerics.apply()

from support.models import PUBLIC_SOURCE, REPO, write_hf_llama  # noqa: F401 - re-exported names of the fixtures
from support.schedule import longest_first, on_xdist_worker
from support.tiers import SLOW, NoTier, is_slow, tier_of

TESTS_DIR = Path(__file__).parent


class _UntieredModule(pytest.Module):
    """A test file without exactly one tier: collecting it is an error that names the file and the fix."""

    untiered = ""

    def collect(self):
        raise self.CollectError(self.untiered)


def pytest_pycollect_makemodule(module_path, parent):
    """A test file missing from support.tiers fails collection (with or without xdist), so no new file runs
    untiered under `make test` and silently outside `make test-fast`."""
    if not module_path.name.startswith("test_"):
        return None
    try:
        tier_of(module_path, TESTS_DIR)
    except NoTier as err:
        module = _UntieredModule.from_parent(parent, path=module_path)
        module.untiered = str(err)
        return module
    return None  # pytest's own module


def pytest_collection_modifyitems(config, items):
    """Every test carries its file's tier marker and, where support.tiers lists it, `slow`, so `-m "unit and
    not slow"` (make test-fast) selects by them. Under `make test`'s xdist workers the longest files come
    first (support.schedule); both workers compute the same order, as xdist requires."""
    for item in items:
        item.add_marker(tier_of(item.path, TESTS_DIR))
        if is_slow(item.path, getattr(item, "originalname", item.name), TESTS_DIR):
            item.add_marker(SLOW)
    if on_xdist_worker():
        items[:] = longest_first(items, TESTS_DIR)


@pytest.fixture
def tiny_llama(tmp_path):
    return write_hf_llama(tmp_path / "tiny")


@pytest.fixture(scope="module")
def student_reference(tmp_path_factory):
    """A random student seed and a different random reference (seeds 0 and 1), shared by a module's tests."""
    root = tmp_path_factory.mktemp("student-reference")
    return write_hf_llama(root / "student", seed=0), write_hf_llama(root / "reference", seed=1)


@pytest.fixture
def one_thread():
    """One torch thread, as the launcher's workers use: the same kernels, so comparable bits."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_json(path):
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="session", autouse=True)
def _session_exposure_ledger(tmp_path_factory):
    """Session-scoped preparations (`prepared`) read an empty ledger of the session, never the repository's
    ledger/exposed.jsonl; nothing else runs under it (the module's and the test's ledgers below)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KIT_LEDGER", str(tmp_path_factory.mktemp("session-ledger") / "exposed.jsonl"))
        yield


@pytest.fixture(scope="module", autouse=True)
def _module_exposure_ledger(tmp_path_factory):
    """Module-scoped preparations read an empty ledger of their test file, never the repository's
    ledger/exposed.jsonl, and never one another file's fixtures wrote to: which files share a worker
    process depends on the schedule (tests/support/schedule.py), so a ledger shared by the session made
    a file's fixtures depend on the files run before it on the same worker."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KIT_LEDGER", str(tmp_path_factory.mktemp("module-ledger") / "exposed.jsonl"))
        yield


@pytest.fixture(autouse=True)
def _private_exposure_ledger(tmp_path_factory, monkeypatch):
    """Every test records final exposures to (and prepares against) a ledger of its own; a test that
    wants a shared ledger sets KIT_LEDGER itself."""
    monkeypatch.setenv("KIT_LEDGER", str(tmp_path_factory.mktemp("ledger") / "exposed.jsonl"))


@pytest.fixture(scope="module")
def dirs(student_reference):
    """The engine tests' (student, reference) pair, per module."""
    return student_reference


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    """One preparation of the tiny adaptive contract, per session (support.adaptive.prepare_tiny): five
    files use it, and every test that trains or edits copies `out` first and only reads `seed`. Shared
    across files, it must come back as it was handed out: a test that changed it fails at teardown."""
    from support.adaptive import prepare_tiny

    done = prepare_tiny(tmp_path_factory.mktemp("prep"))
    before = _tree_sha256(done["root"])
    yield done
    assert _tree_sha256(done["root"]) == before, f"a test changed the shared preparation under {done['root']}"


def _tree_sha256(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `root`."""
    from kit.digest import sha256_file

    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A tiny shared-gradient study's seed, source, contract and ledger, per module (support.study)."""
    from support.study import make_study_env

    return make_study_env(tmp_path_factory.mktemp("study"))
