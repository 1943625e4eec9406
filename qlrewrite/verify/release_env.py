"""Proof on a release itself: a runtime release (``ort==1.16.3``, ``openvino==2026.4``) in
its own isolated environment, created on first use from the package registry and cached.

The environment lives in the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``,
then ``qlrewrite/runtimes/<package>-<version>``). It is made with ``uv`` when on PATH,
else ``python -m venv`` and pip, in a partial folder renamed into place only once the
runtime imports (a half-made environment is never used); a lock file serialises
concurrent first uses. The models run there in :mod:`qlrewrite.verify.release_child`
(NumPy and the runtime only), started as the verify child is: isolated (``-I``), in its
own process group, timed, memory-capped; its answer is read bounded and checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from qlrewrite.errors import InputError
from qlrewrite.targets.runtimes import RELEASED

__all__ = [
    "ReleaseSpec",
    "cache_root",
    "environment",
    "is_release",
    "parse_release",
]

_NAMES = {name: runtime for runtime in RELEASED for name in runtime.names}
_SPEC = re.compile(rf"^({'|'.join(map(re.escape, _NAMES))})==(\d+(?:\.\d+){{1,3}})$")
_PACKAGES = {name: str(runtime.package) for name, runtime in _NAMES.items()}
#: Seconds an environment's creation may take (a download of the runtime's wheel).
INSTALL_TIMEOUT = 900.0
_COMPLETE = ".complete"  # written last in a made environment


@dataclasses.dataclass(frozen=True)
class ReleaseSpec:
    """One runtime release: ``runtime`` (``ort`` or ``openvino``), its package and version."""

    runtime: str
    package: str
    version: str

    @property
    def name(self) -> str:
        """The environment's folder name: ``onnxruntime-1.16.3``."""
        return f"{self.package}-{self.version}"

    @property
    def requirements(self) -> list[str]:
        """What pip installs: the release (``X.Y``: its newest patch), and NumPy 1 for
        ONNX Runtime before 1.19 (built against NumPy 1; NumPy 2 cannot import it)."""
        parts = self.version.split(".")
        pin = f"=={self.version}.*" if len(parts) == 2 else f"=={self.version}"
        found = [f"{self.package}{pin}"]
        if self.package == "onnxruntime" and tuple(map(int, parts[:2])) < (1, 19):
            found.append("numpy<2")
        return found

    def __str__(self) -> str:
        return f"{self.runtime}=={self.version}"


def is_release(text: str) -> bool:
    """Whether ``text`` names a release (``ort==1.16.3``), not an installed runtime."""
    return "==" in text


def parse_release(text: str) -> ReleaseSpec:
    """``ort==1.16.3`` / ``onnxruntime==1.16.3`` / ``openvino==2026.4`` (InputError:
    anything else)."""
    match = _SPEC.match(text.strip())
    if match is None:
        raise InputError(
            f"{text}: not a runtime release (ort==X.Y[.Z] or openvino==X.Y[.Z], "
            "for instance ort==1.16.3)"
        )
    runtime = _NAMES[match[1]].key
    return ReleaseSpec(runtime, _PACKAGES[match[1]], match[2])


def cache_root() -> Path:
    """Where release environments are cached: ``$XDG_CACHE_HOME/qlrewrite/runtimes``
    (``~/.cache`` when unset or relative)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "qlrewrite" / "runtimes"


#: Makes an environment in a folder: (folder, requirements, release) -> None, raising
#: InputError with the reason (the default installs from the package registry).
Installer = Callable[[Path, Sequence[str], ReleaseSpec], None]


def environment(spec: ReleaseSpec, installer: Installer | None = None) -> Path:
    """The Python of ``spec``'s environment, made on first use (see the module)."""
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{spec}: cannot make the cache folder {root} ({exc.strerror})") from None
    final = root / spec.name
    with _locked(root / f"{spec.name}.lock", spec):
        if not (final / _COMPLETE).is_file():
            _make(final, spec, installer or install_from_registry)
    return _python(final)


@contextlib.contextmanager
def _locked(path: Path, spec: ReleaseSpec) -> Iterator[None]:
    """An exclusive lock on ``path`` (waits for a concurrent first use to finish)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise InputError(f"{spec}: cannot lock {path} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _make(final: Path, spec: ReleaseSpec, installer: Installer) -> None:
    """Make the environment in a partial folder, check it imports the runtime, mark it
    complete, rename it to ``final`` (a stale one is replaced)."""
    partial = final.with_name(f".{final.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        installer(partial, spec.requirements, spec)
        _check_imports(partial, spec)
        (partial / _COMPLETE).write_text(f"{spec}\n")
        shutil.rmtree(final, ignore_errors=True)
        os.rename(partial, final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _python(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _check_imports(folder: Path, spec: ReleaseSpec) -> None:
    module = "onnxruntime" if spec.runtime == "ort" else "openvino"
    command = [str(_python(folder)), "-I", "-c", f"import numpy, {module}"]
    _run(command, spec, f"the installed {spec.package} {spec.version} does not import")


def install_from_registry(folder: Path, requirements: Sequence[str], spec: ReleaseSpec) -> None:
    """A virtual environment in ``folder`` with ``requirements``, from the package
    registry: with ``uv`` when on PATH, else ``python -m venv`` and pip."""
    uv = shutil.which("uv")
    what = f"cannot install {' '.join(requirements)} from the package registry"
    if uv is not None:
        _run([uv, "venv", "-q", "--python", sys.executable, str(folder)], spec, what)
        python = str(_python(folder))
        _run([uv, "pip", "install", "-q", "--python", python, *requirements], spec, what)
        return
    _run([sys.executable, "-m", "venv", str(folder)], spec, what)
    pip = [str(_python(folder)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, *requirements], spec, what)


def _run(command: Sequence[str], spec: ReleaseSpec, what: str) -> None:
    """``command``, or InputError naming ``spec``, ``what`` failed and the tool's last line
    (no network, an unknown release)."""
    try:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=INSTALL_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"{spec}: {what} ({exc})") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        last = lines[-1][:300] if lines else f"exit {done.returncode}"
        raise InputError(f"{spec}: {what} (no network, or no such release?): {last}")
