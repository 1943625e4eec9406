"""qlrewrite: validate, constant-fold, convert and upgrade quantized ONNX models."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
