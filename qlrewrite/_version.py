"""The version of qlrewrite: its one home (``qlrewrite.__version__`` and the package
metadata, through pyproject.toml's dynamic version, read it)."""

__version__ = "0.1.0"
