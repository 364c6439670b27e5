"""Issue 9, case 11: no pickle is ever loaded from a store, a seed or a run.

A payload whose `__reduce__` creates a marker file (checked to work: unpickling it, or `torch.load`
with `weights_only=False` on its torch.save form, or PyYAML's unsafe loader on its YAML form, does
create the marker) is planted in place of every file kind the kit reads: a tensor object, an RNG
object, a manifest, a role file, a seed's safetensors file (and, beside it, the pickle files other
tools write into model directories), run.json, a notebook and its parameters (the parameters cell, a
batch plan in JSON and in YAML), a contract, a selection record and a compression-state record. Each
kit loader then refuses the file or reads it as plain bytes; the marker never appears.

And by inspection of the source (AST, so comments and strings do not count): the kit never imports a
pickle-family module, never calls `torch.load` without `weights_only=True`, never uses PyYAML's
unsafe loaders, `numpy.load(allow_pickle=True)`, `pandas.read_pickle`, or torch.distributed's object
collectives (which unpickle what a peer sends).
"""

from __future__ import annotations

import ast
import io
import json
import pickle
import re
from pathlib import Path

import pytest
import torch
from support.reliability import REPO, model_commit, write_seed

from kit.store.commits import load_param_states, read_commit

MARKER_CODE = "open({!r}, 'w').close()"


class Payload:
    """Unpickling this runs `exec(code)`, which creates the marker file."""

    def __init__(self, marker: Path):
        self.code = MARKER_CODE.format(str(marker))

    def __reduce__(self):
        return (exec, (self.code,))


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "PWNED"
    yield path
    assert not path.exists(), "a planted pickle payload ran"


@pytest.fixture
def payloads(tmp_path):
    """The payload as pickle bytes and in torch.save's zip form, each shown to run when unpickled."""
    control = tmp_path / "control-marker"
    raw = pickle.dumps(Payload(control))
    pickle.loads(raw)
    assert control.exists()
    control.unlink()
    buf = io.BytesIO()
    torch.save(Payload(control), buf)
    zipped = buf.getvalue()
    torch.load(io.BytesIO(zipped), weights_only=False)  # noqa: S614 - positive control again
    assert control.exists()
    control.unlink()

    def make(marker: Path) -> dict[str, bytes]:
        return {"pickle": pickle.dumps(Payload(marker)), "torch.save": _torch_saved(marker)}
    return make


def _torch_saved(marker: Path) -> bytes:
    buf = io.BytesIO()
    torch.save(Payload(marker), buf)
    return buf.getvalue()


def _padded(data: bytes, size: int) -> bytes:
    """Pickle stops at its STOP opcode, so trailing zeros keep the payload live."""
    assert len(data) <= size
    return data + b"\0" * (size - len(data))


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    return write_seed(tmp_path_factory.mktemp("no-pickle") / "seed", layers=2)


# -- store -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["pickle", "torch.save"])
def test_payload_as_a_tensor_object_is_read_as_bytes(tmp_path, seed, marker, payloads, form):
    """A payload stored under its own digest and named by a manifest as a tensor of exactly its size."""
    data = _padded(payloads(marker)[form], 64 * 16 * 4)  # model.embed_tokens.weight: 64 x 16 float32
    home = tmp_path / "home"
    root = model_commit(home, seed, workers=1, replace_objects={"model.embed_tokens.weight.param": data})
    manifest = read_commit(home, root)
    from kit.store.objects import ObjectStore

    loaded = load_param_states(ObjectStore(home), manifest["learned_state"]["params"], {"model.embed_tokens.weight"})
    tensor = loaded["model.embed_tokens.weight"]["param"]
    assert tensor.contiguous().view(torch.uint8).numpy().tobytes() == data  # plain bytes, nothing else


