"""Checking the models of a project: which files, under which settings, in how many processes.

``qlrewrite check PATHS`` resolves each model's configuration (:mod:`qlrewrite.checking.config`),
layers the command line's rule selection over it, checks the files (in worker processes
with ``jobs`` > 1, results in input order) and reports the ``per-node-ignores`` entries
that named no node or suppressed nothing in any model checked under their configuration
(QL901, once per entry).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from qlrewrite.checking.config import Settings, forget, settings_for
from qlrewrite.errors import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, InputError
from qlrewrite.findings import Report
from qlrewrite.io.reading import STDIN

__all__ = [
    "Selection",
    "Target",
    "check_targets",
    "collect_models",
    "default_jobs",
    "enabled_codes",
    "exit_code",
    "runtime_targets",
    "strictness",
    "unused_suppressions",
]


@dataclasses.dataclass(frozen=True)
class Selection:
    """The command line's rule options, layered over each model's configuration."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    strict: bool | None = None  # None: as the configuration says (default False)
    target: tuple[str, ...] = ()  # --target: replaces the configuration's target


@dataclasses.dataclass(frozen=True)
class Target:
    """One model file to check, with the settings that apply to it."""

    path: Path
    settings: Settings
    #: The model's bytes when it was read from stdin (``-``); None: read ``path``.
    data: bytes | None = dataclasses.field(default=None, repr=False)


def enabled_codes(settings: Settings, selection: Selection, path: Path) -> frozenset[str]:
    """The rules checked on ``path``: the configuration's selection, the command line's over
    it (as ruff layers them), less the file's ``per-file-ignores``."""
    from qlrewrite.rules.selection import parse_codes, select_rules

    base = select_rules(settings.select, settings.ignore, extend_select=settings.extend_select)
    codes = select_rules(
        selection.select, selection.ignore, extend_select=selection.extend_select, base=base
    )
    dropped = parse_codes(settings.ignored_for(path), "per-file-ignores")
    if not dropped:
        return codes
    return frozenset(c for c in codes if not any(c.startswith(p) for p in dropped))


def collect_models(
    paths: Iterable[Path],
    *,
    config: Path | None = None,
    isolated: bool = False,
    force_exclude: bool = False,
) -> list[Target | Report]:
    """Model files to check, in order, each with its settings.

    Files come as given; folders are searched recursively (``*.onnx``, sorted, hidden
    folders and ``exclude`` matches skipped). A folder without any model gives a Report
    with ``error`` (exit 2: a CI job pointed at nothing is a mistake). A file named on the
    command line is checked even if ``exclude`` matches it, unless ``force_exclude`` (as
    ruff's ``--force-exclude``, for pre-commit). Files named twice are checked once. ``-``
    is the model piped into stdin (read here, once).
    """
    forget()
    found: list[Target | Report] = []
    seen: set[str] = set()
    for path in paths:
        if str(path) == STDIN:
            if STDIN not in seen:  # stdin is read once
                seen.add(STDIN)
                found.append(_stdin_target(path, _settings(Path.cwd() / "-", config, isolated)))
            continue
        if path.is_dir():
            models, problems = _folder_models(path, config, isolated)
            found += problems
        else:
            models = [path]
            if force_exclude and _settings(path, config, isolated).excluded(path):
                models = []
        for model in models:
            key = os.path.realpath(model)
            if key not in seen:
                seen.add(key)
                found.append(Target(model, _settings(model, config, isolated)))
    return found


def _stdin_target(path: Path, settings: Settings) -> Target | Report:
    """``-``: the model piped into stdin, read now (bounded, into memory), under the
    settings of the current folder; a read that fails is that input's error."""
    from qlrewrite.io.model_io import read_stdin_model

    try:
        return Target(path, settings, data=read_stdin_model())
    except InputError as exc:
        return Report(path=str(path), load_error=str(exc).removeprefix(f"{path}: "))


def _folder_models(
    path: Path, config: Path | None, isolated: bool
) -> tuple[list[Path], list[Report]]:
    """The models of a folder to check, and the folder's problems: unreadable subfolders,
    no model at all, every model excluded (each a Report with ``folder``)."""
    every, unreadable = _models_under(path)
    problems = [Report(path=str(path), load_error=e, folder=True) for e in unreadable]
    models = [m for m in every if not _settings(m, config, isolated).excluded(m)]
    if not every and not unreadable:
        problems.append(Report(path=str(path), load_error="no .onnx files in folder", folder=True))
    elif not models:
        where = _settings(every[0], config, isolated).path
        problems.append(
            Report(
                path=str(path),
                load_error=f"every .onnx file in the folder is excluded (exclude in {where})",
                folder=True,
            )
        )
    return models, problems


def _settings(model: Path, config: Path | None, isolated: bool) -> Settings:
    return settings_for(model, config=config, isolated=isolated)


