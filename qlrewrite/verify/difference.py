"""How far a difference at some nodes can carry to the graph outputs: the bound
``--verify`` states after a QOperator conversion.

A rewrite whose converted nodes may compute a value differently (a requantization that
rounds otherwise) changes the values downstream of them. :func:`output_bounds` follows
each value of the rewritten main graph in topological order, with two numbers: the
largest absolute difference it may have from the original's value (quantization steps
for an integer tensor, float units otherwise) and the largest magnitude it may take
(``inf`` when unknown). Each op carries a difference by how much it can amplify one:
data movement (Reshape, Transpose, Gather, Concat, Slice, ...) unchanged; Relu, Clip,
Max, Min, the pools and reductions that average non-expansive; Tanh, Sigmoid, Erf, Gelu
by their Lipschitz constants; Add / Sub sums; Mul by the other factor's magnitude;
MatMul / Gemm / Conv with a constant weight by the largest sum of |w| over one output,
plus float32 summation slack; Softmax by 1/2; DequantizeLinear by its largest scale;
QuantizeLinear in steps (a float difference D may move the rounding by ceil(D / scale)
steps, saturation caps it at the type's range). An op whose inputs are all identical
computes an identical output (same kernel, same inputs); an op without a rule that gets
a difference (LayerNormalization, Exp, a subgraph, ...) has an **unbounded** output:
``inf``, never a silent zero. Ops other than data movement and exact selections
(Max, Min, Relu, Clip, Abs, Neg) get :data:`ROUNDING_ULPS` units of float32 rounding at
their largest magnitude on top (each evaluation may round differently).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np
import onnx_ir as ir

from qlrewrite.kernels import dequantize
from qlrewrite.qdq import QDQ, NodeView, constant_tensor, iter_sites, site_view
from qlrewrite.toolkit import iter_graphs

__all__ = ["ROUNDING_ULPS", "Outcome", "output_bounds"]

INF = math.inf
_U = 2.0**-24  # float32 unit roundoff
#: Rounding allowed per float op with a differing input, in units of 2^-24 of its largest
#: magnitude: each of the two evaluations may be off by 32 ulps (MLAS's tanh, erf, exp
#: approximations are within a few).
ROUNDING_ULPS = 64
#: Lipschitz constants of elementwise ops (|f'| at most): Gelu's x Phi(x) peaks at 1.1289.
_LIPSCHITZ = {
    "Tanh": (1.0, 1.0),
    "Sigmoid": (0.25, 1.0),
    "Erf": (2 / math.sqrt(math.pi), 1.0),
    "Softsign": (1.0, 1.0),
}
_GELU = 1.13
#: Weights up to this size stay cached while the walk goes on; larger ones are dequantized
#: again when asked again (peak memory: one large weight, not all of them).
_CACHED_BYTES = 1 << 20
_MOVES = {
    "Identity",
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "Split",
    "Expand",
    "Tile",
    "DepthToSpace",
    "SpaceToDepth",
    "Dropout",
}
_SELECTS = {
    "Max",
    "Min",
    "Relu",
    "Clip",
    "Abs",
    "Neg",
    "MaxPool",
    "ReduceMax",
    "ReduceMin",
    "Concat",
    "Where",
}
_AVERAGES = {"AveragePool", "GlobalAveragePool", "ReduceMean", "GlobalMaxPool"}
_SHAPES = {"Shape", "Size"}

#: (difference, magnitude) of one value.
Spread = tuple[float, float]
_EXACT: Spread = (0.0, INF)


@dataclasses.dataclass
class Outcome:
    """The bound of each named main-graph output (``inf``: unbounded), and the measured
    values that exceed what their inputs' differences allow."""

    bounds: dict[str, float]
    violations: list[str] = dataclasses.field(default_factory=list)


