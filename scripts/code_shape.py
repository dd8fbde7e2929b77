"""The shape of the code: modules, sizes, long functions, import cycles, who imports Ray.

    python scripts/code_shape.py            # figures for sweeps/, tasks/, analysis/
    python scripts/code_shape.py --list     # also name every module over the limits

Reads the sources with ``ast`` (nothing is imported), so it runs on any checkout. The
structure tests (``tests/test_structure.py``) check the same rules with these functions:

- no module over ``MAX_MODULE_LINES`` lines, no function over ``MAX_FUNCTION_LINES`` lines
  or with more than ``MAX_POSITIONAL`` positional parameters;
- no import cycle between modules (imports inside functions count too);
- ``ray`` imported only under ``sweeps/cluster/`` (and by scripts and tests);
- ``tasks`` imports nothing of ``sweeps`` or ``analysis``; ``analysis`` is imported by the
  driver only from ``sweeps/cli/``;
- the folders of ``tasks/model/`` read in one direction (``MODEL_FOLDERS``: each imports only
  the folders it lists).

It also gives the shape of the cost model (``model_shape``): its modules, the import links
among them, its functions over ``MODEL_FUNCTION_LINES`` lines, and what a reader opens to
follow one step's time from its entry (``STEP_ENTRIES``): the modules of the entry's folder
it reaches, and each other folder it reaches once (read through its public face, the
folder's ``__init__``). ``--root`` reads another checkout.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sweeps", "tasks", "analysis", "harness")
#: The product's packages; ``harness`` is test support, which none of them imports.
PRODUCT = ("sweeps", "tasks", "analysis")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_POSITIONAL = 8
#: The folders of ``tasks/model/``, each with the folders it may import (itself included).
MODEL_FOLDERS: Dict[str, Tuple[str, ...]] = {
    "terms": ("terms",),
    "kernels": ("terms", "kernels"),
    "collectives": ("terms", "kernels", "collectives"),
    "step": ("terms", "kernels", "collectives", "step"),
    "search": ("terms", "kernels", "collectives", "step", "search"),
    "projection": ("terms", "kernels", "collectives", "projection"),
    "limits": ("terms", "kernels", "collectives", "step", "search", "limits"),
    "codesign": ("terms", "kernels", "collectives", "step", "search", "codesign"),
}
#: Where a step's time is computed, newest layout first (a checkout's first that exists).
STEP_ENTRIES = ("tasks.model.step.plan", "tasks.model.step")
#: A long function, for the cost model's figures.
MODEL_FUNCTION_LINES = 40


@dataclass
class Module:
    """One source module: its dotted name, path, line count, and what it imports."""

    name: str
    path: Path
    lines: int
    imports: Set[str] = field(default_factory=set)  # dotted names, as written (resolved if relative)
    functions: List[Tuple[str, int, int]] = field(default_factory=list)  # (qualified name, lines, positional)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.AST, name: str, is_package: bool) -> Iterator[str]:
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _functions(tree: ast.AST) -> Iterator[Tuple[str, int, int]]:
    def visit(node: ast.AST, prefix: str) -> Iterator[Tuple[str, int, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                positional = len(args.posonlyargs) + len(args.args)
                if positional and args.args and args.args[0].arg in ("self", "cls"):
                    positional -= 1
                qualified = f"{prefix}{child.name}"
                yield qualified, child.end_lineno - child.lineno + 1, positional
                yield from visit(child, qualified + ".")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
    yield from visit(tree, "")


def scan(root: Path = ROOT, packages: Tuple[str, ...] = PACKAGES) -> Dict[str, Module]:
    """Every module of ``packages`` under ``root``, parsed."""
    modules: Dict[str, Module] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text, filename=str(path))
            name = module_name(path, root)
            module = Module(name, path, len(text.splitlines()))
            module.imports = set(_imports(tree, name, path.name == "__init__.py"))
            module.functions = list(_functions(tree))
            modules[name] = module
    return modules


def internal_edges(modules: Dict[str, Module]) -> Dict[str, Set[str]]:
    """Module -> the modules of ours it imports (an imported name resolves to the longest
    known module that prefixes it)."""
    edges: Dict[str, Set[str]] = {}
    for name, module in modules.items():
        targets = set()
        for imported in module.imports:
            parts = imported.split(".")
            for cut in range(len(parts), 0, -1):
                candidate = ".".join(parts[:cut])
                if candidate in modules:
                    if candidate != name:
                        targets.add(candidate)
                    break
        edges[name] = targets
    return edges


def cycles(modules: Dict[str, Module]) -> List[List[str]]:
    """Strongly connected groups of more than one module, or a module importing itself
    through others (Tarjan's algorithm)."""
    edges = internal_edges(modules)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def rule_breaks(modules: Dict[str, Module]) -> List[str]:
    """The import rules of the layout, each break as a line: ``tasks`` imports nothing of
    ``sweeps`` or ``analysis``; ``analysis`` imports nothing of ``sweeps`` but ``sweeps.lake``
    (and what it re-exports); the driver imports ``analysis`` only from ``sweeps.cli``;
    ``ray`` is imported only under ``sweeps.cluster`` (and by the test support, ``harness``);
    no module of the product (``PRODUCT``) imports ``harness``."""
    edges = internal_edges(modules)
    breaks = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            if _within(name, "tasks") and not _within(target, "tasks"):
                breaks.append(f"{name} imports {target} (tasks imports nothing of sweeps or analysis)")
            elif _within(name, "analysis") and _within(target, "sweeps") and not _within(target, "sweeps.lake"):
                breaks.append(f"{name} imports {target} (analysis reads the lake through sweeps.lake only)")
            elif _within(name, "sweeps") and _within(target, "analysis") and not _within(name, "sweeps.cli"):
                breaks.append(f"{name} imports {target} (only sweeps.cli imports analysis)")
            elif any(_within(name, p) for p in PRODUCT) and _within(target, "harness"):
                breaks.append(f"{name} imports {target} (the product imports nothing of the test support)")
    breaks += _model_folder_breaks(edges)
    for name in importers_of(modules, "ray"):
        if not (_within(name, "sweeps.cluster") or _within(name, "harness")):
            breaks.append(f"{name} imports ray (only sweeps.cluster does, and the test support)")
    return breaks


def model_folder(name: str) -> str:
    """The ``tasks/model/`` folder of module ``name`` ("" outside one)."""
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["tasks", "model"] else ""


def _model_folder_breaks(edges: Dict[str, Set[str]]) -> List[str]:
    breaks = []
    for name, targets in sorted(edges.items()):
        folder = model_folder(name)
        if folder not in MODEL_FOLDERS:
            continue
        for target in sorted(targets):
            other = model_folder(target)
            if other and other not in MODEL_FOLDERS[folder]:
                breaks.append(f"{name} imports {target} (tasks.model.{folder} imports only "
                              f"{', '.join(MODEL_FOLDERS[folder])})")
    return breaks


def model_shape(modules: Dict[str, Module]) -> Dict[str, object]:
    """The cost model's figures (module docstring): ``modules``, ``links``, ``long_functions``,
    ``step_path`` (what following a step's time reads) and its ``step_path_modules``."""
    edges = internal_edges(modules)
    inside = {n for n in modules if n.startswith("tasks.model.") and not modules[n].path.name == "__init__.py"}
    links = sum(len([t for t in edges[n] if t in inside]) for n in inside)
    long = [(n, f) for n in inside for f, lines, _ in modules[n].functions if lines > MODEL_FUNCTION_LINES]
    entry = next((e for e in STEP_ENTRIES if e in inside), None)
    seen, todo = set(), [entry] if entry else []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if model_folder(name) == model_folder(entry) or not model_folder(name):
            todo += [t for t in edges[name] if t in inside]
    read = sorted({n if (model_folder(n) == model_folder(entry) or not model_folder(n))
                   else f"tasks.model.{model_folder(n)}" for n in seen})
    return {"modules": len(inside), "links": links, "long_functions": len(long), "step_path": read,
            "step_path_modules": len(read), "step_path_lines": sum(modules[n].lines for n in seen)}


def importers_of(modules: Dict[str, Module], top: str) -> List[str]:
    """Modules that import the package ``top`` (e.g. "ray") or one of its submodules."""
    return sorted(n for n, m in modules.items() if any(i == top or i.startswith(top + ".") for i in m.imports))


def long_functions(modules: Dict[str, Module]) -> List[Tuple[str, str, int]]:
    return [(n, f, lines) for n, m in modules.items() for f, lines, _ in m.functions if lines > MAX_FUNCTION_LINES]


def wide_functions(modules: Dict[str, Module]) -> List[Tuple[str, str, int]]:
    return [(n, f, pos) for n, m in modules.items() for f, _, pos in m.functions if pos > MAX_POSITIONAL]


def long_modules(modules: Dict[str, Module]) -> List[Tuple[str, int]]:
    return sorted(((n, m.lines) for n, m in modules.items() if m.lines > MAX_MODULE_LINES), key=lambda x: -x[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="name every module and function over the limits")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    args = parser.parse_args()
    modules = scan(args.root)
    largest = max(modules.values(), key=lambda m: m.lines)
    functions = sum(len(m.functions) for m in modules.values())
    per_package = ", ".join(f"{p} {sum(1 for n in modules if n.split('.')[0] == p)}" for p in PACKAGES)
    print(f"modules: {len(modules)} ({per_package}); {sum(m.lines for m in modules.values()):,} lines")
    print(f"largest module: {largest.name} ({largest.lines} lines); modules over {MAX_MODULE_LINES} lines: "
          f"{len(long_modules(modules))}")
    print(f"functions: {functions}; over {MAX_FUNCTION_LINES} lines: {len(long_functions(modules))}; "
          f"over {MAX_POSITIONAL} positional parameters: {len(wide_functions(modules))}")
    found = cycles(modules)
    breaks = rule_breaks(modules)
    print(f"import cycles between modules: {len(found)}; breaks of the import rules: {len(breaks)}")
    print(f"modules importing ray: {len(importers_of(modules, 'ray'))} ({', '.join(importers_of(modules, 'ray'))})")
    model = model_shape(modules)
    print(f"tasks/model: {model['modules']} modules, {model['links']} import links among them, "
          f"{model['long_functions']} functions over {MODEL_FUNCTION_LINES} lines; following a step's time reads "
          f"{model['step_path_modules']} ({', '.join(model['step_path'])}; {model['step_path_lines']:,} lines "
          "in the modules it reaches)")
    if args.list:
        for name, lines in long_modules(modules):
            print(f"  module {name}: {lines} lines")
        for name, function, lines in long_functions(modules):
            print(f"  function {name}.{function}: {lines} lines")
        for name, function, positional in wide_functions(modules):
            print(f"  function {name}.{function}: {positional} positional parameters")
        for group in found:
            print(f"  cycle: {' <-> '.join(group)}")
        for line in breaks:
            print(f"  {line}")


if __name__ == "__main__":
    main()
