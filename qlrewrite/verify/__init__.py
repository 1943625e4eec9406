"""``--verify`` and ``compare``: ONNX Runtime in a child process, the bounds a rewrite
states, the deployed comparison.
"""
