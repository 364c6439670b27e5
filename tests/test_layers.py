"""A module imports only from its own layer or below (DESIGN.md, "Layers of kit/")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

KIT = Path(__file__).resolve().parents[1] / "kit"

LAYER0 = {"kit.digest", "kit.inventory", "kit.paths", "kit.model.config", "kit.stats", "kit.planner", "kit.flops",
          "kit.contract", "kit.provenance", "kit.environ", "kit.sizes", "kit.publish", "kit.interrupt",
          "kit.replicate_stats", "kit.replicate_simulation", "kit.record"}


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


# The package's public facade: kit/__init__.py resolves kit.api's names on first use (module
# __getattr__), so `import kit` stays layer 0 and light. That one lazy edge is not a dependency of the
# package's own modules (tests/test_api.py checks that no kit module takes an API name from `kit`).
FACADE_EDGE = ("kit", "kit.api")

ENTRY_RE = re.compile(r"^(kit(?:\.\w+)+):\w+$")  # a launcher entry named as a string, "kit.x.y:function"


def _package_of(path: Path) -> str:
    mod = _module_name(path)
    return mod if path.name == "__init__.py" else mod.rpartition(".")[0]


def _imports(path: Path):
    """Every module `path` imports, wherever the import is (module level or inside a function: ast.walk
    visits both), including relative imports, `importlib.import_module("kit....")` and launcher
    entries named as strings ("kit.x:function"), which are imports the interpreter makes later."""
    for _line, name in _imports_with_lines(path):
        yield name


def _imports_with_lines(path: Path):
    """(line, module) for each import `_imports` sees."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0 and path.is_relative_to(KIT):
            base = _package_of(path).split(".")
            base = base[:len(base) - (node.level - 1)]
            yield node.lineno, ".".join(base + ([node.module] if node.module else []))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield node.lineno, node.args[0].value
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENTRY_RE.match(node.value):
            yield node.lineno, ENTRY_RE.match(node.value).group(1)
        if isinstance(node, ast.ImportFrom) and node.module == "torch" and node.level == 0:
            for a in node.names:  # `from torch import distributed`
                if a.name == "distributed":
                    yield node.lineno, "torch.distributed"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch" \
                and node.attr == "distributed":  # `torch.distributed.x` through `import torch`
            yield node.lineno, "torch.distributed"
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


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
            if (mod, imp) == FACADE_EDGE:
                continue
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
    assert layer_of("kit.engine.session") == 5 and layer_of("kit.distributed.pipeline") == 3
    assert layer_of("kit.model.config") == 0
    bad = tmp_path / "m.py"
    bad.write_text("import torch.distributed as dist\nfrom kit.session import Session\n")
    assert list(_imports(bad)) == ["torch.distributed", "kit.session"]


def test_layer_checker_sees_imports_inside_functions_and_launcher_entries(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from kit.engine.session import Session\n    import importlib\n"
                   "    importlib.import_module('kit.study.arms')\n"
                   "    return launch('kit.adaptive.train:adaptive_worker', {}, 1, '.')\n")
    assert set(_imports(bad)) == {"kit.engine.session", "importlib", "kit.study.arms", "kit.adaptive.train"}


