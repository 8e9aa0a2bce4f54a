"""The house rules, checked on the source: a floor never imports one above it, and no module reads another's
private members. A violation names the file and the import."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "verlog"

#: The floors, lowest first: a module imports only from its own floor and the floors before it. The folders
#: are floors by their names; every module at the package root is given one in ROOT_FLOORS. "ground" is the
#: small helpers everything may use (they import no other verlog module), "face" the command line.
ORDER = ("ground", "envs", "config", "models", "sampling", "runkit", "evaluation", "ppo", "report", "face")

#: The floor of each module at the package root (a new one fails the suite until it is given one here).
ROOT_FLOORS = {
    "hints.py": "ground",  # "did you mean": config keys, env ids, suites
    "extras.py": "ground",  # an optional package missing: one line naming its extra
    "pipes.py": "ground",  # a closed stdout pipe ends a command quietly
    "quiet.py": "ground",  # third-party output to the run's log (model loading and samplers use it)
    "__init__.py": "envs",  # `import verlog` registers the envs, and nothing needs torch
    "memory.py": "envs",  # memory wrappers, beside the games
    "vector.py": "envs",  # vector envs (`verlog.make_vec`)
    "replay.py": "envs",  # an env's state as data (seed and actions), replayed on resume
    "workers.py": "envs",  # the async vector env's watched workers
    "tomlconfig.py": "config",
    "config.py": "config",  # read by the learner, the evaluation and the report alike
    "cli.py": "face",
    "__main__.py": "face",
}

#: What each floor may not import besides the floors above it (prefixes of module names).
FORBIDDEN = {
    "ground": ("torch",),
    "envs": ("torch", "transformers"),
    "config": ("torch",),
    "report": ("torch", "verlog.ppo", "verlog.evaluation"),
    # The validation panel is an evaluation the trainer calls: evaluation never imports the learner.
    "evaluation": ("verlog.ppo", "verlog.runkit.checkpoint", "verlog.runkit.logger", "verlog.report"),
    "ppo": ("verlog.report", "verlog.cli", "verlog.agents"),
}

#: The learner holds the algorithm and nothing else.
MAX_PPO_MODULES = 12


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """Every ``(module, names)`` a file imports, at any depth (lazy imports count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _floor(path: Path) -> str:
    """A source file's floor: its folder's, or ROOT_FLOORS' for a module at the package root."""
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else ROOT_FLOORS[rel.name]


def _target_floors(module: str, names: list[str]) -> list[tuple[str, str]]:
    """``(module, floor)`` of what an import reaches in verlog (``from verlog import tomlconfig`` reaches
    ``verlog.tomlconfig``; ``import verlog`` the package itself)."""
    parts = module.split(".")
    if parts[0] != "verlog":
        return []
    if len(parts) == 1:
        found = [f"verlog.{n}" for n in names if (SRC / f"{n}.py").is_file() or (SRC / n).is_dir()]
        return [(m, _target_floors(m, [])[0][1]) for m in found] or [(module, ROOT_FLOORS["__init__.py"])]
    head = parts[1]
    return [(module, head if (SRC / head).is_dir() else ROOT_FLOORS[f"{head}.py"])]


def _upward(path: Path, imports: list[tuple[str, list[str]]]) -> list[str]:
    """The imports of ``path`` that reach a floor above its own."""
    rank = ORDER.index(_floor(path))
    return [
        f"{path.relative_to(SRC)} ({_floor(path)}) imports {target} ({floor})"
        for module, names in imports
        for target, floor in _target_floors(module, names)
        if ORDER.index(floor) > rank
    ]


def _modules(floor: str) -> list[Path]:
    return [path for path in sorted(SRC.rglob("*.py")) if _floor(path) == floor]


def test_every_module_has_a_floor() -> None:
    folders = sorted(p.name for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__")
    roots = sorted(p.name for p in SRC.glob("*.py"))
    assert [f for f in folders if f not in ORDER] == [], "a folder that is no floor"
    assert [r for r in roots if r not in ROOT_FLOORS] == [], "a root module without a floor in ROOT_FLOORS"
    assert set(ROOT_FLOORS.values()) <= set(ORDER)


@pytest.mark.parametrize("floor", sorted(FORBIDDEN))
def test_a_floor_never_imports_one_above_it(floor: str) -> None:
    bad = [
        f"{path.relative_to(SRC)} imports {module}"
        for path in _modules(floor)
        for module, _ in _imports(path)
        if module.startswith(FORBIDDEN[floor])
    ]
    assert not bad, "\n".join(bad)


def test_the_learner_is_at_most_a_dozen_modules() -> None:
    modules = sorted(p.stem for p in (SRC / "ppo").rglob("*.py") if p.name != "__init__.py")
    assert len(modules) <= MAX_PPO_MODULES, modules


def test_no_floor_imports_a_floor_above_it() -> None:
    """Every import counts here, lazy ones too: a floor leans only on the floors below it, so no two floors
    lean on each other (no circle between floors, whatever the order a process loads them in)."""
    bad = [line for path in sorted(SRC.rglob("*.py")) for line in _upward(path, _imports(path))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("where", "module", "names"),
    [
        ("memory.py", "verlog.ppo.trainer", []),
        ("vector.py", "verlog", ["config"]),
        ("quiet.py", "verlog.envs", []),
        ("runkit/watchdog.py", "verlog.evaluation.panel", []),
    ],
)
def test_an_upward_import_is_caught(where: str, module: str, names: list[str]) -> None:
    assert _upward(SRC / where, [(module, names)])


def test_no_module_imports_another_modules_private_names() -> None:
    bad = [
        f"{path.relative_to(SRC)} imports {name} from {module}"
        for path in sorted(SRC.rglob("*.py"))
        for module, names in _imports(path)
        if module.startswith("verlog")
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not bad, "\n".join(bad)


def _module_aliases(tree: ast.AST) -> dict[str, str]:
    """Names a file binds to verlog modules (``from verlog.report import plots as plotting``)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("verlog"):
            folder = SRC.parent.joinpath(*node.module.split("."))
            for alias in node.names:
                if (folder / f"{alias.name}.py").is_file() or (folder / alias.name).is_dir():
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("verlog")})
    return aliases


def test_no_module_reads_another_modules_private_attributes() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        aliases = _module_aliases(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append(
                    f"{path.relative_to(SRC)}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}"
                )
    assert not bad, "\n".join(bad)


def test_no_module_is_over_500_lines() -> None:
    long = [
        f"{p.relative_to(SRC)}: {n}"
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    ]
    assert not long, long


def test_the_env_floor_and_the_report_load_without_torch() -> None:
    code = (
        "import sys, verlog, verlog.envs, verlog.report, verlog.runkit.folder; print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_circle_between_modules() -> None:
    """Module-level imports only (an import inside a function runs later and cannot deadlock a load)."""
    graph: dict[str, set[str]] = {}
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for node in tree.body:  # top level only
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            edges |= {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
        graph[name] = edges
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                pytest.fail("import circle: " + " -> ".join([*trail[trail.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_run_folders_file_names_are_spelled_only_where_the_folder_is_described() -> None:
    """``metrics.jsonl``, ``config.toml``, ... as string values live in ``runkit/folder.py``; everyone else
    (the learner, evaluation, report, entry points, benchmarks) names them through it. Docstrings may mention them."""
    names = {"config.toml", "metrics.jsonl", "samples.jsonl"}
    root = SRC.parents[1]
    files = [*SRC.rglob("*.py"), *(root / "agents").glob("*.py"), *(root / "benchmarks").rglob("*.py")]
    bad = []
    for path in sorted(files):
        if path == SRC / "runkit" / "folder.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        bad += [
            f"{path.relative_to(root)}:{node.lineno} spells {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
        ]
        bad += [  # run / "checkpoints" (the word alone is also a table label)
            f"{path.relative_to(root)}:{node.lineno} joins 'checkpoints'"
            for node in ast.walk(tree)
            if isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant)
            and node.right.value == "checkpoints"
        ]
    assert not bad, "\n".join(bad)


#: The kinds of benchmark, each a package under benchmarks/ (issue 44.4).
BENCHMARK_KINDS = ("speed", "probes", "demos")


def test_benchmarks_are_grouped_by_kind_and_import_each_other_only_as_the_package() -> None:
    """Every script sits in a kind's folder; what several need is in ``benchmarks/common.py``; a script reaches
    another as ``benchmarks.<kind>.<name>``, never through ``sys.path`` or as a bare sibling module."""
    bench = SRC.parents[1] / "benchmarks"
    loose = sorted(p.name for p in bench.glob("*.py") if p.name not in ("__init__.py", "common.py"))
    assert not loose, f"benchmark scripts outside {BENCHMARK_KINDS}: {loose}"
    stems = {p.stem for p in bench.rglob("*.py")} - {"__init__"}
    bad = []
    for path in sorted(bench.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(bench.parent)
        bad += [
            f"{where}:{node.lineno} changes sys.path"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ]
        bad += [
            f"{where} imports {module} as a sibling"
            for module, _ in _imports(path)
            if module.split(".")[0] in stems
        ]
        if path.parent != bench and path.parent.name not in BENCHMARK_KINDS:
            bad.append(f"{where} is in benchmarks/{path.parent.name}/, not a kind's folder")
    assert not bad, "\n".join(bad)


#: A function longer than this says why in its docstring (issue 44.3).
MAX_FUNCTION_LINES = 80
#: How a docstring says why its function is long: "... on purpose", "Its length is ...", "some 110 lines".
_LENGTH_REASON = re.compile(r"on purpose|its length|\d+ lines", re.IGNORECASE)


def test_a_function_over_80_lines_says_why_in_its_docstring() -> None:
    root = SRC.parents[1]
    files = [*SRC.rglob("*.py"), *(root / "agents").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
    bad = [
        f"{path.relative_to(root)}:{node.lineno} {node.name} has {node.end_lineno - node.lineno + 1} lines"
        for path in sorted(files)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
        and not _LENGTH_REASON.search(ast.get_docstring(node) or "")
    ]
    assert not bad, "\n".join(bad)
