"""The Python API refuses and checks as the command line does (one code path,
qlrewrite.pipeline.rewrite_model): an input with error findings and a rewrite whose output
would be invalid raise, where the API used to return the rewrite silently."""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir
import pytest
from click.testing import CliRunner

import qlrewrite
from qlrewrite import api
from qlrewrite.cli import main
from qlrewrite.errors import Refusal
from qlrewrite.pipeline import FindingsRefusal

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INVALID = EXAMPLES / "invalid_per_axis_scale.onnx"  # QL403: a per-axis scale of wrong length
VALID = EXAMPLES / "qdq_float_weights_opset13.onnx"

#: (function, its command line, the api's pass factory it calls)
REWRITES = {
    "fold": (qlrewrite.fold, ["fold"], "fold_passes"),
    "convert": (
        lambda m: qlrewrite.convert(m, "onnx"),
        ["convert", "--to", "onnx"],
        "convert_passes",
    ),
    "upgrade": (lambda m: qlrewrite.upgrade(m, 21), ["upgrade", "--opset", "21"], "upgrade_passes"),
}


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_an_input_with_error_findings_is_refused_with_them(name: str, tmp_path) -> None:
    function, command, _ = REWRITES[name]
    with pytest.raises(FindingsRefusal) as refused:
        function(INVALID)
    assert [f.rule for f in refused.value.findings] == ["QL403"]
    assert "1 error finding(s); nothing written (QL403: " in str(refused.value)
    result = CliRunner().invoke(main, [*command, str(INVALID), "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 1 and "1 error finding(s)" in result.stderr  # the same refusal


class _Dangling(ir.passes.InPlacePass):
    """Leaves a node reading a value nothing produces: onnx.checker rejects the output."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        nowhere = ir.Value(name="nowhere", type=ir.TensorType(ir.DataType.FLOAT))
        node = ir.node("Relu", [nowhere], name="dangling")
        model.graph.append(node)
        model.graph.outputs.append(node.outputs[0])
        node.outputs[0].name = "dangling_out"
        return ir.passes.PassResult(model, True)


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_a_rewrite_whose_output_would_be_invalid_is_refused(name: str, monkeypatch) -> None:
    function, _, factory = REWRITES[name]
    assert function(VALID) is not None  # the real rewrite passes
    real = getattr(api, factory)
    monkeypatch.setattr(api, factory, lambda *a, **k: [*real(*a, **k), _Dangling()])
    with pytest.raises(Refusal, match="the rewritten model would be invalid"):
        function(VALID)


def test_a_rewrite_with_error_findings_is_refused_with_them(monkeypatch) -> None:
    class _WrongScale(ir.passes.InPlacePass):
        """A 2-D scale without block_size: no granularity is valid."""

        def call(self, model: ir.Model) -> ir.passes.PassResult:
            dq = next(n for n in model.graph if n.op_type == "DequantizeLinear")
            tensor = ir.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=ir.DataType.FLOAT)
            scale = ir.Value(name="wrong_scale", const_value=tensor)
            model.graph.register_initializer(scale)
            dq.replace_input_with(1, scale)
            return ir.passes.PassResult(model, True)

    monkeypatch.setattr(api, "convert_passes", lambda *a, **k: [_WrongScale()])
    with pytest.raises(FindingsRefusal) as refused:
        qlrewrite.convert(VALID, "onnx")
    assert [f.rule for f in refused.value.findings] == ["QL404", "QL405"]
    assert str(refused.value).startswith("the rewritten model would have")