def test_kit_passes_worker_functions_to_the_launcher_not_names():
    """A driver passes the function itself (`launch(adaptive_worker, ...)`): an import this test sees."""
    named = []
    for path in sorted(KIT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENTRY_RE.match(node.value):
                named.append(f"{_module_name(path)}: {node.value!r}")
    assert not named, "\n".join(named)


# -- import cycles ---------------------------------------------------------------------------------------


def _kit_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(KIT.rglob("*.py"))}


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the kit modules it imports (anywhere in the file); `from kit.a import b` is an edge to
    kit.a.b when b is a module, else to kit.a. Importing kit.a.b.c runs kit/a/__init__.py and
    kit/a/b/__init__.py first, so it is an edge to those packages too, except to a package the importing
    module is itself inside (Python ran that __init__ before the importer; a package's __init__ may import
    its own submodules)."""
    return {mod: {target for _line, target in _kit_edges(mod, path, modules)} for mod, path in modules.items()}


def _kit_edges(mod: str, path: Path, modules: dict[str, Path]):
    """(line, kit module) for each import of a kit module in `path`, resolved as `_import_graph` says."""
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges, from_lists = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kit"):
            # `from kit.a import b, c` is an edge to each of kit.a.b, kit.a.c that is a module and to kit.a
            # only for a name it defines (kit.a runs first either way: the implicit parent import)
            from_lists.add((node.lineno, node.module))
            for a in node.names:
                full = f"{node.module}.{a.name}"
                edges.add((node.lineno, full if full in modules else resolve(node.module)))
    edges.update((line, resolve(i)) for line, i in _imports_with_lines(path)
                 if i.startswith("kit") and (line, i) not in from_lists)
    edges.update((line, parent) for line, target in list(edges) if target
                 for parent in _packages_run_by_importing(target, mod, modules))
    for line, target in sorted(edges, key=lambda e: (e[0], e[1] or "")):
        if target is None or target == mod or (mod, target) == FACADE_EDGE:
            continue
        yield line, target


def _packages_run_by_importing(target: str, importer: str, modules: dict[str, Path]) -> list[str]:
    """The packages whose __init__ an import of `target` runs first (kit.a, kit.a.b for kit.a.b.c), less
    those `importer` is inside: they were imported before it."""
    parts, mine = target.split("."), importer.split(".")
    return [parent for n in range(1, len(parts)) if (parent := ".".join(parts[:n])) in modules
            and parts[:n] != mine[:n]]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles_among_kit_modules():
    cycles = _cycles(_import_graph(_kit_modules()))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_checker_catches_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_cycle_checker_sees_a_cycle_through_a_package_init(tmp_path):
    """kit.r imports kit.p.fmt, which runs kit/p/__init__.py, which imports kit.p.page, which imports kit.r:
    a cycle no module imports whole. The package's own submodules importing each other are none."""
    files = {"kit.p": "from kit.p.page import render\n", "kit.p.page": "from kit.p import fmt\nfrom kit.r import w\n",
             "kit.p.fmt": "", "kit.r": "from kit.p.fmt import f\n", "kit.q": "from kit.p.fmt import f\n"}
    modules = {}
    for name, text in files.items():
        modules[name] = tmp_path / f"{name}.py"
        modules[name].write_text(text)
    graph = _import_graph(modules)
    assert graph["kit.r"] == {"kit.p", "kit.p.fmt"} and graph["kit.p.page"] == {"kit.p.fmt", "kit.r"}
    assert _cycles(graph) == [["kit.p", "kit.p.page", "kit.r"]]
    assert _packages_run_by_importing("kit.a.b.c", "kit.z", {"kit", "kit.a", "kit.a.b"}) == ["kit.a", "kit.a.b"]
    assert _packages_run_by_importing("kit.a.b.c", "kit.a.d", {"kit", "kit.a", "kit.a.b"}) == ["kit.a.b"]


# -- the order inside layer 5, package by package ---------------------------------------------------------

# Layer 5's packages (a subpackage of kit/, or a module directly in kit/), lowest first. A package imports
# only packages of its own tier or below, and no two packages import each other, however indirectly (a
# cycle between packages that no module-level cycle shows: kit.adaptive.cli -> kit.cli.args while
# kit.cli.drivers -> kit.adaptive.cli was one). The command line is on top, alone: every subcommand's
# parser and handler is in kit/cli/, and kit.args (its checked arguments) is imported by nothing else,
# so no experiment or composition knows the command line. docs/design.md, "Layers of kit/", draws the
# same order.
PACKAGE_TIERS = (
    ("engine", {"kit.engine", "kit.refs", "kit.replicate_order"}),
    ("evaluation", {"kit.evaluation", "kit.seed"}),
    ("evidence", {"kit.evidence", "kit.status"}),
    ("experiments", {"kit.adaptive", "kit.study"}),
    ("compositions", {"kit.demo", "kit.replicates", "kit.replicate_campaign"}),
    ("public API", {"kit.api"}),
    ("command line", {"kit.cli", "kit.args", "kit.__main__"}),
)


