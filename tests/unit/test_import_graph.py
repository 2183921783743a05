"""The import graph of shared/ and functions/ has no cycles (docs/architecture.md, the layers).

import-linter's contracts (.importlinter, run by `make test`) say which layer may import which;
this test says more simply that no module reaches itself again through runtime imports, lazy ones
in functions included. Imports under `if TYPE_CHECKING:` name types only and are left out.
"""

from __future__ import annotations

import grimp


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm, iteratively: the groups of modules that import each other in a ring."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.find_modules_directly_imported_by(nxt)))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def test_the_finder_sees_a_ring() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "b", "c", "d"):
        graph.add_module(name)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")

    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_shared_and_functions_have_no_import_cycles() -> None:
    graph = grimp.build_graph("shared", "functions", exclude_type_checking_imports=True)

    assert strongly_connected(graph) == []
