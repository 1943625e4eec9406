"""``check --target`` on the QDQ ConvTranspose (issue 41): uint8 / int8 activations at opset 13,
uint8 / int8 / uint16 / int16 at 21, int8 and uint8 weights per tensor and per axis on axis
0 (C_in) and 1 (C_out / group: the output channel), zero points equal or differing
(``tools/probe/cases.py``: :func:`conv_transpose_cases`).

- Every case is in every table; ``check --target`` errors on it exactly where its row says
  the release or OpenVINO refused it or computed it otherwise than the reference, and
  nowhere else.
- Measured 2026-11-28: no ONNX Runtime release 1.15.1-1.32.0 fuses a QDQ ConvTranspose on
  the CPU provider (the DequantizeLinear stays, the ConvTranspose runs in float) and each
  computes every form right (1.15-1.17 load no opset 21 model: IR 10); OpenVINO 2026.4.1
  computes a ConvTranspose of 8-bit activations whose zero point is 0 with uint8 weights
  252-344% of the largest output off in every form (per tensor too), and with int8 weights
  per axis whose zero points differ 22% (axis 0) and 53% (axis 1) off; int8 weights per
  tensor or with one zero point, and every 16-bit activation form, are right. With the
  activation's zero point not 0 (what ORT's quantizer writes for inputs of both signs: its
  u8u8 CNN was a false alarm before the key said it), every form is right.
"""

from __future__ import annotations

import sys
from pathlib import Path

from table_rows import TABLES, disagreements, row_wrong

from qlrewrite.targets.tables import table

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "probe"))

import cases  # noqa: E402  (tools/probe)

CASES = list(cases.conv_transpose_cases())


def test_every_conv_transpose_form_is_in_every_table() -> None:
    assert len({c.key for c in CASES}) == len(CASES) == 100
    for name in TABLES:
        missing = {c.key for c in CASES} - set(table(name).forms)
        assert not missing, (name, sorted(missing)[:2])


def test_no_release_fuses_a_conv_transpose() -> None:
    for name in TABLES[:-1]:
        rows = [table(name).forms[c.key] for c in CASES]
        assert all(row.get("kernel") is None for row in rows if row.get("runs")), name


def test_check_errors_exactly_where_each_table_says(tmp_path: Path) -> None:
    wrong = disagreements(CASES, tmp_path, ["QL703", "QL706"])
    assert not wrong, wrong[:5]


def test_openvino_miscomputes_uint8_weights_and_differing_zero_points() -> None:
    """8-bit activations: every uint8-weight form and the per-axis int8 forms whose zero
    points differ; 16-bit activations (weights kept in float by OpenVINO): none."""
    rows = {c.key: table("openvino").forms[c.key] for c in CASES}
    wrong = {k for k, row in rows.items() if row_wrong(row)}
    eight_bit = {k for k in rows if "activation=UINT8 " in k or "activation=INT8 " in k}
    expected = {
        k
        for k in eight_bit
        if "activation_zero_point=zero" in k
        and (" UINT8 scale=" in k or ("per-axis" in k and "zero_points=differ" in k))
    }
    assert wrong == expected
