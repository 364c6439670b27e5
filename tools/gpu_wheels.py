#!/usr/bin/env python3
"""Bring the notebook runtime (papermill, nbconvert, ipykernel) to a host with no package index.

The GPU hosts run Python 3.12 with torch and transformers but without papermill, nbconvert or a
Jupyter kernel, and they cannot reach an index. This tool, step by step (docs/gpu-hosts.md):

    build   (here, with an index)  pip-download the pinned wheels of requirements/gpu-notebook.txt
            and requirements/gpu-notebook-host.txt for a Python version and manylinux x86_64 into
            build/gpu-wheels/, check that they are exactly the closure of papermill, nbconvert and
            ipykernel, move the wheels that nothing imports at run time (LEFT_OUT) aside, and write
            manifest.json and SHA256SUMS (every carried wheel's sha256 and size).
    install (on the host, no index) verify every wheel's sha256, pip-install gpu-notebook.txt with
            --no-index --no-deps --target TARGET, check every requirement of what it installed
            against the host's own packages (installing a host-role wheel only where the host's copy
            is missing or fails a requirement), and write TARGET/env.sh.
    smoke   (anywhere) execute a parameterised notebook with papermill on the `python3` kernel and
            render it with nbconvert's lab template; fails unless papermill came from TARGET.

`install` and `smoke` use only the standard library and pip (both on the host); `packaging` is taken
from the host, or from pip's vendored copy. Nothing here imports the kit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements" / "gpu-notebook.txt"  # installed into TARGET
HOST_REQUIREMENTS = REPO / "requirements" / "gpu-notebook-host.txt"  # on the GPU image; wheels as fallback
DEFAULT_OUT = REPO / "build" / "gpu-wheels"
ROOTS = ("papermill", "nbconvert", "ipykernel")  # what kit.evidence.runtime imports, directly or through them
MANIFEST_NAME = "manifest.json"
SUMS_NAME = "SHA256SUMS"
MANIFEST_FORMAT = "kit-gpu-wheels/2"  # /2: the field "left_out"
# Pinned (they are in the roots' closure, and the build resolves with them) but not carried: nothing
# that executes or renders a notebook imports them, and they are the two largest wheels (9.8 of 15.4 MiB).
# Leaving them behind keeps the carried set, beside the repository, inside the device tool's 64 MiB.
LEFT_OUT = {
    "debugpy": "ipykernel imports it only for its debugger, in a guarded import (ipykernel/debugger.py)",
    "jedi": "IPython imports it only for tab completion, lazily (IPython/core/completer.py)",
}
# build --without-fallbacks also leaves out the host-role wheels (3.5 MiB), for a call whose repository
# leaves too little of the 64 MiB: the install then needs the image's own copies, and refuses without them.
FALLBACK_LEFT_OUT = ("the GPU image has it (requirements/gpu-notebook-host.txt); its wheel is only a fallback, "
                     "left out by build --without-fallbacks")
MARKER_NAME = "kit-gpu-runtime.json"  # written into TARGET by install
# manylinux tags pip may pick, best first. pip matches --platform strings exactly, so every glibc
# level is named. The cap at glibc 2.28 keeps the set installable on any host with glibc >= 2.28
# (the GPU image's Ubuntu 24.04 has 2.39); a pin with no wheel at or below it fails the build, by name.
PLATFORMS = tuple(f"manylinux_2_{n}_x86_64" for n in range(28, 16, -1)) + (
    "manylinux2014_x86_64", "manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64",
    "manylinux1_x86_64")


class RouteError(RuntimeError):
    """A step of the route cannot go on; the message names the file, the field and what was expected."""


def _packaging():
    """(Requirement, canonicalize_name, Version) from `packaging`, or pip's vendored copy."""
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
        from packaging.version import Version
    except ImportError:  # a host without `packaging` still has pip
        from pip._vendor.packaging.requirements import Requirement
        from pip._vendor.packaging.utils import canonicalize_name
        from pip._vendor.packaging.version import Version
    return Requirement, canonicalize_name, Version


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of a requirements file whose every line is NAME==VERSION (or a comment)."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if not m:
            raise RouteError(f"{path}:{number}: {raw.strip()!r} is not an exact pin; expected NAME==VERSION")
        name = canonical(m.group(1))
        if name in pins:
            raise RouteError(f"{path}:{number}: {name} is pinned twice")
        pins[name] = m.group(2)
    return pins


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel_name_version(filename: str) -> tuple[str, str]:
    parts = filename[:-len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        raise RouteError(f"{filename}: not a wheel file name (NAME-VERSION-...-PYTAG-ABITAG-PLATFORM.whl)")
    return canonical(parts[0]), parts[1]


def _pip(python: str, *args: str, isolated: bool = False) -> list[str]:
    return [python, "-m", "pip", *(("--isolated",) if isolated else ()), *args]


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        # pip's "Location ... is ignored" warnings about a configured find-links folder are noise here
        lines = [x for x in (done.stdout + done.stderr).strip().splitlines() if "is ignored: it is neither" not in x]
        tail = lines[-15:]
        raise RouteError(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n  " + "\n  ".join(tail))
    return done


def target_flags(python_version: str) -> list[str]:
    flags = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        flags += ["--platform", platform]
    return flags


# --- build ------------------------------------------------------------------------------------
def build(out: Path, python_version: str, python: str = sys.executable, fallbacks: bool = True) -> dict:
    """Download the pinned wheels for `python_version` into `out`, check the set is the roots' exact
    closure, move the LEFT_OUT wheels (and, without `fallbacks`, the host-role ones) aside, and write
    manifest.json and SHA256SUMS. Returns the manifest."""
    # MAJOR.MINOR means MAJOR.MINOR.0 to pip, which refuses wheels that require a later micro
    # release (soupsieve 4.1.3 requires 3.11.5): give the host's full version where that matters.
    if not re.fullmatch(r"3\.\d+(\.\d+)?", python_version):
        raise RouteError(f"--python-version {python_version!r}: expected MAJOR.MINOR[.MICRO] such as 3.12 or 3.12.3")
    bring, host = read_pins(REQUIREMENTS), read_pins(HOST_REQUIREMENTS)
    both = sorted(set(bring) & set(host))
    if both:
        raise RouteError(f"{REQUIREMENTS} and {HOST_REQUIREMENTS} both pin {', '.join(both)}; each package has one role")
    missing_roots = [r for r in ROOTS if r not in bring]
    if missing_roots:
        raise RouteError(f"{REQUIREMENTS}: the roots {', '.join(missing_roots)} must be pinned there")
    out.mkdir(parents=True, exist_ok=True)
    # --no-deps: the two files are the whole set; what they miss is found by the resolution below,
    # which is the check, rather than silently downloaded here.
    _run(_pip(python, "download", "--no-deps", "--quiet", "--dest", str(out), *target_flags(python_version),
              "-r", str(REQUIREMENTS), "-r", str(HOST_REQUIREMENTS)), f"downloading wheels for Python {python_version}")
    pinned = {**bring, **host}
    wheels, stray = [], []
    for path in sorted(out.glob("*.whl")):
        name, version = wheel_name_version(path.name)
        if pinned.get(name) != version:
            stray.append(path.name)  # left by an earlier build of other pins: not in this set
            continue
        wheels.append({"name": name, "version": version, "role": "bring" if name in bring else "host",
                       "file": path.name, "sha256": sha256_file(path), "size": path.stat().st_size})
    if stray:
        raise RouteError(f"{out}: holds wheels that no pin names ({', '.join(stray)}); delete them or the folder "
                         f"and build again, so the carried set is exactly the pinned one")
    got = {w["name"] for w in wheels}
    if got != set(pinned) or len(wheels) != len(pinned):
        raise RouteError(f"{out}: expected one wheel for each of the {len(pinned)} pins, found {len(wheels)}; "
                         f"missing: {sorted(set(pinned) - got)}")
    check_closure(out, python_version, pinned, python)
    # the left-out wheels move beside the carried folder (kept, so a rebuild does not download them again
    # and the complete set can still be resolved from the two folders)
    aside = left_out_dir(out)
    aside.mkdir(parents=True, exist_ok=True)
    left_out = []
    for w in [w for w in wheels if w["name"] in LEFT_OUT or (not fallbacks and w["role"] == "host")]:
        os.replace(out / w["file"], aside / w["file"])
        wheels.remove(w)
        left_out.append({**w, "reason": LEFT_OUT.get(w["name"], FALLBACK_LEFT_OUT)})
    manifest = {"format": MANIFEST_FORMAT, "python_version": python_version, "implementation": "cp",
                "platforms": list(PLATFORMS), "roots": list(ROOTS),
                "requirements": {p.relative_to(REPO).as_posix(): sha256_file(p) for p in (REQUIREMENTS, HOST_REQUIREMENTS)},
                "total_bytes": sum(w["size"] for w in wheels), "wheels": wheels, "left_out": left_out}
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / SUMS_NAME).write_text("".join(f"{w['sha256']}  {w['file']}\n" for w in wheels), encoding="utf-8")
    return manifest


def check_closure(wheel_dir: Path, python_version: str, pinned: dict[str, str], python: str = sys.executable) -> None:
    """Resolve the roots over `wheel_dir` alone (no index) for `python_version`: the result must be
    exactly `pinned`. This is also the check that the set installs completely on such a host."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        roots = [f"{r}=={pinned[r]}" for r in ROOTS]
        _run(_pip(python, "install", "--dry-run", "--quiet", "--ignore-installed", "--no-index", "--find-links",
                  str(wheel_dir), *target_flags(python_version), "--target", str(Path(tmp) / "target"),
                  "--report", str(report), *roots, isolated=True),
             f"resolving {' '.join(roots)} over {wheel_dir} alone for Python {python_version}")
        resolved = {canonical(i["metadata"]["name"]): i["metadata"]["version"]
                    for i in json.loads(report.read_text())["install"]}
    unpinned = {n: v for n, v in resolved.items() if pinned.get(n) != v}
    unneeded = sorted(set(pinned) - set(resolved))
    if unpinned or unneeded:
        raise RouteError(f"{REQUIREMENTS.name} + {HOST_REQUIREMENTS.name} are not the closure of {', '.join(ROOTS)} "
                         f"for Python {python_version}: resolved but not pinned so: {unpinned or 'none'}; "
                         f"pinned but not needed: {unneeded or 'none'}")


def left_out_dir(wheel_dir: Path) -> Path:
    """Where build puts the pinned wheels it does not carry: beside the carried folder, never inside it."""
    return wheel_dir.parent / f"{wheel_dir.name}-left-out"


# --- install (on the host) --------------------------------------------------------------------
def load_manifest(wheel_dir: Path) -> dict:
    path = wheel_dir / MANIFEST_NAME
    if not path.is_file():
        raise RouteError(f"{path}: no manifest; build the set with `make gpu-wheels` (tools/gpu_wheels.py build) "
                         f"and carry the whole folder")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != MANIFEST_FORMAT:
        raise RouteError(f"{path}: field 'format' is {manifest.get('format')!r}, expected {MANIFEST_FORMAT!r}")
    return manifest


def verify_wheels(wheel_dir: Path, manifest: dict) -> None:
    """Every wheel the manifest lists is there with its sha256, and the requirement files it was
    built from are the ones in this checkout (a stale set would install other versions)."""
    for rel, digest in manifest["requirements"].items():
        here = REPO / rel
        if not here.is_file() or sha256_file(here) != digest:
            raise RouteError(f"{wheel_dir / MANIFEST_NAME}: built from a {rel} with sha256 {digest[:12]}..., but this "
                             f"checkout's differs; rebuild with `make gpu-wheels`")
    for w in manifest["wheels"]:
        path = wheel_dir / w["file"]
        if not path.is_file():
            raise RouteError(f"{path}: listed in {MANIFEST_NAME} but missing; carry the whole {wheel_dir} folder")
        digest = sha256_file(path)
        if digest != w["sha256"]:
            raise RouteError(f"{path}: sha256 {digest} differs from {MANIFEST_NAME}'s {w['sha256']}; the file is "
                             f"damaged or not the one built; rebuild and carry again")


def unmet_requirements(target: Path) -> list[dict]:
    """Requirements of the distributions in `target` (their extras followed) that the interpreter,
    with `target` first on sys.path, does not satisfy. Run inside the host's interpreter."""
    from importlib import metadata

    Requirement, canonicalize_name, Version = _packaging()
    todo = [(canonicalize_name(d.metadata["Name"]), ()) for d in metadata.distributions(path=[str(target)])]
    seen, unmet = set(), []
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        dist = metadata.distribution(name)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                continue
            try:
                found = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                found = None
            if found is None or not req.specifier.contains(Version(found), prereleases=True):
                unmet.append({"package": canonicalize_name(req.name), "requirement": str(req),
                              "required_by": f"{name} {dist.version}", "found": found})
            elif req.extras:
                todo.append((canonicalize_name(req.name), tuple(sorted(req.extras))))
    return unmet


def _unmet_on_host(python: str, target: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = _run([python, str(Path(__file__).resolve()), "_unmet", str(target)], "checking requirements", env=env)
    return json.loads(done.stdout)


def install(target: Path, wheel_dir: Path = DEFAULT_OUT, python: str = sys.executable) -> dict:
    """Install the carried set into `target` without an index; returns what TARGET/kit-gpu-runtime.json says."""
    manifest = load_manifest(wheel_dir)
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if ".".join(str(manifest["python_version"]).split(".")[:2]) != running:
        raise RouteError(f"{wheel_dir / MANIFEST_NAME}: field 'python_version' is {manifest['python_version']}, but "
                         f"this is Python {running} ({sys.executable}); build the set with "
                         f"`tools/gpu_wheels.py build --python-version {running}`")
    verify_wheels(wheel_dir, manifest)
    target = target.resolve()
    if target.exists() and any(target.iterdir()) and not (target / MARKER_NAME).is_file():
        raise RouteError(f"{target}: exists, is not empty and holds no {MARKER_NAME}; give an empty or new folder")
    by_name = {w["name"]: w for w in manifest["wheels"]}
    pip_flags = ["install", "--quiet", "--no-index", "--no-deps", "--only-binary=:all:", "--no-compile",
                 "--upgrade", "--target", str(target)]
    # --no-deps over explicit files: exactly the pinned set goes in; --isolated: no pip.conf or
    # PIP_* variable of the host adds an index, a find-links folder or a constraint.
    bring = [str(wheel_dir / w["file"]) for w in manifest["wheels"] if w["role"] == "bring"]
    _run(_pip(python, *pip_flags, *bring, isolated=True), f"installing {len(bring)} wheels into {target}")
    fallback: list[dict] = []
    # a requirement on a package that nothing running a notebook imports (LEFT_OUT), missing on the host,
    # stays unmet on purpose; a left-out fallback (role host) the host lacks is an error below
    optional = {w["name"] for w in manifest["left_out"] if w["role"] == "bring"}
    unmet = _unmet_on_host(python, target)
    accepted = [u for u in unmet if u["package"] in optional and u["found"] is None]
    unmet = [u for u in unmet if u not in accepted]
    if unmet:
        # the host's copy is missing or too old: take the pinned wheel, and say so, since a copy in
        # TARGET shadows the host's for every process with TARGET on PYTHONPATH
        names = sorted({u["package"] for u in unmet})
        unknown = [n for n in names if n not in by_name or by_name[n]["role"] != "host"]
        if not unknown:
            _run(_pip(python, *pip_flags, *(str(wheel_dir / by_name[n]["file"]) for n in names), isolated=True),
                 f"installing fallback wheels {', '.join(names)}")
            fallback = unmet
            unmet = [u for u in _unmet_on_host(python, target) if u not in accepted]
    if unmet:
        lines = [f"{u['required_by']} requires {u['requirement']}, found {u['found'] or 'nothing'}" for u in unmet]
        no_fallback = sorted({u["package"] for u in unmet} & {w["name"] for w in manifest["left_out"] if w["role"] == "host"})
        hint = (f"\n  the fallback wheels of {', '.join(no_fallback)} were left out (build --without-fallbacks); "
                f"carry a set built with them (make gpu-wheels)") if no_fallback else ""
        raise RouteError(f"{target}: requirements still unmet on {python}:\n  " + "\n  ".join(lines) + hint)
    kernel = target / "share" / "jupyter" / "kernels" / "python3" / "kernel.json"
    if not kernel.is_file():
        raise RouteError(f"{kernel}: ipykernel's kernelspec is missing after the install; expected pip --target to "
                         f"place the wheel's data files there")
    record = {"format": MANIFEST_FORMAT, "python": python, "python_version": running,
              "wheel_dir": str(wheel_dir.resolve()), "manifest_sha256": sha256_file(wheel_dir / MANIFEST_NAME),
              "installed": sorted([w["name"] + "==" + w["version"] for w in manifest["wheels"] if w["role"] == "bring"]
                                  + [f"{u['package']}=={by_name[u['package']]['version']}" for u in fallback]),
              "fallback": fallback, "left_out": accepted}
    (target / MARKER_NAME).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (target / "env.sh").write_text(env_script(target), encoding="utf-8")
    return record


def env_script(target: Path) -> str:
    # PYTHONPATH: papermill for `kit`, and ipykernel for the kernel, which inherits the variable (kit
    # appends it to the kernel's PYTHONPATH). JUPYTER_PATH: where jupyter_client finds the `python3`
    # kernelspec and nbconvert its lab template, both data files that pip --target put under share/.
    return (f"# source this file: the notebook runtime installed by tools/gpu_wheels.py (docs/gpu-hosts.md)\n"
            f'export PYTHONPATH="{target}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
            f'export JUPYTER_PATH="{target}/share/jupyter${{JUPYTER_PATH:+:$JUPYTER_PATH}}"\n')


# --- smoke (anywhere) ---------------------------------------------------------------------------
SMOKE_NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "execution_count": None, "id": "parameters", "metadata": {"tags": ["parameters"]},
         "outputs": [], "source": "factor = 1\n"},
        {"cell_type": "code", "execution_count": None, "id": "answer", "metadata": {}, "outputs": [],
         "source": "import sys\nprint('answer', 6 * factor, sys.version_info[:2])\n"},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def smoke(out_dir: Path, target: Path | None = None) -> dict:
    """Execute SMOKE_NOTEBOOK with factor=7 through papermill on the `python3` kernel, check the printed
    answer, and render the result with nbconvert's lab template. With `target`, papermill, nbconvert and
    the kernelspec must come from it. Returns what was checked."""
    import nbconvert
    import nbformat
    import papermill
    from jupyter_client.kernelspec import KernelSpecManager

    out_dir.mkdir(parents=True, exist_ok=True)
    spec = KernelSpecManager().get_kernel_spec("python3")
    if target is not None:
        for module in (papermill, nbconvert):
            if not Path(module.__file__).resolve().is_relative_to(target.resolve()):
                raise RouteError(f"{module.__name__} was imported from {module.__file__}, not from {target}; "
                                 f"is PYTHONPATH set from {target}/env.sh?")
        if not Path(spec.resource_dir).resolve().is_relative_to(target.resolve()):
            raise RouteError(f"kernelspec python3 comes from {spec.resource_dir}, not {target}/share/jupyter; "
                             f"is JUPYTER_PATH set from {target}/env.sh?")
    source, executed = out_dir / "smoke.ipynb", out_dir / "smoke.out.ipynb"
    source.write_text(json.dumps(SMOKE_NOTEBOOK), encoding="utf-8")
    papermill.execute_notebook(str(source), str(executed), parameters={"factor": 7}, kernel_name="python3",
                               progress_bar=False)
    nb = nbformat.read(executed, as_version=4)  # joins the multi-line strings that the file stores as lists
    answer_cell = next(c for c in nb.cells if c.get("id") == "answer")
    text = "".join(o.get("text", "") for o in answer_cell.outputs if o.get("output_type") == "stream")
    want = f"answer 42 ({sys.version_info.major}, {sys.version_info.minor})"
    if text.strip() != want:
        raise RouteError(f"{executed}: the answer cell printed {text.strip()!r}, expected {want!r}")
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter(template_name="lab").from_filename(str(executed))
    (out_dir / "smoke.html").write_text(page, encoding="utf-8")
    if "answer 42" not in page:
        raise RouteError(f"{out_dir / 'smoke.html'}: the rendered page lacks the cell's output 'answer 42'")
    return {"papermill": papermill.__version__, "nbconvert": nbconvert.__version__, "kernelspec": spec.resource_dir,
            "kernel_argv0": spec.argv[0], "answer": text.strip(), "html_bytes": len(page)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(allow_abbrev=False, prog="tools/gpu_wheels.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", allow_abbrev=False, help="download the pinned wheels for a Python version (needs an index)")
    b.add_argument("--python-version", default="3.12",
                   help="the host's Python, MAJOR.MINOR[.MICRO] (default 3.12; the GPU image has 3.12.3)")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"wheel folder (default {DEFAULT_OUT.relative_to(REPO)})")
    b.add_argument("--without-fallbacks", action="store_true",
                   help="leave the host-role wheels out too (3.5 MiB): the install then relies on the image's copies")
    i = sub.add_parser("install", allow_abbrev=False, help="install a carried wheel set into TARGET without an index (on the host)")
    i.add_argument("target", type=Path, help="the folder to install into (new or empty, or an earlier install)")
    i.add_argument("--wheels", type=Path, default=DEFAULT_OUT, help="the carried wheel folder (default build/gpu-wheels)")
    s = sub.add_parser("smoke", allow_abbrev=False, help="execute and render a tiny notebook (PYTHONPATH/JUPYTER_PATH from TARGET/env.sh)")
    s.add_argument("out", type=Path, help="folder for smoke.ipynb, smoke.out.ipynb and smoke.html")
    s.add_argument("--target", type=Path, help="require papermill, nbconvert and the kernelspec to come from here")
    u = sub.add_parser("_unmet", allow_abbrev=False)  # internal: run by install in the host's interpreter with TARGET on PYTHONPATH
    u.add_argument("target", type=Path)
    a = p.parse_args(argv)
    try:
        if a.cmd == "build":
            m = build(a.out.resolve(), a.python_version, fallbacks=not a.without_fallbacks)
            print(f"{a.out}: {len(m['wheels'])} wheels for CPython {m['python_version']} manylinux x86_64, "
                  f"{m['total_bytes'] / 2**20:.1f} MiB; {MANIFEST_NAME} and {SUMS_NAME} written; left out (in "
                  f"{left_out_dir(a.out)}): {', '.join(w['file'] for w in m['left_out'])}")
        elif a.cmd == "install":
            r = install(a.target, a.wheels.resolve())
            host = [u["package"] for u in r["fallback"]]
            print(f"{a.target}: installed {len(r['installed'])} packages"
                  + (f" (from the fallback wheels, since the host's copy was missing or too old: {', '.join(host)})"
                     if host else "; every other requirement is met by the host's own packages"))
            print(f"Next:\n  . {a.target.resolve()}/env.sh   # PYTHONPATH and JUPYTER_PATH\n"
                  f"  python3 tools/gpu_wheels.py smoke /tmp/kit-smoke --target {a.target.resolve()}\n"
                  f"  kit batch PLAN   # or: python3 -m kit batch PLAN")
        elif a.cmd == "smoke":
            print(json.dumps(smoke(a.out, a.target), sort_keys=True))
        else:
            print(json.dumps(unmet_requirements(a.target)))
    except RouteError as e:
        print(f"tools/gpu_wheels.py {a.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
