"""Launcher entry for tests/test_fetch_over_group.py: one rank of a migration without a shared
filesystem. Each rank gets its own `homes[rank]`; only the ranks listed in `holders` are told the
source store's path (the others' hosts do not have it)."""

from __future__ import annotations

from kit.engine.migration import migrate_over_group
from kit.model.shard import Layout


def migrate_worker(group, args, ctx):
    source = args["source_home"] if group.rank in args["holders"] else None
    out = migrate_over_group(group, source, args["homes"][group.rank], args["root"],
                             Layout.from_json(args["layout"]))
    return {"rank": group.rank, **out}