@pytest.mark.parametrize("form", ["pickle", "torch.save"])
def test_payload_in_place_of_an_existing_object_is_refused(tmp_path, seed, marker, payloads, form):
    from kit.store.objects import ObjectCorrupt, ObjectStore

    home = tmp_path / "home"
    root = model_commit(home, seed, workers=1)
    entry = read_commit(home, root)["learned_state"]["params"][0]
    store = ObjectStore(home)
    store.path(entry["param"]).write_bytes(payloads(marker)[form])
    with pytest.raises(ObjectCorrupt, match=entry["param"]):
        store.get_tensor(entry["param"], "float32", entry["shape"])


@pytest.mark.parametrize("form", ["pickle", "torch.save"])
def test_payload_as_an_rng_object_is_refused_by_the_resume(tmp_path, seed, marker, payloads, form):
    from support.engine import OPT
    from support.engine_workers import engine_config

    from kit.distributed.group import Group
    from kit.engine.session import Session
    from kit.model.shard import even_layout
    from kit.store.start import start_from_commit
    from kit.train.optim import GroupConfig

    home = tmp_path / "home"
    root = model_commit(home, seed, workers=1, rng_bytes=[payloads(marker)[form]])
    with pytest.raises(RuntimeError):  # torch.set_rng_state(torch.frombuffer(bytes)): a byte tensor of the wrong size
        Session(Group(0, 1, torch.device("cpu")), str(home), even_layout(2, 1), start_from_commit(str(home), root),
                engine_config({"microbatch_size": 2, "max_grad_norm": 1.0}), {"default": GroupConfig(**OPT)})


@pytest.mark.parametrize("form", ["pickle", "torch.save"])
def test_payload_as_a_manifest_or_head_is_refused(tmp_path, seed, marker, payloads, form):
    from kit.store.commits import read_head

    home = tmp_path / "home"
    root = model_commit(home, seed, workers=1)
    path = home / "commits" / f"{root}.json"
    path.write_bytes(payloads(marker)[form])
    with pytest.raises(ValueError, match=re.escape(str(path))):
        read_commit(home, root)
    (home / "HEAD").write_bytes(payloads(marker)[form])
    with pytest.raises(ValueError, match=re.escape(str(home / "HEAD"))):
        read_head(home)


