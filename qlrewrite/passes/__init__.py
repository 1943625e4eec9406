"""Model rewrites as onnx_ir passes, one concern per module."""