def _models_under(folder: Path) -> tuple[list[Path], list[str]]:
    """The ``*.onnx`` files under ``folder`` and the folders that could not be read.

    Iterative (any depth); symbolic links to folders are not followed (no loops); hidden
    folders are skipped.
    """
    models: list[Path] = []
    unreadable: list[str] = []
    stack = [str(folder)]
    while stack:
        root = stack.pop()
        try:
            with os.scandir(root) as entries:
                listed = list(entries)
        except OSError as exc:
            unreadable.append(f"{root}: cannot read folder ({exc.strerror or exc})")
            continue
        for entry in listed:
            if _is_dir(entry):  # a link to a folder is not followed (no loops)
                if not entry.name.startswith(".") and not entry.is_symlink():
                    stack.append(entry.path)
            elif entry.name.lower().endswith(".onnx"):
                models.append(Path(entry.path))
    return sorted(models, key=lambda p: p.parts), sorted(unreadable)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def runtime_targets(settings: Settings, selection: Selection) -> tuple[str, ...]:
    """The ``--target`` specs a model is checked against: the command line's, else its
    configuration's ``target``."""
    return selection.target or settings.target


def check_one(target: Target, selection: Selection, debug: bool = False) -> Report:
    """One model's finished report; a crash of the checker is that file's error, not the
    run's (``debug``: raise it)."""
    from qlrewrite.checking.checker import check_path
    from qlrewrite.targets.spec import parse_targets

    try:
        codes = enabled_codes(target.settings, selection, target.path)
        runtimes = parse_targets(runtime_targets(target.settings, selection))
        return check_path(
            target.path,
            codes=codes,
            per_node_ignores=target.settings.per_node_ignores,
            targets=runtimes,
            data=target.data,
        )
    except Exception as exc:  # a checker bug must not hide the other models' findings
        if debug:
            raise
        detail = (str(exc).strip().splitlines() or [""])[0]
        return Report(
            path=str(target.path),
            load_error=f"internal error while checking ({type(exc).__name__}: {detail}); "
            "run with --debug for the traceback and please report it",
        )


def check_targets(
    targets: Sequence[Target],
    selection: Selection,
    *,
    jobs: int = 1,
    debug: bool = False,
    advance: Callable[[], None] = lambda: None,
) -> list[Report]:
    """Reports of ``targets`` in their order; ``jobs`` > 1 checks in that many worker
    processes (each file is independent). ``advance`` is called once per file done."""
    if jobs <= 1 or len(targets) <= 1:
        reports = []
        for target in targets:
            reports.append(check_one(target, selection, debug))
            advance()
        return reports
    done: dict[int, Report] = {}
    common = {"selection": selection, "debug": debug, "done": done, "advance": advance}
    suspects = _run_workers(targets, range(len(targets)), workers=min(jobs, len(targets)), **common)
    for index in sorted(suspects):
        # A model killed its worker (an abort in native code on a hostile file): each file
        # that worker held is checked again in a process of its own, so that only the
        # guilty file is reported and the others are.
        if not _run_workers(targets, [index], workers=1, **common):
            continue
        done[index] = Report(
            path=str(targets[index].path),
            load_error="the checker's process died on this model (a crash in native code); "
            "please report it",
        )
        advance()
    return [done[index] for index in range(len(targets))]


#: Files handed to a worker before it has answered for the previous ones.
_IN_FLIGHT = 2


@dataclasses.dataclass
class _Workers:
    """The worker processes of one run: the indices not handed out yet (popped from the
    end), the indices each worker's pipe holds, and those held by workers that died."""

    targets: Sequence[Target]
    selection: Selection
    debug: bool
    pending: list[int]
    held: dict[Any, list[int]] = dataclasses.field(default_factory=dict)
    processes: dict[Any, Any] = dataclasses.field(default_factory=dict)
    dead: set[int] = dataclasses.field(default_factory=set)

    def start(self, context: Any) -> None:
        """Start one worker process with a pipe of its own and hand it its first files."""
        parent, child = context.Pipe()
        process = context.Process(
            target=_worker, args=(child, self.targets, self.selection, self.debug), daemon=True
        )
        process.start()
        child.close()
        self.held[parent], self.processes[parent] = [], process
        self.hand_out(parent)

    def hand_out(self, conn: Any) -> None:
        """Keep up to ``_IN_FLIGHT`` files at the worker; retire it when none are left.

        A worker that died since its last report refuses the send: the file stays
        pending, and the next ``receive`` reads what the worker sent before dying, then
        its end."""
        held = self.held[conn]
        try:
            while self.pending and len(held) < _IN_FLIGHT:
                conn.send(self.pending[-1])
                held.append(self.pending.pop())
            if not held:
                conn.send(None)
                self.retire(conn)
        except (BrokenPipeError, ConnectionResetError):
            return

    def retire(self, conn: Any) -> None:
        """Close a worker's pipe and wait for its process to end."""
        conn.close()
        self.processes.pop(conn).join()
        del self.held[conn]

    def receive(self, conn: Any, done: dict[int, Report], advance: Callable[[], None]) -> None:
        """Take one report from a worker into ``done`` and hand it more, or note that it
        died with the indices it held."""
        try:
            index, report = conn.recv()
        except (EOFError, OSError):  # the worker died
            self.dead.update(self.held[conn])
            self.retire(conn)
            return
        self.held[conn].remove(index)
        done[index] = report
        advance()
        self.hand_out(conn)

    def kill(self) -> None:
        """End every worker process still running."""
        for process in self.processes.values():
            process.kill()


