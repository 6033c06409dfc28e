"""No import cycle: every import of the project's modules (module-level and inside functions) is an edge, and the
graph has no cycle (a cycle is two modules that each need the other to be read; the layout is a stack of layers)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = {".venv", ".git", "outputs", "results", "node_modules"}


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every Python file of the project (a package is its ``__init__``)."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if SKIPPED & set(parts):
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (``from a import b`` names ``a.b`` when that is a
    module, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a.b: the module a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or ``None`` (depth-first search, iterative)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_the_import_graph_has_no_cycle():
    modules = project_modules()
    graph = {name: imported(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 80 and "command_line.pipeline" in graph["run_unsup"]
    assert "trainers.methods" in graph["command_line.pipeline"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (function-level imports count): " + " -> ".join(cycle or [])


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_training_scripts_import_scipy_stats_only_once_they_evaluate():
    """``eval.sts`` imports scipy.stats at its first Spearman (1.1 s of the scripts' 8.4 s of imports on a 2-core
    AMD EPYC): ``--help``, an argument error and a run without evaluation start without it."""
    import subprocess
    import sys

    by_transformers = "import sys; from transformers import AutoModel; print('scipy.stats' in sys.modules)"
    if subprocess.run([sys.executable, "-c", by_transformers], cwd=ROOT, capture_output=True, text=True,
                      check=True).stdout.strip() == "True":  # transformers 5.20: through scikit-learn, at import
        pytest.skip("the installed transformers imports scipy.stats itself (from transformers import AutoModel)")
    probe = "import sys, run_unsup, run_diffcse, eval.sts; print('scipy.stats' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False", result.stdout + result.stderr
