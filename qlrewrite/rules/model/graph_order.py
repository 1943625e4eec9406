"""QL610-QL611: node order: a node reading a value before the node that writes it (QL610, a
stable topological sort repairs it) and nodes that depend on themselves (QL611).

ONNX requires a graph's nodes in topological order and no cycle. ONNX Runtime sorts an
acyclic main graph itself (measured with 1.31.1: it runs) but refuses a function's or a
subgraph's own nodes out of order, and a cycle ("the graph is not acyclic"); ONNX's
checker refuses all of them, and so do qlrewrite's rewrites. A subgraph's nodes come
before the node that holds them: a subgraph may read an outer value written before its
owner, not after (onnx_ir's sort orders them so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import onnx_ir as ir

from qlrewrite.findings import ERROR, SAFE, Finding
from qlrewrite.rules.model_spec import DT, ModelSpec
from qlrewrite.rules.registry import Example, Fix, ModelContext, rule
from qlrewrite.toolkit import GraphRef, nodes_post_order, root_graphs, subgraphs_of

__all__ = ["OrderProblem", "order_problems"]


@dataclasses.dataclass(frozen=True)
class OrderProblem:
    """The node order of one root graph (the main graph or a function, with their
    subgraphs): ``late`` readers of a value written after them (the first with what it
    reads and who writes it), and ``cycle`` the nodes of one cycle, in order (empty when
    the graph is acyclic)."""

    root: GraphRef
    graph: ir.Graph | ir.Function
    late: int
    reader: ir.Node
    value: ir.Value
    writer: ir.Node
    cycle: tuple[ir.Node, ...]


def order_problems(model: ir.Model) -> list[OrderProblem]:
    """Each root graph of ``model`` (the main graph, each function; with their subgraphs)
    whose nodes are not in topological order."""
    problems = []
    for ref, root in root_graphs(model):
        problem = _root_problem(ref, root)
        if problem is not None:
            problems.append(problem)
    return problems


def _late_reads(order: Sequence[ir.Node]) -> list[tuple[ir.Node, ir.Value, ir.Node]]:
    """Each read of a value whose writer comes at or after the reader in ``order``
    (every writer a root's nodes can read is among them)."""
    done: set[ir.Node] = set()
    late = []
    for node in order:
        for value in node.inputs:
            if value is None:
                continue
            writer = value.producer()
            if writer is not None and writer not in done:
                late.append((node, value, writer))
        done.add(node)
    return late


def _root_problem(ref: GraphRef, root: ir.Graph | ir.Function) -> OrderProblem | None:
    order = nodes_post_order(root)
    late = _late_reads(order)
    if not late:
        return None
    reader, value, writer = late[0]
    position = {node: index for index, node in enumerate(order)}
    cycle = _a_cycle(order, position)
    return OrderProblem(ref, root, len(late), reader, value, writer, cycle)


def _predecessors(order: Sequence[ir.Node], position: dict[ir.Node, int]) -> list[list[int]]:
    """For each node (by position): the positions of the nodes it must follow: the
    writers of its inputs and the nodes of its subgraphs (onnx_ir's sort does the same)."""
    before: list[list[int]] = [[] for _ in order]
    for index, node in enumerate(order):
        for value in node.inputs:
            writer = value.producer() if value is not None else None
            if writer is not None and writer in position:
                before[index].append(position[writer])
        before[index].extend(position[inner] for graph in subgraphs_of(node) for inner in graph)
    return before


def _a_cycle(order: Sequence[ir.Node], position: dict[ir.Node, int]) -> tuple[ir.Node, ...]:
    """One cycle among the nodes (empty when there is none): Kahn's algorithm removes
    every node that does not depend on itself, then a walk along the predecessors of what
    is left must come back to a node it passed."""
    before = _predecessors(order, position)
    waiting = [len(preds) for preds in before]
    after: list[list[int]] = [[] for _ in order]
    for index, preds in enumerate(before):
        for pred in preds:
            after[pred].append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    placed = set(ready)
    while ready:
        for follower in after[ready.pop()]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                placed.add(follower)
                ready.append(follower)
    if len(placed) == len(order):
        return ()
    left = next(index for index in range(len(order)) if index not in placed)
    walk: list[int] = []
    seen: dict[int, int] = {}
    while left not in seen:
        seen[left] = len(walk)
        walk.append(left)
        left = next(pred for pred in before[left] if pred not in placed)
    return tuple(order[index] for index in reversed(walk[seen[left] :]))


def _named(node: ir.Node) -> str:
    first = node.outputs[0].name if node.outputs else ""
    return f"'{node.name or first or '?'}' ({node.op_type})"


#: Nodes of a cycle a QL611 message names: the first and last halves, the rest counted
#: (a cycle through a whole graph would be a line of every node's name).
_CYCLE_NAMED = 8


def _cycle_path(cycle: Sequence[ir.Node]) -> str:
    """``'a' (Op) -> 'b' (Op) -> 'a' (Op)``, at most :data:`_CYCLE_NAMED` nodes named."""
    names = [_named(node) for node in cycle]
    if len(names) > _CYCLE_NAMED:
        half = _CYCLE_NAMED // 2
        names = [*names[:half], f"({len(names) - 2 * half} more)", *names[-half:]]
    return " -> ".join([*names, names[0]])


def _sort(model: ir.Model) -> str | None:
    """QL610's fix: a stable topological sort of the main graph and each function (with
    their subgraphs); nothing when a cycle makes it impossible (QL611)."""
    problems = order_problems(model)
    if not problems or any(problem.cycle for problem in problems):
        return None
    for problem in problems:
        problem.graph.sort()
    return "nodes sorted in topological order (stable)"


#: The examples' model: Q -> DQ of an activation into a MatMul with a dequantized weight,
#: quantized again (ending in output ``y``).
_QDQ_MATMUL = ModelSpec("qdq_matmul", DT.UINT8)


@rule(
    "QL610",
    "node-order",
    ERROR,
    summary="A node reads a value before the node that writes it: the graph is not in "
    "topological order.",
    explanation="""
    ONNX requires each graph's nodes in topological order: a node after the nodes writing
    its inputs, a subgraph's nodes before the node holding them reading only outer values
    written before that node. ONNX's checker and qlrewrite's rewrites refuse a model out
    of order. ONNX Runtime (1.31.1 measured) sorts a main graph itself and runs it, so a
    model can pass a runtime test and fail every other tool; a function's or a
    subgraph's own nodes out of order it refuses. Hand-edited graphs and graph surgery
    that appends nodes write such models.
    """,
    example="""
    bad:  DequantizeLinear(q, s, zp) -> y;  QuantizeLinear(x, s, zp) -> q
    good: QuantizeLinear(x, s, zp) -> q;  DequantizeLinear(q, s, zp) -> y
    """,
    versions="all",
    scope="model",
    needs_version=False,
    fix=Fix(
        SAFE,
        """
        A stable topological sort (onnx_ir's, of each graph with its subgraphs): nodes
        keep their order where it is valid; no node, value or attribute changes. Not
        applied when the graph has a cycle (QL611).
        """,
        model=_sort,
    ),
    examples=[
        Example(
            "reversed",
            ModelSpec("edited", _QDQ_MATMUL, ModelSpec("reversed_nodes")),
            _QDQ_MATMUL,
        ),
    ],
)
def node_order(ctx: ModelContext) -> Iterator[Finding]:
    for problem in order_problems(ctx.model):
        if problem.cycle:
            continue  # QL611's
        more = f" ({problem.late - 1} more such read(s))" if problem.late > 1 else ""
        yield ctx.report(
            f"node {_named(problem.reader)} reads '{problem.value.name}' before node "
            f"{_named(problem.writer)} writes it{more}",
            "run `qlrewrite check --fix` (a stable topological sort), or re-export the model",
            graph=str(problem.root),
        )


@rule(
    "QL611",
    "graph-cycle",
    ERROR,
    summary="Nodes depend on themselves: the graph has a cycle.",
    explanation="""
    An ONNX graph is acyclic: no order of its nodes lets each read only values written
    before it. ONNX Runtime refuses such a model when it loads it ("the graph is not
    acyclic"), and so do ONNX's checker and qlrewrite's rewrites. No repair keeps the
    meaning: the model must be exported again.
    """,
    example="""
    bad:  QuantizeLinear(a, s, zp) -> q;  DequantizeLinear(q, s, zp) -> d;  Add(x, d) -> a
    good: QuantizeLinear(x, s, zp) -> q;  DequantizeLinear(q, s, zp) -> d;  Add(x, d) -> a
    """,
    versions="all",
    scope="model",
    needs_version=False,
    examples=[
        Example(
            "output-fed-back",
            ModelSpec("edited", _QDQ_MATMUL, ModelSpec("rewired", "qa", 0, "y")),
            _QDQ_MATMUL,
        ),
    ],
)
def graph_cycle(ctx: ModelContext) -> Iterator[Finding]:
    for problem in order_problems(ctx.model):
        if not problem.cycle:
            continue
        size = f" of {len(problem.cycle)} nodes" if len(problem.cycle) > _CYCLE_NAMED else ""
        yield ctx.report(
            f"the nodes form a cycle{size}: {_cycle_path(problem.cycle)} (each reads the one "
            "before)",
            "export the model again: no order of these nodes is valid",
            graph=str(problem.root),
        )