def output_bounds(
    model: ir.Model, sources: Mapping[str, float], measured: Mapping[str, float] | None = None
) -> Outcome:
    """The largest difference each named main-graph output may have (``inf``: unbounded).

    ``sources``: the output name of each QuantizeLinear whose value may differ by some
    steps even when its input does not (a converted node's requantization). A source
    outside the main graph (in a subgraph or function) makes every output of a node
    holding one unbounded. ``measured``: value name -> the largest difference measured
    there (a run of both models): each is checked against the bound its inputs' measured
    differences give, then carried on instead of the bound.
    """
    walker = _Walker(model, sources, measured or {})
    for node in model.graph:
        walker.visit(node)
    bounds = {v.name: walker.bound(v) for v in model.graph.outputs if v.name}
    return Outcome(bounds, walker.violations)


class _Walker:
    """The spreads of the main graph's values, filled in node order."""

    def __init__(
        self, model: ir.Model, sources: Mapping[str, float], measured: Mapping[str, float]
    ) -> None:
        self.sources = dict(sources)
        self.measured = measured
        self.violations: list[str] = []
        main = {v.name for n in model.graph for v in n.outputs}
        self.inner = any(name not in main for name in self.sources)
        self.functions = {s.ref.function for s in iter_graphs(model) if s.ref.function}
        self.views = {
            id(site.node): site_view(model, site)
            for site in iter_sites(model, (QDQ,))
            if site.graph is model.graph
        }
        self.spreads: dict[int, Spread] = {}
        self.weights: dict[int, np.ndarray | None] = {}
        self.bounds: dict[int, float] = {}  # a measured value's bound (before measuring)

    def bound(self, value: ir.Value) -> float:
        """The bound of ``value`` from its inputs (not its own measured difference)."""
        return self.bounds.get(id(value), self.spread(value)[0])

    def spread(self, value: ir.Value | None) -> Spread:
        if value is None:
            return (0.0, 0.0)
        known = self.spreads.get(id(value))
        if known is not None:
            return known
        tensor = constant_tensor(value)
        if tensor is not None:
            return (0.0, _largest(tensor))
        return _EXACT  # a graph input: the same in both runs

    def visit(self, node: ir.Node) -> None:
        spreads = [self.spread(v) for v in node.inputs]
        if self._opaque(node):
            inner = self.inner or any(d > 0 for d, _ in spreads)
            result = (INF if inner else 0.0, INF)
        elif id(node) in self.views:
            result = self._qdq(self.views[id(node)], spreads)
        else:
            result = _float_op(node, spreads, self)
        for output in node.outputs:
            self.spreads[id(output)] = self._checked(output, result)

    def _checked(self, value: ir.Value, bound: Spread) -> Spread:
        """The measured difference of ``value`` when there is one (checked against the
        bound its inputs allow), else the bound."""
        found = self.measured.get(value.name or "")
        if found is None:
            return bound
        self.bounds[id(value)] = bound[0]
        if found > bound[0] * (1 + 1e-9):
            limit = "an exact value" if bound[0] == 0 else f"at most {bound[0]:.6g}"
            self.violations.append(
                f"'{value.name}' differs by {found:.6g} where the "
                f"differences of its inputs allow {limit}"
            )
        return (found, bound[1])

    def _opaque(self, node: ir.Node) -> bool:
        """A node with subgraphs or calling a model function."""
        has_graph = any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for a in node.attributes.values()
        )
        return has_graph or (node.domain, node.op_type) in self.functions

    def _qdq(self, view: NodeView, spreads: list[Spread]) -> Spread:
        d, scale = spreads[0][0], view.value_view(view.node.inputs[1], read=True)
        if any(s[0] > 0 for s in spreads[1:]) or scale is None or scale.array is None:
            return (INF, INF) if d > 0 or any(s[0] > 0 for s in spreads[1:]) else _EXACT
        scales = np.abs(scale.array)
        if scales.size == 0:  # an empty scale: an empty output, nothing to differ
            return _EXACT
        if not view.is_quantize:  # (q - zp) x scale, rounded to float32 once
            top = _steps_range(view.x_type) * float(scales.max())
            weight = self.weight(view.node.outputs[0]) if d == 0 else None
            if weight is not None:
                return (0.0, float(np.abs(weight).max()) if weight.size else 0.0)
            return (_rounded(d * float(scales.max()), top), top)
        top = _steps_range(view.output_type)
        ratio = d / float(scales.min()) * (1 + 2**-20) if d > 0 else 0.0  # x / scale rounds
        steps = math.ceil(ratio) if ratio < INF else INF
        steps += self.sources.get(view.node.outputs[0].name or "", 0.0)
        if steps > 0 and top == INF:  # a float8 output: no steps to count
            return (INF, INF)
        return (min(steps, top), top)

    def weight(self, value: ir.Value | None) -> np.ndarray | None:
        """The float values of a constant or of a DequantizeLinear of constants."""
        if value is None:
            return None
        if id(value) in self.weights:
            return self.weights[id(value)]
        found = self._weight(value)
        if found is None or found.nbytes <= _CACHED_BYTES:  # a large one is read again when
            self.weights[id(value)] = found  # asked again: one at a time in memory
        return found

    def _weight(self, value: ir.Value) -> np.ndarray | None:
        tensor = constant_tensor(value)
        if tensor is not None:
            return np.asarray(tensor.numpy(), dtype=np.float64)
        producer = value.producer()
        view = self.views.get(id(producer)) if producer is not None else None
        if view is None or view.is_quantize:
            return None
        parts = [constant_tensor(v) if v is not None else None for v in producer.inputs]
        if any(p is None for p in parts[:2]) or (len(parts) > 2 and parts[2] is None):
            return None
        arrays = [p.numpy() if p is not None else None for p in parts] + [None]
        return dequantize(
            arrays[0], arrays[1], arrays[2], axis=view.axis, block_size=view.block_size
        ).astype(np.float64)