def package_of(module: str) -> str:
    """kit.adaptive.cli -> kit.adaptive, kit.evidence.report.runs -> kit.evidence, kit.api -> kit.api."""
    return ".".join(module.split(".")[:2])


def tier_of(package: str) -> int:
    return next(i for i, (_name, packages) in enumerate(PACKAGE_TIERS) if package in packages)


def _package_edges(modules: dict[str, Path]):
    """(importing module, its file:line, imported module) for each import between two layer-5 packages."""
    for mod, path in modules.items():
        if layer_of(mod) != 5:
            continue
        for line, target in _kit_edges(mod, path, modules):
            if layer_of(target) == 5 and package_of(target) != package_of(mod):
                yield mod, f"{path.relative_to(KIT.parent) if path.is_relative_to(KIT.parent) else path}:{line}", target


def _package_problems(modules: dict[str, Path]) -> list[str]:
    problems, graph, where = [], {}, {}
    for mod in modules:
        if layer_of(mod) == 5:
            graph.setdefault(package_of(mod), set())
    placed = {pkg for _name, packages in PACKAGE_TIERS for pkg in packages}
    problems += [f"{pkg} is in layer 5 but not in PACKAGE_TIERS (tests/test_layers.py): give it a tier"
                 for pkg in sorted(set(graph) - placed)]
    for mod, at, target in _package_edges(modules):
        a, b = package_of(mod), package_of(target)
        graph[a].add(b)
        where.setdefault((a, b), []).append(f"{at} ({mod} imports {target})")
        if {a, b} <= placed and tier_of(b) > tier_of(a):
            problems.append(f"{at}: {mod} (tier {PACKAGE_TIERS[tier_of(a)][0]}) imports {target} "
                            f"(tier {PACKAGE_TIERS[tier_of(b)][0]}, above it)")
    for cycle in _cycles(graph):
        # one import per pair of packages names the place (the first by file and line), with how many more
        edges = [f"{a} -> {b} at {where[(a, b)][0]}" + (f" and {len(where[(a, b)]) - 1} more" if len(where[(a, b)]) > 1
                                                        else "") for a in cycle for b in cycle if (a, b) in where]
        problems.append("package cycle " + " <-> ".join(cycle) + ": " + "; ".join(edges))
    return problems


def test_layer5_packages_import_only_their_tier_or_below_and_form_no_cycle():
    problems = _package_problems(_kit_modules())
    assert not problems, "\n".join(problems)


def test_package_checker_catches_an_upward_import_a_package_cycle_and_an_unplaced_package(tmp_path):
    files = {"kit.study.cli": "def f():\n    from kit.cli import build_parser\n",  # an experiment imports the CLI
             "kit.cli": "import kit.study.cli\n",
             "kit.evidence.ledger": "", "kit.adaptive.prepare": "from kit.evidence import ledger\n",
             "kit.newpkg": "from kit.adaptive import prepare\n"}
    modules = {}
    for name, text in files.items():
        modules[name] = tmp_path / f"{name}.py"
        modules[name].write_text(text)
    problems = _package_problems(modules)
    assert problems == [
        "kit.newpkg is in layer 5 but not in PACKAGE_TIERS (tests/test_layers.py): give it a tier",
        f"{tmp_path}/kit.study.cli.py:2: kit.study.cli (tier experiments) imports kit.cli (tier command line, above it)",
        (f"package cycle kit.cli <-> kit.study: kit.cli -> kit.study at {tmp_path}/kit.cli.py:1 (kit.cli imports "
         f"kit.study.cli); kit.study -> kit.cli at {tmp_path}/kit.study.cli.py:2 (kit.study.cli imports kit.cli)")]
    assert package_of("kit.evidence.report.runs") == "kit.evidence" and package_of("kit.api") == "kit.api"
    assert tier_of("kit.adaptive") > tier_of("kit.evidence") and tier_of("kit.cli") > tier_of("kit.study")
    assert tier_of("kit.args") == tier_of("kit.cli") > tier_of("kit.api") > tier_of("kit.demo")


