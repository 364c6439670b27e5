"""The names the executed notebooks committed under runs/ import as `kit.evidence.records` (kept so that
they replay), and the report still takes from here, from the three modules they now live in: `run_record`
(the run.json schema), `notebook` (what notebook code calls inside its kernel) and `environment` (git,
versions and devices). New code imports those modules directly; the notebooks of notebooks/ import only
`kit`'s public names (tests/test_notebook_imports.py).
"""

from kit.evidence.environment import (  # noqa: F401
    declared_numeric_profile,
    device_info,
    evidence_base,
    git_state,
    iso_utc,
    relative_to_base,
    utc_now,
)
from kit.evidence.environment import versions as package_versions  # noqa: F401
from kit.evidence.notebook import (  # noqa: F401
    KERNEL_INPUTS_NAME,
    KERNEL_ROOTS_NAME,
    RUN_DIR_ENV,
    STATUS_OF_EXCEPTION_NAME,
    ArmAborted,
    ArmSignal,
    ArmUnavailable,
    current_run_dir,
    merge_inputs,
    record_inputs,
    record_metric,
    record_roots,
)
from kit.evidence.run_record import (  # noqa: F401
    METRICS_DIR_NAME,
    RUN_FORMAT,
    RUN_RECORD_NAME,
    RunRecord,
    RunRecordError,
    is_run_dir,
    list_run_dirs,
    metric_path,
    read_run_record,
    refuse_links,
    run_record_path,
    superseded_attempt_dir,
    write_run_record,
)
