"""The engine part's formats held against their docs pages (tests/support/format_docs.py)."""

from kit.distributed.launch import WorkerStatus
from kit.store.manifest import Manifest
from tests.support.format_docs import assert_docs_match


def test_checkpoint_manifest_matches_its_docs_table():
    assert_docs_match("formats/checkpoint-store.md", "Manifest", Manifest)


def test_worker_status_matches_its_docs_table():
    assert_docs_match("formats/launcher-files.md", "Worker status", WorkerStatus)
