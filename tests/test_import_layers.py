"""No import cycles in ``ferrymq/`` (issue 32): neither between packages (``ferrymq.broker`` and
``ferrymq.grpc`` importing each other) nor between modules, counting every import the source
holds: function-level ones and those under ``if TYPE_CHECKING:`` too, since they still say that
each side needs the other. And each package imports only those that the layering in
docs/architecture.md#who-may-import-whom lists before it (the test reads that list).

Tool-free: every module is parsed with ``ast``; nothing is imported. A failure names the cycle
edge by edge: ``ferrymq/a/x.py:12 ferrymq.a.x imports ferrymq.b.y``."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ferrymq"

# Packages nested one level further that count as packages of their own: between each other and
# with the other packages (``ferrymq.grpc`` -> ``ferrymq.broker.pop`` -> ``ferrymq.grpc`` would
# fail). Their edges with their parent's own modules are left out of the package graph: the
# parent's loose modules are both what they build on (``ferrymq.broker.config``) and what wires
# them (``ferrymq.broker.broker``); a real cycle there is a module cycle, which the module check finds.
SUBPACKAGES = ("ferrymq.broker.ha", "ferrymq.broker.pop", "ferrymq.broker.processors")

# Cycles left because removing them needs files that other work owns right now (issue 32): each
# entry is the set of members of the cycle (package names, or module names). The check fails
# when one of them is gone, so that the entry goes too.
KNOWN_PACKAGE_CYCLES: list[frozenset[str]] = []
KNOWN_MODULE_CYCLES: list[frozenset[str]] = []


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line} {self.source} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts}


def imported_names(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """Dotted names an import statement may refer to, most specific first per name."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = importer.split(".") if is_package else importer.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    # ``from pkg import name``: the submodule pkg.name when there is one, else pkg itself
    return [f"{base}.{alias.name}" if alias.name != "*" else base for alias in node.names] + [base]


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module of ferrymq a dotted name lands in (its longest prefix that is a module)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def import_targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool,
                   known: dict[str, Path]) -> set[str]:
    """The modules of ferrymq one import statement needs."""
    names = imported_names(node, importer, is_package)
    if isinstance(node, ast.ImportFrom):
        # the submodules named, and the module the other names come from
        submodules = [n for n in names[:-1] if n in known]
        targets = submodules + ([resolve(names[-1], known)] if len(submodules) < len(names) - 1 else [])
    else:
        targets = [resolve(n, known) for n in names]
    return {t for t in targets if t is not None}


def import_edges() -> list[Edge]:
    known = modules()
    edges: dict[tuple[str, str], Edge] = {}
    for source, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in import_targets(node, source, path.name == "__init__.py", known):
                if target == source:
                    continue
                edge = Edge(source, target, path, node.lineno)
                kept = edges.get((source, target))
                if kept is None or edge.line < kept.line:
                    edges[(source, target)] = edge
    return sorted(edges.values(), key=lambda e: (e.source, e.target))


