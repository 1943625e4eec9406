"""qlrewrite.qdq: graph references, the opset in force per graph, the per-node view."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from qlrewrite.qdq import MAIN, GraphRef, imported_version, iter_graphs, iter_sites, node_views


def _function_model(model_imports: dict[str, int]) -> ir.Model:
    """A model-local function holding one DQ; the function imports only its own domain."""
    function = helper.make_function(
        "custom",
        "f",
        ["x", "s"],
        ["y"],
        [helper.make_node("DequantizeLinear", ["x", "s"], ["y"])],
        opset_imports=[helper.make_opsetid("custom", 1)],
    )
    graph = helper.make_graph(
        [helper.make_node("f", ["x", "s"], ["y"], domain="custom", name="call")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[numpy_helper.from_array(np.array(0.5, np.float32), "s")],
    )
    imports = [helper.make_opsetid(d, v) for d, v in model_imports.items()]
    proto = helper.make_model(graph, opset_imports=imports, functions=[function], ir_version=10)
    return ir.serde.deserialize_model(proto)


def test_imported_version_reads_both_spellings_of_onnx() -> None:
    assert imported_version({"ai.onnx": 21}, "") == 21
    assert imported_version({"": 13, "ai.onnx": 21}, "ai.onnx") == 13
    assert imported_version({"com.microsoft": 1}, "") is None
    assert imported_version({"com.microsoft": 1}, "com.microsoft") == 1


def test_function_falls_back_to_the_model_import_spelled_ai_onnx() -> None:
    for imports in ({"": 21, "custom": 1}, {"ai.onnx": 21, "custom": 1}):
        (site,) = iter_sites(_function_model(imports))
        assert (str(site.ref), site.imported, site.version) == ("function:custom.f", 21, 21)


def test_function_views_bind_the_call_site() -> None:
    (_site, views), *_ = node_views(_function_model({"": 21, "custom": 1}))
    (view,) = views
    assert view.x_type == ir.DataType.INT8  # the call's actual input
    assert view.output_type == ir.DataType.FLOAT
    assert view.call_site == "'call' in main"


def test_graph_refs_label_subgraphs_by_owner() -> None:
    branch = helper.make_graph([helper.make_node("Identity", ["c"], ["b"])], "t", [], [])
    node = helper.make_node("If", ["c"], ["out"], then_branch=branch, else_branch=branch)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", 9, [])], [])
    model = ir.serde.deserialize_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    )
    refs = [scope.ref for scope in iter_graphs(model)]
    # helper.make_node sorts attributes: else_branch first
    assert [str(r) for r in refs] == [
        "main",
        "main/If(out).else_branch",
        "main/If(out).then_branch",
    ]
    assert refs[2] == MAIN.subgraph("If(out)", "then_branch") and refs[2].parent is MAIN
    assert str(GraphRef.of_function("d", "f").subgraph("loop", "body", 2)) == (
        "function:d.f/loop.body[2]"
    )
