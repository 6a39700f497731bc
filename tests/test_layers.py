"""The layers import one way: library <- runs wing <- applications (study, decode) <- commands/CLI.

Every import statement of the package is read from the source (module level and inside functions):
the library (trees, plots, verifiers, plan, api, backends, ...) never imports the runs wing or an
application, the wing never imports an application, and study and decode do not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mdsd_ot

ROOT = Path(mdsd_ot.__file__).parent
APPS = ("study", "decode")
TOP = ("commands", "cli", "__main__")


def _layer(parts: tuple) -> str:
    head = parts[0] if parts else ""
    if head in TOP:
        return "commands"
    if head in APPS:
        return head
    if head == "runs":
        return "runs"
    return "library"


def _imports(path: Path):
    """(module parts of this file, [imported mdsd_ot module parts]) of one source file."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = tuple(rel.parts)
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                mod = tuple(node.module.split(".")) if node.module else ()
                targets = [base + mod] if node.module else [base + (a.name,) for a in node.names]
            elif node.module and node.module.split(".")[0] == "mdsd_ot":
                targets = [tuple(node.module.split(".")[1:])]
            else:
                continue
            out.extend(targets)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "mdsd_ot":
                    out.append(tuple(a.name.split(".")[1:]))
    return parts, out


ALLOWED = {
    "library": {"library"},
    "runs": {"library", "runs"},
    "study": {"library", "runs", "study"},
    "decode": {"library", "runs", "decode"},
    "commands": {"library", "runs", "study", "decode", "commands"},
}


def test_nothing_imports_upward():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        parts, targets = _imports(path)
        here = _layer(parts)
        for t in targets:
            there = _layer(t)
            if there not in ALLOWED[here]:
                bad.append(f"{'/'.join(parts)} ({here}) imports mdsd_ot.{'.'.join(t)} ({there})")
    assert not bad, "\n".join(bad)


def test_the_wing_has_no_cycles():
    """Inside the runs wing the modules form a DAG (inputs <- identity, shards <- runner; statistics)."""
    graph = {}
    for path in sorted((ROOT / "runs").glob("*.py")):
        parts, targets = _imports(path)
        graph[parts] = {t[:2] for t in targets if t[:1] == ("runs",) and len(t) > 1 and t[:2] != parts}
    seen, stack = set(), set()

    def visit(node):
        assert node not in stack, f"import cycle through {node}"
        if node in seen:
            return
        stack.add(node)
        for nxt in graph.get(node, ()):
            visit(nxt)
        stack.discard(node)
        seen.add(node)

    for node in graph:
        visit(node)


def test_one_default_verifier_list_derived_from_the_registry():
    from mdsd_ot import VERIFIERS, plan, study
    from mdsd_ot.cli import build_parser
    from mdsd_ot.plots import VERIFIER_STYLES
    from mdsd_ot.verifiers import DEFAULT_VERIFIERS

    assert list(DEFAULT_VERIFIERS) == [v for v in VERIFIERS if v != "optimal"]  # registry order
    assert plan.DEFAULT_VERIFIERS == DEFAULT_VERIFIERS
    assert sorted(study.DEFAULT_VERIFIERS) == sorted(DEFAULT_VERIFIERS)
    assert study.StudyConfig().validate().verifiers == sorted(DEFAULT_VERIFIERS)
    parser = build_parser()
    base = ["--target", "t", "--draft", "d"]
    assert parser.parse_args(["study", *base]).verifiers.split(",") == list(study.DEFAULT_VERIFIERS)
    assert set(parser.parse_args(["demo"]).verifiers.split(",")) == set(VERIFIERS)
    assert set(VERIFIER_STYLES) == set(VERIFIERS)  # every verifier has its style in every figure