def package_of(module: str) -> str | None:
    for sub in SUBPACKAGES:
        if module == sub or module.startswith(sub + "."):
            return sub
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else None


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one member, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def shortest_cycle(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """A shortest cycle through the component's first member, as a list of nodes (first == last)."""
    inside = set(members)
    start = members[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & inside):
                if child == start:
                    back = [node]
                    while back[-1] != start:
                        back.append(previous[back[-1]])
                    return back[::-1] + [start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def cycles_through(graph: dict[str, set[str]], members: list[str]) -> list[list[str]]:
    """A shortest cycle through each member of a component, without repeats: every mutual pair
    shows, and so does the way each member is caught."""
    found: list[list[str]] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    for member in members:
        cycle = shortest_cycle(graph, [member] + [m for m in members if m != member])
        edges = frozenset(zip(cycle, cycle[1:]))
        if edges not in seen:
            seen.add(edges)
            found.append(cycle)
    return found


def describe(cycle: list[str], edges_between) -> str:
    lines = [" -> ".join(cycle)]
    for a, b in zip(cycle, cycle[1:]):
        for edge in edges_between(a, b):
            lines.append(f"    {edge}")
    return "\n".join(lines)


def check(graph: dict[str, set[str]], known: list[frozenset[str]], what: str, edges_between) -> None:
    components = strongly_connected(graph)
    found = [c for c in components if frozenset(c) not in known]
    gone = [sorted(k) for k in known if k not in {frozenset(c) for c in components}]
    report = []
    for component in found:
        report.append(f"{len(component)} {what}: {', '.join(component)}")
        report += ["  " + describe(cycle, edges_between) for cycle in cycles_through(graph, component)]
    assert not found, f"{what} of ferrymq import each other (issue 32):\n" + "\n".join(report)
    assert not gone, f"known cycles of {what} no longer there: take them off the list: {gone}"


def module_graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge.source].add(edge.target)
        graph[edge.target]
    return graph


def package_graph(edges: list[Edge]) -> tuple[dict[str, set[str]], dict[tuple[str, str], list[Edge]]]:
    graph: dict[str, set[str]] = defaultdict(set)
    by_pair: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for edge in edges:
        a, b = package_of(edge.source), package_of(edge.target)
        if a is None or b is None or a == b or a.startswith(b + ".") or b.startswith(a + "."):
            continue
        graph[a].add(b)
        graph[b]
        by_pair[(a, b)].append(edge)
    return graph, by_pair


def test_the_scan_sees_every_kind_of_import():
    """Function-level imports and TYPE_CHECKING ones are edges too (or the check could not fail)."""
    edges = import_edges()
    pairs = {(e.source, e.target) for e in edges}
    assert len(modules()) > 100 and len(edges) > 300
    assert ("ferrymq.cli.servers", "ferrymq.cli.demo") in pairs  # a function-level import
    assert ("ferrymq.grpc.wiring", "ferrymq.broker.broker") in pairs  # under TYPE_CHECKING
    assert ("ferrymq.broker.processors.pull", "ferrymq.broker.ha.reads") in pairs  # into a subpackage
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ferrymq.broker.broker import Broker\n"
        "def f():\n    import ferrymq.grpc.clients\n"
        "    from ferrymq.common import message\n"
        "    from ferrymq.broker.pop.service import PopService\n"
    )
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    known = modules()
    found = set().union(*(import_targets(node, "ferrymq.x", False, known) for node in nodes))
    assert found == {"ferrymq.broker.broker", "ferrymq.grpc.clients", "ferrymq.common.message",
                     "ferrymq.broker.pop.service"}
    # relative imports, from a package's __init__ and from a module
    relative = ast.parse("from . import service\nfrom ..config import BrokerConfig\n"
                         "from .. import config, BrokerConfig\n").body
    assert import_targets(relative[0], "ferrymq.broker.pop", True, known) == {"ferrymq.broker.pop.service"}
    assert import_targets(relative[1], "ferrymq.broker.pop.state", False, known) == {"ferrymq.broker.config"}
    # a submodule and a name of the package: both the submodule and the package's __init__
    assert import_targets(relative[2], "ferrymq.broker.pop.state", False, known) == {"ferrymq.broker.config",
                                                                                      "ferrymq.broker"}


def test_a_cycle_is_found_and_named_edge_by_edge():
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert cycles_through(graph, ["a", "b", "c"]) == [["a", "b", "a"], ["c", "a", "b", "c"]]
    edges = {(x, y): [f"{x} imports {y} at line 1"] for x in graph for y in graph[x]}
    try:
        check(graph, [], "modules", lambda x, y: edges[(x, y)])
    except AssertionError as e:
        assert "a -> b -> a" in str(e) and "b imports a at line 1" in str(e) and "c imports a" in str(e)
    else:
        raise AssertionError("a cycle went unnoticed")
    check(graph, [frozenset("abc")], "modules", lambda x, y: edges[(x, y)])  # a known one passes


def test_no_cycle_between_packages():
    graph, by_pair = package_graph(import_edges())
    check(graph, KNOWN_PACKAGE_CYCLES, "packages", lambda a, b: by_pair[(a, b)])


def test_no_cycle_between_modules():
    edges = import_edges()
    by_pair = {(e.source, e.target): e for e in edges}
    check(module_graph(edges), KNOWN_MODULE_CYCLES, "modules", lambda a, b: [by_pair[(a, b)]])


def documented_layers() -> dict[str, set[str]]:
    """docs/architecture.md#who-may-import-whom, read: package -> the packages it may import."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Who may import whom", 1)[1]
    block = section.split("```", 2)[1]
    allowed: dict[str, set[str]] = {}
    for line in block.strip().splitlines():
        names, _, deps = line.partition("->")
        deps = deps.split("(", 1)[0].strip()
        if deps == "everything above":
            below = set(allowed)
        else:
            below = {f"ferrymq.{d.strip()}" for d in deps.split(",") if d.strip()}
        assert below <= set(allowed), f"{line!r} names a package not listed before it"
        for name in names.split("(", 1)[0].split(","):
            allowed[f"ferrymq.{name.strip()}"] = below
    return allowed


def test_packages_import_only_the_layers_below_them():
    allowed = documented_layers()
    packages = {".".join(m.split(".")[:2]) for m in modules() if m.count(".") >= 1}
    assert packages == set(allowed), "docs/architecture.md lists other packages than ferrymq/ has"
    wrong = []
    for edge in import_edges():
        a, b = ".".join(edge.source.split(".")[:2]), ".".join(edge.target.split(".")[:2])
        if a != b and b != "ferrymq" and b not in allowed[a]:
            wrong.append(f"  {edge}: {a} may import only {', '.join(sorted(allowed[a])) or 'nothing of ferrymq'}")
    assert not wrong, "imports against docs/architecture.md#who-may-import-whom:\n" + "\n".join(wrong)