def _run_workers(
    targets: Sequence[Target],
    indices: Iterable[int],
    *,
    selection: Selection,
    debug: bool,
    workers: int,
    done: dict[int, Report],
    advance: Callable[[], None],
) -> set[int]:
    """Check ``targets[indices]`` in ``workers`` processes into ``done``; the indices a
    worker held when it died are returned.

    Each worker has a pipe of its own and the parent hands out the files, so no lock is
    shared between processes: a worker that dies (even mid-write) cannot block the others,
    which a shared result queue (``ProcessPoolExecutor``) does on CPython 3.11.
    """
    context = multiprocessing.get_context("fork" if hasattr(os, "fork") else "spawn")
    # popped from the end: input order
    pool = _Workers(targets, selection, debug, pending=list(indices)[::-1])
    try:
        for _ in range(min(workers, len(pool.pending))):
            pool.start(context)
        while pool.held:
            for conn in multiprocessing.connection.wait(list(pool.held)):
                pool.receive(conn, done, advance)
            if pool.pending and not pool.held:  # every worker died: the rest go to a fresh one
                rest = pool.pending[::-1]
                pool.pending.clear()
                return pool.dead | _run_workers(
                    targets,
                    rest,
                    selection=selection,
                    debug=debug,
                    workers=1,
                    done=done,
                    advance=advance,
                )
    finally:
        pool.kill()
    return pool.dead


def _worker(conn: Any, targets: Sequence[Target], selection: Selection, debug: bool) -> None:
    """A worker process: check the files whose indices arrive on ``conn`` until None."""
    while (index := conn.recv()) is not None:
        conn.send((index, check_one(targets[index], selection, debug)))


def unused_suppressions(
    targets: Sequence[Target], reports: Sequence[Report], selection: Selection
) -> list[Report]:
    """One report per configuration file with one QL901 per ``per-node-ignores`` entry
    unused in the whole run (:func:`~qlrewrite.checking.suppress.unused_entry_findings`): decided
    here, in the parent, from every model's report (a worker process only records what
    each entry did on its models). A configuration is judged when QL901 is enabled for
    one of its models and every one of them could be read."""
    from qlrewrite.checking.suppress import STALE_RULE, unused_entry_findings

    by_path = {str(r.path): r for r in reports}
    members: dict[Path, tuple[Settings, list[Report]]] = {}
    unjudged: set[Path] = set()
    judging: set[Path] = set()
    for target in targets:
        settings, report = target.settings, by_path.get(str(target.path))
        if settings.path is None or not settings.per_node_ignores or report is None:
            continue
        members.setdefault(settings.path, (settings, []))[1].append(report)
        if report.load_error:  # it may hold the node or the finding: judge nothing
            unjudged.add(settings.path)
        elif STALE_RULE in enabled_codes(settings, selection, target.path):
            judging.add(settings.path)
    extra = []
    for path, (settings, checked) in members.items():
        if path in unjudged or path not in judging:
            continue
        findings = unused_entry_findings(settings.per_node_ignores, checked, str(path))
        if findings:
            extra.append(Report(path=str(path), findings=findings, config=True))
    return extra


def exit_code(
    reports: Sequence[Report],
    *,
    strict: bool | Callable[[Report], bool] = False,
    refused: bool = False,
    exit_zero: bool = False,
) -> int:
    """2 if any model was unreadable, else 1 on an error finding (any finding where
    ``strict`` holds) or a ``refused`` fix, else 0; ``exit_zero`` (``--exit-zero``) turns
    1 into 0, never 2."""
    is_strict = strict if callable(strict) else (lambda _report: strict)
    if any(r.load_error for r in reports):
        return EXIT_INPUT
    if refused or any(r.errors or (r.findings and is_strict(r)) for r in reports):
        return EXIT_OK if exit_zero else EXIT_FINDINGS
    return EXIT_OK


def diff_exit_code(reports: Sequence[Report], *, changed: bool) -> int:
    """``check --diff`` exits as ruff's: 1 when something would change (or a fix would be
    refused), else 0 whatever findings remain; an unreadable input is 2."""
    if any(r.load_error for r in reports):
        return EXIT_INPUT
    return EXIT_FINDINGS if changed else EXIT_OK


def strictness(targets: Sequence[Target], selection: Selection) -> Callable[[Report], bool]:
    """Per report: ``--strict`` / ``--no-strict``, else the ``strict`` of the model's
    configuration (of the configuration itself for its report: QL901 on its entries)."""
    settings = {str(t.settings.path): t.settings for t in targets if t.settings.path}
    settings |= {str(t.path): t.settings for t in targets}

    def strict(report: Report) -> bool:
        if selection.strict is not None:
            return selection.strict
        found = settings.get(str(report.path))
        return bool(found.strict) if found is not None else False

    return strict
