"""The import graph of Floe's code: no circles, and every import points down the layers of DESIGN.md.

Imports are read from the source with `ast`, wherever they stand (module level, inside functions, under
``if TYPE_CHECKING:``): a type-only import ties two modules together as much as any other, since
neither can then be read, moved or tested without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("broker_core", "tiered_storage", "functions", "emr_jobs")

# Lowest first. A module may import modules of its own layer or of lower ones. The most specific
# prefix names a module's layer, so the broker's entry points sit above the services they wire.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("formats and the settings registry", ("broker_core.records", "broker_core.partitioner", "broker_core.settings", "broker_core.clock")),
    ("metrics families and exposition", ("broker_core.metrics",)),
    ("wire protocol and local log", ("broker_core.protocol", "broker_core.log")),
    ("AWS access", ("broker_core.aws", "broker_core.dynamodb_tables", "broker_core.retry")),
    ("cluster metadata, client quotas and security", ("broker_core.metadata", "broker_core.quotas", "broker_core.security")),
    ("Kafka client", ("broker_core.client",)),
    ("request path", ("broker_core.server",)),
    ("broker services", ("broker_core.replication", "broker_core.groups", "broker_core.transactions")),
    ("tiered storage", ("tiered_storage",)),
    ("entry points", (
        "broker_core.server.assembly", "broker_core.server.__main__", "broker_core.cli", "broker_core.top",
        "broker_core.reassign_cli",
        "broker_core.groups.cli", "broker_core.transactions.cli", "broker_core.security.cli",
        "broker_core.security.acl_cli", "broker_core.local_moto", "broker_core.local_stack", "broker_core.demo",
        "broker_core.secured_demo",
        "functions", "emr_jobs",
    )),
)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` imports (a package's __init__ for `from pkg import x`)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def layer_of(module: str) -> int:
    if module == "broker_core":
        return 0  # the package itself: an empty __init__
    best, best_length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    assert circles(import_graph()) == []


def test_every_module_has_a_layer() -> None:
    assert [name for name in sorted(import_graph()) if layer_of(name) < 0] == []


def test_imports_point_down_the_layers() -> None:
    upward = sorted(
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(name) >= 0
    )
    assert upward == []


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