def _largest(tensor: ir.TensorProtocol) -> float:
    try:
        array = np.asarray(tensor.numpy())
    except Exception:  # a tensor that cannot be read: nothing known of its magnitude
        return INF
    if array.size == 0 or array.dtype.kind not in "biuf":
        return 0.0 if array.size == 0 else INF
    return float(np.abs(array.astype(np.float64)).max())


def _steps_range(dtype: ir.DataType | None) -> float:
    """qmax - qmin of an integer type (inf for others)."""
    if dtype is None or not dtype.is_integer():
        return INF
    info = np.iinfo(dtype.numpy()) if dtype.bitwidth >= 8 else None
    if info is None:
        return float(2**dtype.bitwidth - 1)
    return float(int(info.max) - int(info.min))


def _rounded(d: float, m: float) -> float:
    """``d`` plus the rounding of one float op whose result is at most ``m``."""
    return d + ROUNDING_ULPS * _U * m if d > 0 else 0.0


def _float_op(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    op = node.op_type
    if op in _SHAPES:
        return _EXACT
    rule = _RULES.get(op)
    if rule is None and op in _MOVES:
        rule = _moves
    elif rule is None and op in _SELECTS | _AVERAGES:
        rule = _selects
    if rule is not None:
        return rule(node, spreads, walker)
    if all(d == 0 for d, _ in spreads):
        return _EXACT
    return (INF, INF)


def _moves(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """Data movement: the data input's difference; any other input must be exact."""
    if any(d > 0 for d, _ in spreads[1:]):
        return (INF, INF)
    return spreads[0]


def _selects(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """Selections and averages are non-expansive in each input (Where's condition must be
    exact)."""
    if node.op_type == "Where":
        if spreads[0][0] > 0:
            return (INF, INF)
        spreads = spreads[1:]
    return (max(d for d, _ in spreads), max(m for _, m in spreads))


def _lipschitz(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    factor, top = _LIPSCHITZ[node.op_type]
    d = spreads[0][0] * factor
    return (min(_rounded(d, top), 2 * top), top)  # |f| <= top: never more than 2 top apart


def _gelu(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """Gelu, FastGelu, BiasGelu: x Phi(x) of (x + bias): |gelu(x)| <= |x|."""
    d = _GELU * sum(s[0] for s in spreads)
    m = sum(s[1] for s in spreads)
    return (_rounded(d, m), m)


def _leaky(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    alpha = node.attributes.get_float("alpha", 0.01)
    factor = max(1.0, abs(alpha))
    return (spreads[0][0] * factor, spreads[0][1] * factor)


def _sum(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    m = sum(s[1] for s in spreads)
    return (_rounded(sum(s[0] for s in spreads), m), m)


def _product(a: Spread, b: Spread) -> float:
    """|a b - a' b'| at most: da |b| + db |a| + da db (a zero difference adds nothing)."""
    (da, ma), (db, mb) = a, b
    terms = [da * (mb + db) if da > 0 else 0.0, db * ma if db > 0 else 0.0]
    return sum(terms)


def _mul(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    a, b = spreads[0], spreads[1]
    m = a[1] * b[1]
    return (_rounded(_product(a, b), m), m)


def _div(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    divisor = walker.weight(node.inputs[1])
    if divisor is None or spreads[1][0] > 0 or not np.all(divisor):
        return _EXACT if spreads[0][0] == 0 and spreads[1][0] == 0 else (INF, INF)
    if divisor.size == 0:  # an empty output
        return _EXACT
    least = float(np.abs(divisor).min())
    m = spreads[0][1] / least
    return (_rounded(spreads[0][0] / least, m), m)


def _pow(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """x^p for a constant p >= 1: at most p (|x| + d)^(p - 1) d."""
    (d, m), exponent = spreads[0], walker.weight(node.inputs[1])
    if spreads[1][0] > 0 or exponent is None or exponent.size != 1:
        return (INF, INF) if d > 0 or spreads[1][0] > 0 else _EXACT
    p = float(exponent.reshape(-1)[0])
    if p < 1:
        return (INF, INF) if d > 0 else _EXACT
    top = m**p
    return (_rounded(p * (m + d) ** (p - 1) * d, top), top)


def _softmax(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """Each row of softmax's Jacobian sums to 2 p_i (1 - p_i) <= 1/2 in absolute value."""
    return (min(_rounded(spreads[0][0] / 2, 1.0), 1.0), 1.0)


def _layer_norm(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """No bound on the difference (it divides by a standard deviation that may be tiny);
    the magnitude is at most sqrt(N) |gamma| + |beta| when N, gamma and beta are known."""
    first = 2 if node.op_type == "SkipLayerNormalization" else 1  # (input, skip, gamma, ...)
    gamma = walker.weight(node.inputs[first]) if len(node.inputs) > first else None
    has_beta = node.op_type != "SimplifiedLayerNormalization" and len(node.inputs) > first + 1
    beta = walker.weight(node.inputs[first + 1]) if has_beta else None
    shape = node.inputs[0].shape if node.inputs[0] is not None else None
    norm = node
    axis = norm.attributes.get_int("axis", -1)
    m = INF
    if gamma is not None and shape is not None and all(isinstance(d, int) for d in shape[axis:]):
        count = math.prod(int(d) for d in shape[axis:])
        shift = float(np.abs(beta).max()) if beta is not None and beta.size else 0.0
        m = math.sqrt(count) * float(np.abs(gamma).max()) + shift
    exact = all(d == 0 for d, _ in spreads)
    return (0.0 if exact else INF, m)


def _matmul(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """x W with W constant: each output sums |w| of one column times x's difference."""
    (da, ma), (db, mb) = spreads[0], spreads[1]
    if da == 0 and db == 0:
        return _EXACT
    weight = walker.weight(node.inputs[1]) if db == 0 else None
    if weight is not None and weight.ndim >= 2 and weight.size == 0:
        return _EXACT  # K = 0 (each output sums nothing) or N = 0 (no output)
    if weight is not None and weight.ndim >= 2:
        column = float(np.abs(weight).sum(axis=-2).max())
        k = weight.shape[-2]
        return _summed(da * column, ma * column, k)
    k = _inner(node.inputs[0])
    if k is None:
        return (INF, INF)
    return _summed(k * _product((da, ma), (db, mb)), k * ma * mb, k)


def _summed(d: float, m: float, k: int) -> Spread:
    """A difference ``d`` through a float32 dot product of length ``k`` (its rounding: 2
    gamma(k) of the sum of |terms|, at most ``m``)."""
    gamma = k * _U / (1 - k * _U)
    return (d + 2 * gamma * m, m)


def _inner(value: ir.Value | None) -> int | None:
    shape = value.shape if value is not None else None
    if shape is None or len(shape) == 0 or not isinstance(shape[-1], int):
        return None
    return int(shape[-1])


def _weighted(
    node: ir.Node, spreads: list[Spread], walker: _Walker
) -> tuple[np.ndarray, Spread, Spread] | Spread:
    """Gemm / Conv: the constant weight, the data's and the bias's spreads; or the
    output's spread when it is exact or cannot be bounded."""
    (dx, mx), dw = spreads[0], spreads[1][0]
    bias = spreads[2] if len(spreads) > 2 else (0.0, 0.0)
    if dx == 0 and dw == 0 and bias[0] == 0:
        return _EXACT
    weight = walker.weight(node.inputs[1])
    if weight is None or dw > 0 or weight.ndim < 2:
        return (INF, INF)
    return weight, (dx, mx), bias


def _gemm(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """alpha A B + beta C with B constant."""
    found = _weighted(node, spreads, walker)
    if len(found) == 2 or found[0].ndim != 2:
        return found if len(found) == 2 else (INF, INF)
    weight, (da, ma), (dc, mc) = found
    if node.attributes.get_int("transB", 0):
        weight = weight.T
    alpha = abs(node.attributes.get_float("alpha", 1.0))
    beta = abs(node.attributes.get_float("beta", 1.0))
    if weight.size == 0:  # K = 0 (the product sums nothing) or N = 0 (no output)
        return (beta * dc, beta * mc)
    column = alpha * float(np.abs(weight).sum(axis=0).max())
    d, m = _summed(da * column, ma * column, weight.shape[0])
    return (d + beta * dc, m + beta * mc)


def _conv(node: ir.Node, spreads: list[Spread], walker: _Walker) -> Spread:
    """Conv with a constant weight: each output channel sums |w| of its filter."""
    found = _weighted(node, spreads, walker)
    if len(found) == 2:
        return found
    weight, (dx, mx), (db, mb) = found
    if weight.size == 0:  # no output channel, or filters of nothing: the bias alone
        return (db, mb)
    flat = np.abs(weight).reshape(weight.shape[0], -1)
    row = float(flat.sum(axis=1).max())
    d, m = _summed(dx * row, mx * row, flat.shape[1])
    return (d + db, m + mb)


_Rule = Callable[[ir.Node, list[Spread], _Walker], Spread]
_RULES: dict[str, _Rule] = {
    **dict.fromkeys(_LIPSCHITZ, _lipschitz),
    **dict.fromkeys(("Gelu", "FastGelu", "BiasGelu"), _gelu),
    **dict.fromkeys(("Add", "Sub", "Sum"), _sum),
    "LeakyRelu": _leaky,
    "Mul": _mul,
    "Div": _div,
    "Pow": _pow,
    "Softmax": _softmax,
    **dict.fromkeys(
        ("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization"),
        _layer_norm,
    ),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
}
