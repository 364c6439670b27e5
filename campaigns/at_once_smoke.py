"""Smoke of kit.evidence.runner.run_notebooks_at_once where it is used: two notebooks that can only both
complete if they run at the same time (each marks its arrival and waits for the other's mark), each also
multiplying on the GPU with --cuda. On a GPU host, after the notebook runtime (docs/gpu-hosts.md):

    . /tmp/nbrt/env.sh; PYTHONPATH=.:$PYTHONPATH python3 -m campaigns.at_once_smoke --cuda --work /tmp/at-once

It prints (and with --out writes) {"seconds", "python", "runs": [{"run_id", "status", "reason", "started_at",
"ended_at", "device"}]}; exit status 0 when both arms completed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import nbformat


def barrier_cell(cuda: bool) -> str:
    """The arm's code: parameters `name` (its mark) and `mapping` ({"folder", "other"}: where marks go and
    the other arm's mark); one arm alone finds no mark and fails after 120 s."""
    gpu = "import torch\nx = torch.randn(4096, 4096, device='cuda'); print((x @ x).sum().item())\n" if cuda else ""
    return gpu + (
        "import pathlib, time\n"
        "folder = pathlib.Path(mapping['folder'])\n"
        "(folder / name).write_text('here')\n"
        "deadline = time.monotonic() + 120\n"
        "while not (folder / mapping['other']).exists():\n"
        "    if time.monotonic() > deadline:\n"
        "        raise RuntimeError(f'{mapping[\"other\"]} never arrived: the arms did not run at once')\n"
        "    time.sleep(0.05)\n")


def write_barrier_notebook(path: Path, cuda: bool = False) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("name = 'a'\nmapping = {}\n")
    params.metadata["tags"] = ["parameters"]
    nb.cells += [params, nbformat.v4.new_code_cell(barrier_cell(cuda))]
    nbformat.write(nb, path)
    return path


def barrier_arms(notebook: Path, marks: Path) -> list:
    """Two arms (kit.evidence.runner.PlanArm) of `notebook`, arm-a and arm-b, each waiting for the other's mark in
    `marks`."""
    from kit.evidence.runner import PlanArm

    return [PlanArm(notebook=str(notebook), run_id=f"arm-{me}",
                    parameters={"name": me, "mapping": {"folder": str(marks), "other": other}})
            for me, other in (("a", "b"), ("b", "a"))]


def main(argv=None) -> int:
    from kit.evidence.runner import run_notebooks_at_once

    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="a new folder for the notebook, marks, runs and logs")
    ap.add_argument("--cuda", action="store_true", help="each arm also multiplies two matrices on the GPU")
    ap.add_argument("--out", type=Path, help="also write the result here (JSON)")
    a = ap.parse_args(argv)
    (a.work / "marks").mkdir(parents=True)
    arms = barrier_arms(write_barrier_notebook(a.work / "barrier.ipynb", a.cuda), a.work / "marks")
    t0 = time.perf_counter()
    records = run_notebooks_at_once(arms, a.work / "runs", a.work / "logs")
    result = {"seconds": round(time.perf_counter() - t0, 1), "python": sys.executable,
              "runs": [{"run_id": r.run_id, "status": r.status, "reason": r.reason, "started_at": r.started_at,
                        "ended_at": r.ended_at, "device": r.device} for r in records]}
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r.status == "completed" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
