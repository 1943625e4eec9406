"""The rules of the model as a whole: hygiene, node order, suppressions."""

from qlrewrite.rules.model import graph_order, hygiene, suppressions  # noqa: F401 (register their rules)