def test_the_engine_is_constructed_in_one_function():
    """StageEngine and ParamAdamW are called only by kit.engine.worker.build_worker (kit, bench, campaigns,
    tests)."""
    calls = []
    root = KIT.parent
    scripts = [p for d in ("bench", "campaigns", "tests") for p in (root / d).rglob("*.py")]
    for path in sorted([*KIT.rglob("*.py"), *scripts]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("StageEngine", "ParamAdamW"):
                calls.append(f"{path.relative_to(root)}:{node.lineno} {node.func.id}")
    assert calls and all(c.startswith("kit/engine/worker.py:") for c in calls), calls


def test_benchmarks_import_the_kit_and_nothing_of_each_other():
    """bench/ holds benchmarks only: each is a script standing on `kit` alone (no other bench/ module, no
    campaign, no sys.path edits); what two of them share lives in kit/."""
    root = KIT.parent
    problems = []
    for path in sorted((root / "bench").rglob("*.py")):
        source = path.read_text()
        if "sys.path" in source:
            problems.append(f"{path.relative_to(root)}: edits sys.path")
        for imp in _imports(path):
            top = imp.split(".")[0]
            if top in ("bench", "campaigns", "tests") or (root / "bench" / f"{top}.py").exists():
                problems.append(f"{path.relative_to(root)}: imports {imp}")
    assert not problems, "\n".join(problems)


# -- storage is handed what the engine decided -----------------------------------------------------------


def _group_methods() -> set[str]:
    """The process group's methods (kit/distributed/group.py, class Group): each is a collective or a
    point-to-point message; properties (`world`, `distributed`) are not calls."""
    tree = ast.parse((KIT / "distributed" / "group.py").read_text())
    group = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Group")
    return {f.name for f in group.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")
            and not any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)}


def _storage_problems(path: Path, methods: set[str]) -> list[str]:
    """Where `path` calls a group method (`x.allgather_bytes(...)`) or names a session (a variable,
    argument or attribute `session`): a layer-4 module does neither, even duck-typed."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods:
            found.append(f"{path.name}:{node.lineno} calls .{node.func.attr}()")
        name = getattr(node, "id", None) or getattr(node, "arg", None) or getattr(node, "attr", None)
        if isinstance(node, (ast.Name, ast.arg, ast.Attribute)) and name == "session":
            found.append(f"{path.name}:{node.lineno} names a session")
    return found


def test_storage_runs_no_collective_and_takes_no_session():
    """The commit protocol (all-gathers, agreeing on the root, moving the session's parent) is the
    engine's (kit/engine/commit.py); kit/store writes objects and commit records it is handed. An import
    of the engine from kit/store already fails test_layering (layer 5 above layer 4); this catches the
    duck-typed way round it, a session or group passed in as an argument."""
    methods = _group_methods()
    assert {"allgather_bytes", "isend", "recv", "barrier"} <= methods
    assert layer_of("kit.engine.commit") > layer_of("kit.store.async_commit")
    problems = [p for path in sorted((KIT / "store").rglob("*.py")) for p in _storage_problems(path, methods)]
    assert not problems, "\n".join(problems)


def test_storage_check_catches_a_session_passed_in(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def poll(session):\n    return session.group.allgather_bytes(b'1')\n")
    found = _storage_problems(bad, _group_methods())
    assert "m.py:2 calls .allgather_bytes()" in found and "m.py:1 names a session" in found