def test_payload_as_a_compression_state_record_is_refused(tmp_path, marker, payloads):
    from kit.study.compression_state import read_compression_record, record_path

    root = "a" * 64
    path = record_path(tmp_path, root, 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(payloads(marker)["pickle"])
    with pytest.raises(ValueError, match=re.escape(str(path))):
        read_compression_record(tmp_path, root, 0, 1)


# -- seed --------------------------------------------------------------------------------------------------


PICKLE_NAMES = ("pytorch_model.bin", "training_args.bin", "optimizer.pt", "rng_state.pth")


def test_payload_as_the_safetensors_file_is_refused(tmp_path, seed, marker, payloads):
    import shutil

    from kit.inventory import parameter_digest
    from kit.model.config import load_config
    from kit.model.shard import build_stage, even_layout, load_owned

    bad = tmp_path / "seed"
    shutil.copytree(seed, bad)
    (bad / "model.safetensors").write_bytes(payloads(marker)["pickle"])
    for name in PICKLE_NAMES:
        (bad / name).write_bytes(payloads(marker)["torch.save"])
    stage = build_stage(load_config(bad), even_layout(2, 1), 0)
    with pytest.raises(ValueError, match=re.escape(str(bad / "model.safetensors"))):
        load_owned(stage, bad)
    with pytest.raises(ValueError, match=re.escape(str(bad / "model.safetensors"))):
        parameter_digest(bad)


def test_pickle_files_beside_a_good_seed_are_never_opened(tmp_path, seed, marker, payloads):
    """What transformers or a trainer leave in model directories is ignored: only *.safetensors is read,
    and the tokenizer loader reads the tokenizer files."""
    import shutil

    from kit.data.chat import load_tokenizer
    from kit.data.conversations import synthetic_conversations
    from kit.data.tokenizer_build import build_tokenizer
    from kit.inventory import parameter_digest
    from kit.model.config import load_config
    from kit.model.shard import build_stage, even_layout, load_owned

    good = tmp_path / "seed"
    shutil.copytree(seed, good)
    build_tokenizer([m.content for c in synthetic_conversations(30, 1) for m in c.messages], 300, good)
    digest = parameter_digest(good)
    for name in PICKLE_NAMES:
        (good / name).write_bytes(payloads(marker)["torch.save"])
    stage = build_stage(load_config(good), even_layout(2, 1), 0)
    assert load_owned(stage, good) > 0
    assert parameter_digest(good) == digest
    assert load_tokenizer(good).chat_template


# -- prepared job, contract, selection ---------------------------------------------------------------------


def test_payload_as_a_role_file_contract_or_selection_is_refused(tmp_path, marker, payloads):
    from kit.adaptive.bindings import check_inputs
    from kit.adaptive.schema import load_adaptive_contract
    from kit.adaptive.selection import FinalRolesRefused, open_final_roles
    from kit.data.conversations import read_jsonl

    data = payloads(marker)["pickle"]
    role = tmp_path / "A.new.jsonl"
    role.write_bytes(data)
    with pytest.raises(ValueError, match=re.escape(str(role))):
        read_jsonl(role)
    contract = tmp_path / "contract.json"
    contract.write_bytes(data)
    with pytest.raises(ValueError, match=re.escape(str(contract))):
        load_adaptive_contract(contract)
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "adaptive-shards-inputs.json").write_bytes(data)
    with pytest.raises(ValueError, match="adaptive-shards-inputs.json"):
        check_inputs(prepared)
    selection = tmp_path / "selection.json"
    selection.write_bytes(data)
    with pytest.raises(FinalRolesRefused, match="unreadable selection record"):
        open_final_roles(prepared, selection, ["a" * 64], "test")


# -- runs and notebooks ------------------------------------------------------------------------------------


def test_payload_as_run_json_is_refused(tmp_path, marker, payloads):
    from kit.evidence.run_record import read_run_record
    from kit.evidence.verify import verify_evidence

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_bytes(payloads(marker)["pickle"])
    with pytest.raises(ValueError, match=re.escape(str(run / "run.json"))):
        read_run_record(run)
    report = verify_evidence(run)
    assert not report["ok"]


def test_payload_as_a_notebook_or_its_parameters_never_runs(tmp_path, marker, payloads):
    import nbformat
    import yaml

    from kit.evidence.parameters import ParameterError, check_parameters, parse_assignments
    from kit.evidence.runner import load_plan

    notebook = tmp_path / "nb.ipynb"
    notebook.write_bytes(payloads(marker)["pickle"])
    with pytest.raises(ValueError, match=re.escape(str(notebook))):
        check_parameters(notebook, {})
    # a parameters cell with code instead of literals is refused, never executed
    code = MARKER_CODE.format(str(marker))
    for cell in (f"x = exec({code!r})\n", f"x = 1\n{code}\n", f"x = (lambda: {code})()\n"):
        with pytest.raises(ParameterError):
            parse_assignments(cell, "nb")
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(f"x = exec({code!r})\n")
    cell.metadata["tags"] = ["parameters"]
    nb.cells.append(cell)
    nbformat.write(nb, notebook)
    with pytest.raises(ParameterError, match="not a literal"):
        check_parameters(notebook, {})
    # batch plans: pickle bytes as JSON, and YAML's python tags (which the unsafe loader would run)
    plan = tmp_path / "plan.json"
    plan.write_bytes(payloads(marker)["pickle"])
    with pytest.raises(ValueError, match=re.escape(str(plan))):
        load_plan(plan)
    tagged = f"- !!python/object/apply:builtins.exec [{json.dumps(code)}]\n"
    control = tmp_path / "yaml-control"
    yaml.unsafe_load(tagged.replace(str(marker), str(control)))  # positive control: the tag does run code
    assert control.exists()
    yaml_plan = tmp_path / "plan.yaml"
    yaml_plan.write_text(tagged)
    with pytest.raises(ValueError, match=re.escape(str(yaml_plan)) + ": invalid YAML"):
        load_plan(yaml_plan)


