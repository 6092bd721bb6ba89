"""The layer rules of llmd's import graph, read from the source with `ast` (nothing is imported).

They keep docs/ARCHITECTURE.md's map true: (a) the control plane loads no heavy library at
import time; (b) the client, protocol and TUI import nothing of the engine side; (c) the TUI
imports no CLI command code; (d) the daemon imports no CLI; (e) no llmd modules import each
other in a cycle, lazy imports included; (f) no module uses another module's private names;
(g) the daemon and the warm-up read no scheduler, block manager or runner (only the
engine's `facts()`, `snapshot()` and request API); (h) the runner reads plans as data: it
imports no engine `Request`, scheduler or block manager itself and reads no `.request`
handle. b-d hold at
any level (a lazy import counts) and through whatever the imported module loads. Every rule
also runs on a small synthetic package with known violations, so a rule that stops
detecting anything fails as well. There is no list of project exceptions: a violation is
fixed in the code.
"""

from __future__ import annotations

import ast

import pytest

from tests.import_graph import REPO_ROOT, SourceTree, within

CONTROL_PLANE = ("llmd.daemon", "llmd.http", "llmd.client", "llmd.protocol", "llmd.tui",
                 "llmd.commands", "llmd.cli", "llmd.cli_options")  # fmt: skip
HEAVY = ("torch", "triton", "numpy", "transformers")
WIRE_ONLY = ("llmd.client", "llmd.protocol", "llmd.tui")
ENGINE_SIDE = ("torch", "llmd.daemon", "llmd.engine", "llmd.runner", "llmd.llm_engine")
CLI = ("llmd.cli", "llmd.cli_options")
ENGINE_INTERNALS = ("scheduler", "block_manager", "runner")
"""The engine's parts that only llm_engine.py (and the engine package) may reach into."""
ENGINE_STATE = ("llmd.engine.request", "llmd.engine.scheduler", "llmd.engine.block_manager")
"""Live engine objects; the runner sees only `SchedulerOutput`'s data (rule h)."""

OTHER_LIBRARIES_PRIVATE_API = {
    "torch.ops.": "PyTorch's internal ops (mkldnn's prepacked linear) are named `_op`, and "
    "torch.ops is the only way to call them; layers/packed_linear.py feature-checks them",
}
"""Underscored names of other libraries that llmd calls on purpose, by prefix, with why."""


def heavy_loads(tree: SourceTree) -> list[str]:
    """Rule a: control-plane modules whose import loads torch, triton, numpy or transformers."""
    violations = []
    for module in tree.modules(CONTROL_PLANE):
        for name, chain in tree.loaded(module).items():
            if name in HEAVY:
                steps = " -> ".join(tree.describe(imp) for imp in chain)
                violations.append(f"{module} loads {name} at import time: {steps}")
    return violations


def forbidden_imports(
    tree: SourceTree, scope: tuple[str, ...], forbidden: tuple[str, ...]
) -> list[str]:
    """Rules b-d: imports, at any level, by modules in `scope` of a module in `forbidden`,
    directly or through what the imported module loads at import time."""
    violations = []
    for module in tree.modules(scope):
        for imp in tree.readers[module].imports:
            if within(imp.target, forbidden):
                violations.append(f"{tree.describe(imp)} ({imp.level}) imports {imp.target}")
                continue
            if imp.level == "type_checking" or imp.target not in tree.paths:
                continue
            for name, chain in tree.loaded(imp.target).items():
                if within(name, forbidden):
                    steps = " -> ".join(tree.describe(step) for step in (imp, *chain))
                    violations.append(f"{tree.describe(imp)} ({imp.level}) loads {name}: {steps}")
                    break
    return violations


def direct_imports(
    tree: SourceTree, scope: tuple[str, ...], forbidden: tuple[str, ...]
) -> list[str]:
    """Rule h: imports, at any level, by modules in `scope` of a module in `forbidden` itself
    (what those imports load is not followed: shared value types may name a `Request`)."""
    return [
        f"{tree.describe(imp)} ({imp.level}) imports {imp.target}"
        for module in tree.modules(scope)
        for imp in tree.readers[module].imports
        if within(imp.target, forbidden)
    ]


