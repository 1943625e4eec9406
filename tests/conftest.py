"""Shared pytest set-up. Model builders live in tests/example_models.py (one-node models;
the rules' examples name them, tests/model_specs.py), tests/qoperator_models.py,
tests/ort_quantized.py (ONNX Runtime's quantizer) and tests/model_io_fixtures.py.

The tests are laid out like the package (tests/io, tests/passes, ...); a test module may
import another's builders by its name (``from test_downgrade import _blocked_model``)
whichever subset runs: every test folder is on ``sys.path``.

Hypothesis runs derandomized in CI (``CI`` set), so a landing is reproducible; locally
each run explores new examples. ``HYPOTHESIS_PROFILE`` picks a profile explicitly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_TESTS = Path(__file__).resolve().parent
sys.path.extend(str(p) for p in sorted(_TESTS.iterdir()) if p.is_dir() and p.name[0].isalpha())

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default")
)


@pytest.fixture
def in_tmp_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The test runs in ``tmp_path``, with no configuration file cached before or after."""
    from qlrewrite.checking import config

    monkeypatch.chdir(tmp_path)
    config.forget()
    yield tmp_path
    config.forget()
