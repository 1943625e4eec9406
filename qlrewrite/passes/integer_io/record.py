"""What ``integer-io`` writes in a model's metadata: one ``metadata_props`` entry per
input or output made integer, read back by ``integer-io --to float``.

Key: ``qlrewrite.integer_io.input.<name>`` or ``qlrewrite.integer_io.output.<name>``
(``<name>``: the graph input's or output's name, unchanged by the rewrite). Value: a JSON
object, ``"format": 1``, ``"writer": "qlrewrite"``; ``quantized_type`` and ``float_type``
(ONNX element type names); ``scale``: the scale exactly (``float.hex``) and
``scale_value`` (decimal, for people); ``zero_point`` (an integer, or null when the node
had none); and ``node``: the QuantizeLinear or DequantizeLinear removed (its name,
domain, integer attributes, position in the graph, the names of its scale, zero point
and quantized value, and that value's declared type) so the reverse writes it back as
it was.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import onnx_ir as ir

from qlrewrite.errors import Refusal

__all__ = ["FORMAT", "KEY_PREFIX", "Record", "key_of", "parse", "records"]

KEY_PREFIX = "qlrewrite.integer_io."
FORMAT = 1
_WRITER = "qlrewrite"
_FIELDS = ("quantized_type", "float_type", "scale", "scale_type", "zero_point", "node")


@dataclasses.dataclass
class Record:
    """One input's or output's quantization, as written in the metadata."""

    role: str  # "input" or "output"
    name: str
    quantized_type: ir.DataType
    float_type: ir.DataType
    scale: np.ndarray  # the scale tensor's values, its dtype and shape
    zero_point: np.ndarray | None
    node: dict[str, Any]

    def to_json(self) -> str:
        """The metadata value (see module)."""
        zero = None if self.zero_point is None else int(self.zero_point.reshape(-1)[0])
        value = float(self.scale.reshape(-1)[0])
        document = {
            "format": FORMAT,
            "writer": _WRITER,
            "quantized_type": self.quantized_type.name,
            "float_type": self.float_type.name,
            "scale": value.hex(),
            "scale_value": repr(value),
            "scale_type": ir.DataType.from_numpy(self.scale.dtype).name,
            "scale_shape": list(self.scale.shape),
            "zero_point": zero,
            "zero_point_shape": None if self.zero_point is None else list(self.zero_point.shape),
            "node": self.node,
        }
        return json.dumps(document, sort_keys=True)


def key_of(role: str, name: str) -> str:
    """The metadata key of input or output ``name``."""
    return f"{KEY_PREFIX}{role}.{name}"


def records(model: ir.Model) -> list[Record]:
    """Every record of ``model``'s metadata; raises Refusal naming each entry under the
    prefix that this tool did not write or cannot read."""
    found, problems = [], []
    for key, text in model.metadata_props.items():
        if not key.startswith(KEY_PREFIX):
            continue
        try:
            found.append(parse(key, text))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            problems.append(f"{key!r}: {error}")
    if problems:
        raise Refusal("metadata not written by qlrewrite integer-io: " + "; ".join(problems))
    return found


def parse(key: str, text: str) -> Record:
    """The record of one entry; raises ValueError (or KeyError, TypeError) on anything
    else."""
    role, _, name = key[len(KEY_PREFIX) :].partition(".")
    document = json.loads(text)
    if role not in ("input", "output") or not name:
        raise ValueError("not an input or output key")
    if document.get("writer") != _WRITER or document.get("format") != FORMAT:
        raise ValueError(f"writer/format is not {_WRITER}/{FORMAT}")
    missing = [f for f in _FIELDS if f not in document]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    scale_type = ir.DataType[document["scale_type"]]
    scale = np.array(float.fromhex(document["scale"]), dtype=scale_type.numpy())
    quantized = ir.DataType[document["quantized_type"]]
    zero = document["zero_point"]
    zero_point = None if zero is None else np.array(int(zero), dtype=quantized.numpy())
    return Record(
        role,
        name,
        quantized,
        ir.DataType[document["float_type"]],
        scale.reshape(document.get("scale_shape") or ()),
        None if zero_point is None else zero_point.reshape(document.get("zero_point_shape") or ()),
        dict(document["node"]),
    )
