"""What a runtime accepts, as data: tables per target, read by the QL7xx rules.

``check --target SPEC`` names a runtime a model is deployed to; the rules of
:mod:`qlrewrite.rules.targets` then say what that runtime refuses or degrades.

=================  ===============================================================
module             holds
=================  ===============================================================
``forms``          the key of a quantized node in the tables (:func:`form_of`)
``tables``         the measured tables (``data/ort-X.Y.json``, ``data/openvino.json``),
                   read lazily, one release each (:class:`Table`)
``documented``     what TensorRT and QNN document, each fact with its source
``spec``           ``ort``, ``ort==1.20``, ``ort>=1.17``, ``openvino``, ``tensorrt``,
                   ``qnn``: parsed to a :class:`~qlrewrite.targets.spec.Target`
=================  ===============================================================

Nothing here is read unless a target is given: the tables are JSON files parsed on first
use, so ``check`` without ``--target`` starts as before. The tables are measured by
``tools/probe/drive.py`` (one-node models loaded and run in the real runtime); see
``docs/targets.md``.
"""
