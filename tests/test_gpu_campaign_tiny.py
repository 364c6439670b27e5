"""campaigns/adaptive_gpu_campaign.py's own parts, in seconds (the whole tiny campaign takes minutes on 2
cores and is run by hand: `python -m campaigns.adaptive_gpu_campaign --scale tiny --device cpu --out DIR`).

- the derived contracts (full and tiny) pass the kit's schema and cross-field rules, and every changed
  field is listed with its reason;
- a phase that outlives its deadline is stopped with its whole process group (a launcher's workers
  included), so a deadlock cannot hold the device call.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from campaigns import adaptive_gpu_campaign as agc
from campaigns.phases import run_process
from kit.adaptive.continued_schema import adaptive_job_terms
from kit.adaptive.schema import commit_points, load_adaptive_contract


@pytest.mark.parametrize("scale", ["full", "tiny"])
def test_derived_contract_is_valid_and_lists_its_changes(scale, tmp_path):
    base = json.loads(agc.CONTRACTS[scale].read_text())
    derived, changes = agc.derive_contract(base, "ab" * 32, 4, 4, 2, 2)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(derived))
    c = load_adaptive_contract(path).data
    assert c["endpoints"] == {"A": 4, "B": 4} and c["migration"]["at_step"] == 2
    job = adaptive_job_terms(c)  # the job view the drivers read (kit.adaptive.continued_schema.job_contract)
    assert commit_points(job, "A") == [2, 4] and commit_points(job, "B") == [2, 4]
    changed = {x["field"] for x in changes}
    assert {"seed.parameter_digest", "endpoints.A", "endpoints.B", "migration.at_step"} <= changed
    assert all(x["why"] for x in changes)
    for field in ("microbatch_size", "max_tokens", "optimizer", "max_grad_norm", "distillation", "compute_dtype"):
        assert c["training"][field] == base["training"][field]  # everything else as the base contract
    for cohort in ("A", "B"):
        assert c["cohorts"][cohort]["per_update"] == base["cohorts"][cohort]["per_update"]


def test_a_phase_past_its_deadline_is_stopped_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(marker)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    t0 = time.monotonic()
    r = run_process([sys.executable, "-c", code], {}, 3.0, tmp_path / "logs" / "hang")
    assert r["timed_out"] and time.monotonic() - t0 < 30
    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
        if state == "Z":  # killed, not yet reaped by init
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