def import_cycles(tree: SourceTree) -> list[str]:
    """Rule e: strongly connected llmd modules over module- and function-level imports."""
    edges = {m: [i for i in r.imports if i.level != "type_checking" and i.target in tree.paths
                 and i.target != m] for m, r in tree.readers.items()}  # fmt: skip
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan; the graph is a few hundred modules deep at most
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for imp in edges[node]:
            if imp.target not in index:
                visit(imp.target)
                low[node] = min(low[node], low[imp.target])
            elif imp.target in on_stack:
                low[node] = min(low[node], index[imp.target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                components.append(sorted(component))

    for module in tree.paths:
        if module not in index:
            visit(module)
    violations = []
    for component in components:
        members = set(component)
        steps = [
            f"{tree.describe(imp)} ({imp.level}{f' in {imp.function}' if imp.function else ''})"
            for module in component for imp in edges[module] if imp.target in members
        ]  # fmt: skip
        violations.append(f"import cycle among {', '.join(component)}: " + "; ".join(steps))
    return violations


def private_accesses(tree: SourceTree) -> list[str]:
    """Rule f: `x._name` where x is not self/cls/super() and not an object of this module.

    An approximation without types: a read is flagged when its object's root name was
    imported from another llmd module, or when no code in this file defines `_name`
    (a def, class, assignment or self/cls attribute). `other._x` with `_x` defined in the
    same file (a class comparing itself with another instance) is module-local.
    """
    violations = []
    for module, reader in tree.readers.items():
        for line, name in reader.private_imports:
            violations.append(f"{tree.where(module, line)} imports another module's {name}")
        for line, attr, node in reader.private_reads:
            text = ast.unparse(node)
            if any(text.startswith(prefix) for prefix in OTHER_LIBRARIES_PRIVATE_API):
                continue
            root = node.value
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            imported = isinstance(root, ast.Name) and root.id in reader.llmd_names
            if imported or attr not in reader.defined:
                violations.append(f"{tree.where(module, line)} uses {text}")
    return violations


def engine_internal_reads(
    tree: SourceTree, scope: tuple[str, ...], names: tuple[str, ...] = ENGINE_INTERNALS
) -> list[str]:
    """Rules g and h: `x.scheduler`, `x.block_manager`, `x.runner` (or `names`) read in `scope`.

    By attribute name alone, whatever `x` is: in the daemon no other object has them, and
    in the runner `.request` is only ever a plan chunk's engine handle.
    """
    violations = []
    for module in tree.modules(scope):
        for node in ast.walk(tree.syntax[module]):
            if isinstance(node, ast.Attribute) and node.attr in names:
                violations.append(f"{tree.where(module, node.lineno)} reads {ast.unparse(node)}")
    return sorted(violations)


@pytest.fixture(scope="module")
def llmd_tree() -> SourceTree:
    return SourceTree(REPO_ROOT)


def check(violations: list[str]) -> None:
    assert not violations, f"{len(violations)} violation(s):\n" + "\n".join(violations)


def test_control_plane_loads_no_heavy_library(llmd_tree):
    check(heavy_loads(llmd_tree))


def test_client_protocol_and_tui_never_import_the_engine_side(llmd_tree):
    check(forbidden_imports(llmd_tree, WIRE_ONLY, ENGINE_SIDE))


def test_tui_never_imports_commands(llmd_tree):
    check(forbidden_imports(llmd_tree, ("llmd.tui",), ("llmd.commands",)))


def test_daemon_never_imports_the_cli(llmd_tree):
    check(forbidden_imports(llmd_tree, ("llmd.daemon",), CLI))


def test_no_import_cycles(llmd_tree):
    check(import_cycles(llmd_tree))


def test_no_cross_module_private_access(llmd_tree):
    check(private_accesses(llmd_tree))


def test_daemon_reads_no_scheduler_block_manager_or_runner(llmd_tree):
    check(engine_internal_reads(llmd_tree, ("llmd.daemon", "llmd.warmup")))


def test_runner_reads_plans_as_data_never_an_engine_request(llmd_tree):
    check(direct_imports(llmd_tree, ("llmd.runner",), ENGINE_STATE))
    check(engine_internal_reads(llmd_tree, ("llmd.runner",), ("request",)))


SYNTHETIC = {
    "llmd/__init__.py": "",
    "llmd/cli.py": "import click\n",
    "llmd/light.py": "import llmd.heavy\n",
    "llmd/heavy.py": "import numpy.linalg\n",
    "llmd/daemon/__init__.py": "",
    "llmd/daemon/main.py": "def main():\n    from llmd import cli\n",
    "llmd/daemon/peek.py": (
        "def f(engine, loop):\n"
        "    return engine.scheduler.waiting, loop.engine.runner, engine.facts().num_blocks\n"
    ),
    "llmd/commands/__init__.py": "",
    "llmd/commands/helper.py": "",
    "llmd/tui/__init__.py": "",
    "llmd/tui/app.py": "import llmd.light\nfrom llmd.commands import helper\n",
    "llmd/tui/lazy.py": "def f():\n    import llmd.light\n",
    "llmd/client/__init__.py": "",
    "llmd/client/wire.py": "def f():\n    from ..engine import core\n",
    "llmd/engine/__init__.py": "",
    "llmd/engine/core.py": "",
    "llmd/engine/request.py": "",
    "llmd/runner/__init__.py": "",
    "llmd/runner/step.py": (
        "from llmd.engine import request\n"
        "def f(chunk):\n    return chunk.request.block_ids, chunk.request_id\n"
    ),
    "llmd/a.py": "import llmd.b\n",
    "llmd/b.py": "def f():\n    import llmd.a\n",
    "llmd/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import llmd.d\n",
    "llmd/d.py": "import llmd.c\n",
    "llmd/p.py": (
        "import torch\nfrom llmd.q import thing, _helper\n"
        "class K:\n"
        "    def __init__(self):\n        self._own = 1\n"
        "    def same(self, other):\n        return other._own, super()._base, self.k._own\n"
        "def f(engine, point):\n"
        "    return engine._hidden, thing._own, torch.ops.mkldnn._linear(point)\n"
    ),
    "llmd/q.py": "thing = object()\ndef _helper():\n    pass\n",
}


@pytest.fixture(scope="module")
def synthetic_tree(tmp_path_factory) -> SourceTree:
    root = tmp_path_factory.mktemp("import-rules")
    for name, text in SYNTHETIC.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return SourceTree(root)


def test_rules_catch_known_violations(synthetic_tree):
    tree = synthetic_tree
    assert heavy_loads(tree) == [
        "llmd.tui.app loads numpy at import time: llmd/tui/app.py:1 `import llmd.light` -> "
        "llmd/light.py:1 `import llmd.heavy` -> llmd/heavy.py:1 `import numpy.linalg`"
    ]
    assert forbidden_imports(tree, WIRE_ONLY, ENGINE_SIDE) == [
        "llmd/client/wire.py:2 `from ..engine import core` (function) imports llmd.engine.core"
    ]
    assert forbidden_imports(tree, ("llmd.tui",), ("llmd.commands",)) == [
        "llmd/tui/app.py:2 `from llmd.commands import helper` (module) imports llmd.commands.helper"
    ]
    assert forbidden_imports(tree, ("llmd.daemon",), CLI) == [
        "llmd/daemon/main.py:2 `from llmd import cli` (function) imports llmd.cli"
    ]
    assert import_cycles(tree) == [
        "import cycle among llmd.a, llmd.b: llmd/a.py:1 `import llmd.b` (module); "
        "llmd/b.py:2 `import llmd.a` (function in f)"
    ]  # c <-> d is no cycle: c imports d only for type checking
    assert engine_internal_reads(tree, ("llmd.daemon",)) == [
        "llmd/daemon/peek.py:2 reads engine.scheduler",
        "llmd/daemon/peek.py:2 reads loop.engine.runner",
    ]
    assert direct_imports(tree, ("llmd.runner",), ENGINE_STATE) == [
        "llmd/runner/step.py:1 `from llmd.engine import request` (module) imports "
        "llmd.engine.request"
    ]
    assert engine_internal_reads(tree, ("llmd.runner",), ("request",)) == [
        "llmd/runner/step.py:3 reads chunk.request"
    ]  # chunk.request_id is plan data
    assert private_accesses(tree) == [
        "llmd/p.py:2 imports another module's llmd.q._helper",
        "llmd/p.py:9 uses engine._hidden",
        "llmd/p.py:9 uses thing._own",
    ]


def test_transitive_reach_is_caught_through_a_lazy_import(synthetic_tree):
    """A function-level import of a module that loads a forbidden one counts too."""
    assert forbidden_imports(synthetic_tree, ("llmd.tui.lazy",), ("llmd.heavy",)) == [
        "llmd/tui/lazy.py:2 `import llmd.light` (function) loads llmd.heavy: "
        "llmd/tui/lazy.py:2 `import llmd.light` -> llmd/light.py:1 `import llmd.heavy`"
    ]
    assert forbidden_imports(synthetic_tree, ("llmd.b",), ("llmd.heavy",)) == []
