"""The Python API (issue 23): every function takes a path, an onnx.ModelProto or an
onnx_ir model; unreadable models raise; select / ignore take a code or a list; errors name
parameters (the command line names its options); dir() lists the API; the passes are
public and compose in onnx_ir's PassManager."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from click.testing import CliRunner
from onnx import helper
from qdq_models import DQ, DT, Q, qdq_model

import qlrewrite
from qlrewrite.checking import checker
from qlrewrite.cli import main
from qlrewrite.errors import InputError, Refusal

API = ("load", "save", "check", "fix", "fold", "convert", "upgrade", "quantize", "dequantize")


def _bad() -> onnx.ModelProto:
    """QL403 (error): a per-axis scale of 5 for a dimension of 4."""
    return qdq_model(DQ, 13, scale_shape=(5,), attrs={"axis": 0})


def _foldable() -> onnx.ModelProto:
    """x @ DequantizeLinear(int8 weight): the DQ folds into a float initializer."""
    weight = np.arange(-6, 6, dtype=np.int8).reshape(4, 3)
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w", "scale", "zp"], ["w_dq"], name="dq"),
            helper.make_node("MatMul", ["x", "w_dq"], ["y"], name="mm"),
        ],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
        [
            onnx.numpy_helper.from_array(weight, "w"),
            onnx.numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
            onnx.numpy_helper.from_array(np.array(0, np.int8), "zp"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def _kinds(proto: onnx.ModelProto, path: Path) -> dict[str, object]:
    onnx.save(proto, path)
    return {
        "str": str(path),
        "Path": path,
        "ModelProto": proto,
        "ir.Model": ir.serde.deserialize_model(proto),
    }


@pytest.mark.parametrize("kind", ["str", "Path", "ModelProto", "ir.Model"])
def test_every_function_takes_every_kind_of_model(tmp_path: Path, kind: str) -> None:
    given = _kinds(_foldable(), tmp_path / "m.onnx")[kind]
    assert isinstance(qlrewrite.load(given), ir.Model)
    assert qlrewrite.check(given).errors == []
    folded = qlrewrite.fold(given)
    assert [n.op_type for n in folded.graph] == ["MatMul"]  # the DQ became an initializer
    assert qlrewrite.save(given, tmp_path / "saved.onnx") is None
    onnx.checker.check_model(onnx.load(tmp_path / "saved.onnx"), full_check=True)
    qlrewrite.save(folded, tmp_path / "folded.onnx")
    (value,) = onnx.load(tmp_path / "folded.onnx").graph.initializer
    expected = np.arange(-6, 6, dtype=np.float32).reshape(4, 3) * 0.5
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(value), expected)
    upgraded = qlrewrite.upgrade(_kinds(_foldable(), tmp_path / "u.onnx")[kind], 23)
    assert upgraded.opset_imports[""] == 23
    converted = qlrewrite.convert(_kinds(_foldable(), tmp_path / "c.onnx")[kind], "com.microsoft")
    assert [n.domain for n in converted.graph] == ["com.microsoft", ""]


def test_a_model_of_another_kind_is_a_type_error_saying_what_it_takes(tmp_path: Path) -> None:
    for function in (qlrewrite.load, qlrewrite.check, qlrewrite.fold):
        with pytest.raises(
            TypeError,
            match=r"model must be a path, an onnx\.ModelProto or an "
            r"onnx_ir\.Model, not int",
        ):
            function(3)
    with pytest.raises(TypeError, match="not bytes"):
        qlrewrite.convert(b"model", "onnx")
    with pytest.raises(TypeError, match="opset must be an int, not str"):
        qlrewrite.upgrade(_foldable(), "21")
    with pytest.raises(TypeError, match="path must be"):
        qlrewrite.save(_foldable(), None)


def test_check_of_an_unreadable_model_raises(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.onnx: no such file"):
        qlrewrite.check(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07 not protobuf \xff\xff")
    with pytest.raises(InputError, match=r"junk\.onnx: "):
        qlrewrite.check(junk)
    with pytest.raises(InputError, match=r"missing\.onnx"):
        qlrewrite.fold(tmp_path / "missing.onnx")


def test_select_and_ignore_take_a_code_or_a_list(tmp_path: Path) -> None:
    path = tmp_path / "bad.onnx"
    onnx.save(_bad(), path)
    for select in ("QL4", ["QL4"], ("QL403",), "QL403,QL5"):
        assert [f.rule for f in qlrewrite.check(path, select=select).findings] == ["QL403"]
    assert qlrewrite.check(path, ignore="QL4").findings == []
    assert qlrewrite.check(path, select="QL5").findings == []
    with pytest.raises(TypeError, match="select must be a rule code or a list of codes"):
        qlrewrite.check(path, select=4)


def test_python_errors_name_parameters_the_cli_names_options(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_foldable(), path)
    with pytest.raises(InputError, match=r"^select: unknown rule code or prefix 'QL77'$"):
        qlrewrite.check(path, select="QL77")
    with pytest.raises(InputError, match=r"^ignore: unknown rule code or prefix 'QL0'$"):
        qlrewrite.check(path, ignore=["QL0"])
    with pytest.raises(InputError, match=r"^opset 13 is below the model's ai.onnx opset 21"):
        qlrewrite.upgrade(path, 13)
    with pytest.raises(InputError, match=r"^opset 999 is above"):
        qlrewrite.upgrade(path, 999)
    with pytest.raises(
        InputError, match=r"^to must be 'onnx', 'com.microsoft' or 'qoperator', not 'qnn'$"
    ):
        qlrewrite.convert(path, "qnn")
    with pytest.raises(InputError, match=r"^float16 must be 'exact' or 'compact'"):
        qlrewrite.fold(path, float16="half")
    runner = CliRunner()
    result = runner.invoke(main, ["check", str(path), "--select", "QL77"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "qlrewrite: error: --select: unknown rule code or prefix 'QL77'"
    result = runner.invoke(main, ["upgrade", str(path), "--opset", "13", "--dry-run"])
    assert result.exit_code == 2 and "qlrewrite: error: --opset 13 is below" in result.stderr


def test_convert_runs_what_the_command_runs(tmp_path: Path) -> None:
    """int16 is not expressed by ai.onnx 13: the API refuses as the command does."""
    proto = qdq_model(
        DQ, 13, domain="com.microsoft", x_type=DT.INT16, imports={"": 13, "com.microsoft": 1}
    )
    with pytest.raises(Refusal, match="qlrewrite upgrade --opset 21"):
        qlrewrite.convert(proto, "onnx")
    upgraded = qlrewrite.upgrade(proto, 21)
    assert {n.domain for n in upgraded.graph} == {""}


def test_dir_lists_the_api_and_import_stays_cheap() -> None:
    assert set(API) | {"errors", "passes", "__version__"} <= set(dir(qlrewrite))
    assert "importlib" not in dir(qlrewrite)
    heavy = "('onnx', 'onnx_ir', 'numpy', 'qlrewrite.api')"
    code = f"import sys, qlrewrite; dir(qlrewrite); print([m for m in {heavy} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert "check" in qlrewrite.__all__ and callable(qlrewrite.check)


def test_public_passes_compose_in_a_pass_manager(tmp_path: Path) -> None:
    from qlrewrite import passes

    for name in passes.__all__:
        exported = getattr(passes, name)
        if isinstance(exported, type):
            assert issubclass(exported, ir.passes.PassBase), name
            assert exported.__doc__, name
    assert "FoldPass" in dir(passes) and "ConvertDomainPass" in dir(passes)
    model = ir.serde.deserialize_model(qdq_model(Q, 21, x_type=DT.FLOAT))
    manager = ir.passes.PassManager(
        [passes.ConvertDomainPass("com.microsoft"), passes.ConvertDomainPass("onnx")]
    )
    result = manager(model)
    assert [n.domain for n in result.model.graph] == [""] and result.modified


def test_a_proto_is_read_as_a_file_is(tmp_path: Path) -> None:
    """A ModelProto goes through the one ModelProto -> ir.Model step (model_io.from_proto):
    a node input defined nowhere is refused as it is in a file (the API used to wrap it
    and check it as if the input existed)."""
    proto = qdq_model(DQ, 21)
    proto.graph.node[0].input[0] = "nowhere"
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(InputError) as from_file:
        qlrewrite.check(tmp_path / "m.onnx")
    with pytest.raises(InputError) as from_proto:
        qlrewrite.check(proto)
    why = str(from_file.value).removeprefix(f"{tmp_path / 'm.onnx'}: ")
    assert "'nowhere'" in why and str(from_proto.value) == f"model: {why}"
    assert checker.check(proto).load_error == why


@pytest.mark.parametrize("where", ["x", "scale"])
def test_quantize_refuses_float64_saying_to_pass_float32(where: str) -> None:
    """A Python list is float64 to NumPy: refused with the types taken and the cast to make
    (ONNX has no float64 QuantizeLinear and ONNX Runtime no such kernel)."""
    x, scale = np.array([0.0, 0.5], np.float32), np.float32(0.01)
    args = ([0.0, 0.5], scale) if where == "x" else (x, 0.01)
    with pytest.raises(
        ValueError, match=r"of type float64 \(it takes bfloat16, float16, float32"
    ) as info:
        qlrewrite.quantize(*args, np.int8(0))
    assert f"pass np.asarray({where}, np.float32)" in str(info.value)
    with pytest.raises(ValueError, match=r"DequantizeLinear cannot read scale of type float64"):
        qlrewrite.dequantize(np.array([1, 2], np.int8), 0.01)
    cast = np.asarray([0.0, 0.5], np.float32)
    assert qlrewrite.quantize(cast, np.float32(0.01), np.int8(0)).tolist() == [0, 50]
    assert "pass" not in _message(lambda: qlrewrite.quantize(np.array([1], np.int64), scale))


def _message(call) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)


_REWRITES = {
    "fold": lambda m: qlrewrite.fold(m, keep_dq=False),
    "convert onnx": lambda m: qlrewrite.convert(m, "onnx"),
    "convert com.microsoft": lambda m: qlrewrite.convert(m, "com.microsoft"),
    "upgrade": lambda m: qlrewrite.upgrade(m, 23),
    "downgrade": lambda m: qlrewrite.downgrade(m, 13),
    "retarget unsigned": lambda m: qlrewrite.retarget(m, zero_point="unsigned"),
    "retarget split, symmetric": lambda m: qlrewrite.retarget(m, split_shared=True, symmetric=True),
    "fix": lambda m: qlrewrite.fix(m, unsafe=True),
}


@pytest.mark.parametrize("name", sorted(_REWRITES))
def test_a_model_proto_is_never_changed(name: str) -> None:
    """Every rewrite of a ModelProto, done or refused, leaves the caller's proto byte for
    byte as it was (names, initializers, opset imports)."""
    for proto in (_foldable(), qdq_model(Q, 21)):
        before = proto.SerializeToString(deterministic=True)
        with contextlib.suppress(Refusal, InputError):
            _REWRITES[name](proto)
        assert proto.SerializeToString(deterministic=True) == before


def test_a_refused_retarget_of_an_onnx_ir_model_keeps_the_steps_before() -> None:
    """What retarget's docstring says (it said 'nothing changed'): split_shared runs, then
    symmetric refuses an activation's zero point; the onnx_ir.Model holds the split."""
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])],
        [
            onnx.numpy_helper.from_array(np.array(0.1, np.float32), "s"),
            onnx.numpy_helper.from_array(np.array(128, np.uint8), "z"),
        ],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    model = ir.serde.deserialize_model(proto)
    before = len(model.graph.initializers)
    with pytest.raises(Refusal, match="zero point of an activation"):
        qlrewrite.retarget(model, split_shared=True, symmetric=True)
    assert len(model.graph.initializers) > before
    assert "pass a copy" in (qlrewrite.retarget.__doc__ or "")
