"""llmd's import graph read from the source with `ast`: nothing is imported or run.

Resolution: relative imports are resolved; in `from pkg import name`, `name` is the
submodule `pkg.name` when that file exists, else `pkg`; importing `a.b.c` runs `a` and
`a.b` first. Imports inside a def or lambda are function-level; those under
`if TYPE_CHECKING:` are counted apart and never followed. Used by tests/test_import_rules.py.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    """True when `name` is one of `prefixes` or inside one (llmd.cli is not llmd.client)."""
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


@dataclass(frozen=True)
class Import:
    """One import statement's target, as its module sees it."""

    module: str
    target: str
    """An llmd module (a `from pkg import sub` names the submodule) or an external name."""
    line: int
    level: str
    """"module", "function" (inside a def or lambda) or "type_checking"."""
    function: str | None
    statement: str


class ModuleReader(ast.NodeVisitor):
    """The imports and private-attribute facts of one module."""

    def __init__(self, tree: SourceTree, module: str) -> None:
        self.tree, self.module = tree, module
        self.context: list[str] = []
        self.imports: list[Import] = []
        self.defined: set[str] = set()
        """Private names this file defines: defs, classes, assignments, self/cls attributes."""
        self.llmd_names: set[str] = set()
        """Names bound here to an object imported from another llmd module."""
        self.private_reads: list[tuple[int, str, ast.Attribute]] = []
        self.private_imports: list[tuple[int, str]] = []

    def level(self) -> str:
        if "type_checking" in self.context:
            return "type_checking"
        return "function" if self.context else "module"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._define(node.name)
        for expression in [*node.decorator_list, node.args, node.returns]:
            if expression is not None:
                self.visit(expression)  # run when the def runs, at the enclosing level
        self.context.append(node.name)
        for statement in node.body:
            self.visit(statement)
        self.context.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.context.append("<lambda>")
        self.generic_visit(node)
        self.context.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._define(node.name)
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            self.context.append("type_checking")
            for statement in node.body:
                self.visit(statement)
            self.context.pop()
            for statement in node.orelse:
                self.visit(statement)
        else:
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self._define(node.id)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name)
            if within(alias.name, ("llmd",)):
                self.llmd_names.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.module.split(".")
            if self.module not in self.tree.packages:
                parts = parts[:-1]
            base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
        submodules = [
            f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in self.tree.paths
        ]
        if len(submodules) < len(node.names):
            self._add(node, base)
        for submodule in submodules:
            self._add(node, submodule)
        if within(base, ("llmd",)):
            for alias in node.names:
                self.llmd_names.add(alias.asname or alias.name)
                if is_private(alias.name):
                    self.private_imports.append((node.lineno, f"{base}.{alias.name}"))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        value = node.value
        if (
            isinstance(node.ctx, ast.Store)
            and isinstance(value, ast.Name)
            and value.id in ("self", "cls")
        ):
            self._define(node.attr)
        elif is_private(node.attr) and not is_own(value):
            self.private_reads.append((node.lineno, node.attr, node))
        self.generic_visit(node)

    def _define(self, name: str) -> None:
        if is_private(name):
            self.defined.add(name)

    def _add(self, node: ast.stmt, target: str) -> None:
        function = ".".join(c for c in self.context if c != "type_checking") or None
        self.imports.append(
            Import(self.module, target, node.lineno, self.level(), function, ast.unparse(node))
        )


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def is_own(value: ast.expr) -> bool:
    """`self`, `cls` or `super()`: an object reading its own (or its bases') attributes."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super"


class SourceTree:
    """Every module of the `llmd` package under `root`, parsed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: dict[str, Path] = {}
        for path in sorted((root / "llmd").rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            self.paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        self.packages = {m for m, p in self.paths.items() if p.name == "__init__.py"}
        self._loaded: dict[str, dict[str, tuple[Import, ...]]] = {}
        self.readers: dict[str, ModuleReader] = {}
        self.syntax: dict[str, ast.Module] = {}
        """Each module's parsed source, for rules that read more than imports."""
        for module, path in self.paths.items():
            reader = ModuleReader(self, module)
            self.syntax[module] = ast.parse(path.read_text(encoding="utf-8"), str(path))
            reader.visit(self.syntax[module])
            self.readers[module] = reader

    def where(self, module: str, line: int) -> str:
        return f"{self.paths[module].relative_to(self.root)}:{line}"

    def describe(self, imp: Import) -> str:
        return f"{self.where(imp.module, imp.line)} `{imp.statement}`"

    def modules(self, prefixes: tuple[str, ...]) -> list[str]:
        return [module for module in self.paths if within(module, prefixes)]

    def loaded(self, module: str) -> dict[str, tuple[Import, ...]]:
        """What importing `module` executes (llmd modules, with their packages, and external
        top-level packages), each with the chain of module-level imports that reaches it."""
        if module in self._loaded:
            return self._loaded[module]
        chains: dict[str, tuple[Import, ...]] = {module: ()}
        queue = deque([module])

        def reach(name: str, chain: tuple[Import, ...]) -> None:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
                prefix = ".".join(parts[:i])
                if prefix in self.paths and prefix not in chains:
                    chains[prefix] = chain
                    queue.append(prefix)

        reach(module, ())
        while queue:
            current = queue.popleft()
            for imp in self.readers[current].imports:
                if imp.level != "module":
                    continue
                chain = (*chains[current], imp)
                if within(imp.target, ("llmd",)):
                    reach(imp.target, chain)
                else:
                    chains.setdefault(imp.target.split(".")[0], chain)
        self._loaded[module] = chains
        return chains
