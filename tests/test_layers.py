"""A module imports only from its own layer or below (DESIGN.md, "Layers of kit/")."""

from __future__ import annotations

import ast
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "kit"

LAYER0 = {"kit.digest", "kit.inventory", "kit.model.config", "kit.stats", "kit.planner", "kit.contract",
          "kit.provenance"}


def layer_of(module: str) -> int:
    if module in ("kit", "kit.__init__") or module in LAYER0:
        return 0
    def within(pkg: str) -> bool:
        return module == pkg or module.startswith(pkg + ".")

    if within("kit.data"):
        return 1
    if within("kit.model") or within("kit.train") or module == "kit.numerics":
        return 2
    if within("kit.distributed"):
        return 3
    if within("kit.store"):
        return 4
    return 5


THIRD_PARTY_FORBIDDEN = {0: {"torch", "transformers", "tokenizers", "safetensors"}, 1: {"torch"}, 2: set(),
                         4: set()}
DIST_FORBIDDEN_BELOW = 3  # torch.distributed only from layer 3 on (layer 4 storage must not use it either)


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch" and node.level == 0:
            for a in node.names:  # `from torch import distributed`
                if a.name == "distributed":
                    yield "torch.distributed"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch" \
                and node.attr == "distributed":  # `torch.distributed.x` through `import torch`
            yield "torch.distributed"
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def _module_name(path: Path) -> str:
    rel = path.relative_to(KIT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def test_layering():
    problems = []
    for path in sorted(KIT.rglob("*.py")):
        mod = _module_name(path)
        mine = layer_of(mod)
        for imp in _imports(path):
            if imp.startswith("kit"):
                if layer_of(imp) > mine:
                    problems.append(f"{mod} (layer {mine}) imports {imp} (layer {layer_of(imp)})")
                if mine == 4 and layer_of(imp) == 3:  # storage stands on layers 0-2 only (DESIGN.md)
                    problems.append(f"{mod} (storage) imports {imp} (distributed)")
            else:
                top = imp.split(".")[0]
                if top in THIRD_PARTY_FORBIDDEN.get(mine, set()):
                    problems.append(f"{mod} (layer {mine}) imports {imp}")
                if imp.startswith("torch.distributed") and (mine < DIST_FORBIDDEN_BELOW or mine == 4):
                    problems.append(f"{mod} (layer {mine}) imports {imp}")
    assert not problems, "\n".join(problems)


def test_layer_checker_catches_a_violation(tmp_path):
    assert layer_of("kit.stats") == 0 and layer_of("kit.data.chat") == 1 and layer_of("kit.store.objects") == 4
    assert layer_of("kit.session") == 5 and layer_of("kit.distributed.pipeline") == 3
    bad = tmp_path / "m.py"
    bad.write_text("import torch.distributed as dist\nfrom kit.session import Session\n")
    assert list(_imports(bad)) == ["torch.distributed", "kit.session"]