# -- the source itself -------------------------------------------------------------------------------------

PICKLE_MODULES = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve", "marshal", "copyreg"}
OBJECT_COLLECTIVES = {"all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
                      "send_object_list", "recv_object_list"}


def _kit_sources() -> list[Path]:
    files = sorted((REPO / "kit").rglob("*.py"))
    assert len(files) > 40
    return files


def _call_name(node: ast.Call) -> str:
    parts, f = [], node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def _keyword(node: ast.Call, name: str):
    return next((k.value for k in node.keywords if k.arg == name), None)


def unsafe_deserialisation(source: str, filename: str) -> list[str]:
    """Every place in `source` that could unpickle (or run code from) data it reads."""
    problems = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            problems += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLE_MODULES]
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if module in PICKLE_MODULES:
                problems.append(f"{where}: from {node.module} import ...")
            if node.module in ("torch", "torch.serialization") and any(a.name == "load" for a in node.names):
                problems.append(f"{where}: from {node.module} import load (its calls could not be checked)")
            if node.module == "yaml" and any(a.name in ("load", "unsafe_load", "full_load") for a in node.names):
                problems.append(f"{where}: from yaml import an unsafe loader")
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            last = name.rsplit(".", 1)[-1]
            if name in ("torch.load", "torch.serialization.load"):
                flag = _keyword(node, "weights_only")
                if not (isinstance(flag, ast.Constant) and flag.value is True):
                    problems.append(f"{where}: {name} without weights_only=True")
            elif name in ("yaml.load", "yaml.unsafe_load", "yaml.full_load", "yaml.load_all", "yaml.unsafe_load_all"):
                problems.append(f"{where}: {name}")
            elif last == "load" and name.split(".")[0] in ("np", "numpy"):
                flag = _keyword(node, "allow_pickle")
                if flag is not None and not (isinstance(flag, ast.Constant) and flag.value is False):
                    problems.append(f"{where}: {name} with allow_pickle")
            elif last == "read_pickle" or last in OBJECT_COLLECTIVES:
                problems.append(f"{where}: {name}")
    return problems


def test_the_scanner_finds_every_unsafe_pattern():
    bad = ("import pickle\nimport dill\nfrom joblib import load\nimport torch\nimport yaml\nimport numpy as np\n"
           "torch.load(f)\ntorch.load(f, weights_only=False)\ntorch.load(f, weights_only=flag)\n"
           "yaml.load(s)\nyaml.unsafe_load(s)\nnp.load(f, allow_pickle=True)\nimport pandas as pd\n"
           "pd.read_pickle(f)\nimport torch.distributed as dist\ndist.all_gather_object(out, obj)\n"
           "from torch import load\n")
    found = unsafe_deserialisation(bad, "bad.py")
    assert len(found) == 12, found
    good = "import torch\nimport yaml\ntorch.load(f, weights_only=True)\nyaml.safe_load(s)\nnp.load(f)\n"
    assert unsafe_deserialisation(good, "good.py") == []


def test_kit_source_never_unpickles():
    problems = []
    for path in _kit_sources():
        problems += unsafe_deserialisation(path.read_text(), str(path.relative_to(REPO)))
    assert problems == []


def test_notebooks_never_unpickle():
    """The notebooks that produce the evidence are held to the same rule (magics and shell lines dropped)."""
    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    problems = []
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        for i, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            problems += unsafe_deserialisation("\n".join(lines), f"{path.name} cell {i}")
    assert problems == []
