"""The three contracts' field tables in docs/contracts.md held against their declared classes (issue 62, item 4)."""

from __future__ import annotations

import pytest
from support.format_docs import assert_docs_match

from kit.adaptive.continued_schema import ContinuedContract
from kit.adaptive.schema import AdaptiveContract
from kit.study.schema import StudyContract


@pytest.mark.parametrize("heading, cls", [
    ("adaptive-shards: fields", AdaptiveContract),
    ("continued-learning: fields (kit/adaptive/continued.py)", ContinuedContract),
    ("shared-gradient-study: fields (kit/study/schema.py)", StudyContract),
])
def test_contract_docs_table_names_the_declared_fields(heading, cls):
    assert_docs_match("contracts.md", heading, cls)
