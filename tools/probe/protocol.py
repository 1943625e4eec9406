"""The runners' protocol (stdlib only: each runner's venv holds just its runtime and NumPy).

    python run_<runtime>.py MANIFEST.json RESULTS.jsonl [--skip N]

MANIFEST lists the cases (key, model file, feeds). The first line of RESULTS is
``{"meta": ...}`` (the runtime and its release); then each case writes ``{"start": key}``
before it is tried and its result line after, both flushed, so that a case that ends the
process is known to the driver, which records it as a crash and starts again after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def seeded_input(shape: list[int]) -> Any:
    """The float input "a" of a compared case at ``shape``: values in [0, 6), seeded (the
    same in the driver, which computes the ONNX reference, and in every runner)."""
    import numpy as np  # every runner's venv has NumPy

    return np.random.default_rng(1).uniform(0.0, 6.0, shape).astype(np.float32)


def rel_diff(got: Any, expected: Any) -> float:
    """The largest difference of two outputs relative to ``expected``'s largest value."""
    import numpy as np

    largest = float(np.abs(expected).max()) if expected.size else 0.0
    diff = float(np.abs(got.astype(np.float64) - expected).max()) if got.size else 0.0
    return diff / largest if largest else diff


def serve(argv: list[str], meta: dict, run_case: Callable[[dict], dict]) -> int:
    """Run ``run_case`` on each case of the manifest ``argv[0]``, appending to ``argv[1]``."""
    manifest, results = argv[0], argv[1]
    skip = int(argv[argv.index("--skip") + 1]) if "--skip" in argv else 0
    with open(manifest) as handle:
        cases = json.load(handle)["cases"]
    with open(results, "a") as out:
        if skip == 0:
            out.write(json.dumps({"meta": meta}) + "\n")
        for case in cases[skip:]:
            out.write(json.dumps({"start": case["key"]}) + "\n")
            out.flush()
            out.write(json.dumps(run_case(case)) + "\n")
            out.flush()
    return 0
