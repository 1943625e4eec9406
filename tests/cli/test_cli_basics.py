"""The command group: --version, --help (python -m and the console script), one-line
summaries, examples in every command's help, exit 2 on usage errors."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys

import pytest
from model_io_fixtures import cli

from qlrewrite import __version__
from qlrewrite.cli import main

EXPECTED_COMMANDS = {"info", "check", "fold", "convert", "upgrade"}


def test_version() -> None:
    result = cli("--version")
    assert result.exit_code == 0
    first = result.stdout.splitlines()[0]
    assert first == f"qlrewrite, version {__version__}"  # what it was, then the dependencies
    assert __version__ == importlib.metadata.version("qlrewrite")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", __version__)


def test_version_names_the_dependencies_without_importing_them() -> None:
    """onnx, onnx-ir and onnxruntime versions as installed (the rules and --verify depend
    on them), read from metadata: onnxruntime is not imported by --version."""
    code = (
        "import sys; from qlrewrite.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "print('imported' if 'onnxruntime' in sys.modules else 'not imported')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    for name in ("onnx", "onnx-ir", "onnxruntime"):
        expected = importlib.metadata.version(name)
        assert any(line.strip().startswith(f"{name} {expected}") for line in lines), lines
    assert lines[-1] == "not imported"


def _commands_section(help_text: str) -> dict[str, str]:
    """name -> summary (continuation lines joined) from the Commands: section."""
    section = help_text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    found: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        match = re.match(r"^  (\S+)\s+(.*)$", line)
        if match:
            name = match.group(1)
            found[name] = match.group(2)
        elif name:
            found[name] += " " + line.strip()
    return found


def _check_group_help(text: str) -> None:
    commands = _commands_section(text)
    assert set(commands) >= {c for c in EXPECTED_COMMANDS if c in main.commands}
    assert set(commands) == set(main.commands)  # no placeholders: only registered ones
    for name, command in main.commands.items():
        summary = commands[name]
        assert summary, name
        # the whole first sentence: not cut at the terminal width
        assert summary == command.get_short_help_str(limit=200), name
    assert (
        "Summarise a model's Q/DQ and weight-only nodes (MatMulNBits, GatherBlockQuantized), "
        "opsets and initializers (reads no weights)." in (commands["info"])
    )
    assert "Examples:" in text and "qlrewrite info model.onnx" in text
    assert "Exit codes: 0 ok, 1 findings or refusal, 2 usage error or unreadable input." in text


def test_python_m_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "qlrewrite", "--help"], capture_output=True, text=True, check=True
    )
    _check_group_help(done.stdout)


def test_console_script_help() -> None:
    script = shutil.which("qlrewrite")
    if script is None:
        pytest.skip("the qlrewrite console script is not on PATH")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, check=True)
    _check_group_help(done.stdout)
    assert done.stdout.startswith("Usage: qlrewrite ")


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_help_ends_with_examples(name: str) -> None:
    result = cli(name, "--help")
    assert result.exit_code == 0
    tail = result.stdout.rsplit("Examples:", 1)
    assert len(tail) == 2, result.stdout
    assert f"qlrewrite {name}" in tail[1]


def test_info_help_lists_its_options() -> None:
    text = cli("info", "--help").stdout
    assert "--format [text|json]" in text and "--debug" in text
    assert "qlrewrite info model.onnx --format json" in text


@pytest.mark.parametrize(
    "args",
    [("no-such-command",), ("info",), ("info", "x.onnx", "--format", "xml"), ("--nope",)],
)
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_the_lazy_command_table_matches_each_command() -> None:
    """``--help`` lists the commands from a table without importing them: each summary
    and name there is the command's own."""
    import click

    from qlrewrite.cli import COMMANDS, main

    ctx = click.Context(main)
    for name, (_, _, summary) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command.get_short_help_str(limit=200) == summary


def test_version_and_help_import_no_onnx_or_numpy() -> None:
    """Start-up: ``--version`` and ``--help`` load no command, onnx, onnx_ir or NumPy."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom qlrewrite.__main__ import run\n"
        "sys.argv = ['qlrewrite', sys.argv[1]]\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "heavy = {'onnx', 'onnx_ir', 'numpy', 'qlrewrite.pipeline', 'qlrewrite.cli.check'}\n"
        "print(sorted(heavy & set(sys.modules)), file=sys.stderr)\n"
    )
    for flag in ("--version", "--help"):
        done = subprocess.run(
            [sys.executable, "-c", code, flag], capture_output=True, text=True, check=False
        )
        assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr
