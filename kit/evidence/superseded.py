"""A superseded folder's note, `superseded.json` (docs/formats/verify-evidence.md, "Superseded folders" and
"Superseded notes"): why the records beside it no longer stand, the commits they name that the history no longer
holds, and which run re-made each. `kit.evidence.verify.superseded_note` reads and checks it; the git, roots and
GPU-mode checks of a run in such a folder take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kit.record import MapOf, Record, Seq, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class SupersededNote(Record):
    format: str = spec_field(str, doc="kit-superseded/1")
    reason: str = spec_field(str, doc="why the folder's records no longer stand")
    unreachable_commits: tuple[str, ...] = spec_field(Seq(str), doc="recorded commits the history no longer holds")
    replaced_by: Mapping[str, str] = spec_field(MapOf(str), doc="run name -> the run under runs/ that re-made it")
