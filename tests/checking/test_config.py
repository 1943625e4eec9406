"""Project configuration: found as ruff finds its own, every key and code checked, and the
command line layered on top (qlrewrite.checking.config, select_rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qlrewrite.checking import config
from qlrewrite.errors import InputError
from qlrewrite.rules import RULES
from qlrewrite.rules.selection import select_rules


@pytest.fixture(autouse=True)
def _fresh_cache():
    config._find_config.cache_clear()
    config.load_config.cache_clear()
    yield
    config._find_config.cache_clear()
    config.load_config.cache_clear()


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_found_from_the_model_folder_upwards(tmp_path: Path) -> None:
    project = _write(tmp_path / "pyproject.toml", '[tool.qlrewrite]\nignore = ["QL406"]\n')
    model = tmp_path / "models" / "deep" / "m.onnx"
    model.parent.mkdir(parents=True)
    settings = config.settings_for(model)
    assert settings.path == project and settings.ignore == ("QL406",)
    assert settings.root == tmp_path


def test_pyproject_without_the_table_is_passed_over(tmp_path: Path) -> None:
    outer = _write(tmp_path / "qlrewrite.toml", 'select = ["QL4"]\n')
    _write(tmp_path / "sub" / "pyproject.toml", '[project]\nname = "x"\n')
    assert config.find_config(tmp_path / "sub") == outer


def test_qlrewrite_toml_wins_over_pyproject_in_the_same_folder(tmp_path: Path) -> None:
    _write(tmp_path / "pyproject.toml", '[tool.qlrewrite]\nselect = ["QL5"]\n')
    own = _write(tmp_path / "qlrewrite.toml", 'select = ["QL4"]\n')
    assert config.find_config(tmp_path) == own
    assert config.settings_for(tmp_path / "m.onnx").select == ("QL4",)


def test_nearest_wins_and_no_file_gives_defaults(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "qlrewrite.toml", "strict = true\n")
    near = _write(tmp_path / "a" / "b" / ".qlrewrite.toml", "strict = false\n")
    assert config.settings_for(tmp_path / "a" / "b" / "m.onnx").path == near
    assert config.settings_for(tmp_path / "a" / "b" / "m.onnx").strict is False
    assert config.settings_for(tmp_path / "a" / "m.onnx").strict is True


def test_config_option_and_isolated(tmp_path: Path) -> None:
    _write(tmp_path / "qlrewrite.toml", 'ignore = ["QL5"]\n')
    other = _write(tmp_path / "elsewhere" / "ci.toml", 'ignore = ["QL6"]\n')
    model = tmp_path / "m.onnx"
    assert config.settings_for(model, config=other).ignore == ("QL6",)
    assert config.settings_for(model, isolated=True) == config.Settings()
    assert config.settings_for(model, isolated=True).path is None


def test_every_key_is_read(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "qlrewrite.toml",
        """
select = ["QL4", "QL5"]
extend-select = ["QL601"]
ignore = ["QL406"]
strict = true
exclude = ["legacy", "*.tmp.onnx"]
output-format = "github"
[per-file-ignores]
"models/det*.onnx" = ["QL501"]
[per-node-ignores]
"b1_DequantizeLinear" = ["QL406"]
"conv*_out" = "QL5"
""",
    )
    s = config.load_config(path)
    assert (s.select, s.extend_select, s.ignore, s.strict) == (
        ("QL4", "QL5"),
        ("QL601",),
        ("QL406",),
        True,
    )
    assert s.exclude == ("legacy", "*.tmp.onnx") and s.output_format == "github"
    assert s.per_file_ignores == {"models/det*.onnx": ("QL501",)}
    assert s.per_node_ignores == {"b1_DequantizeLinear": ("QL406",), "conv*_out": ("QL5",)}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('selct = ["QL4"]\n', "unknown key 'selct'"),
        ('select = ["QL999"]\n', "'select': unknown rule code or prefix 'QL999'"),
        ('ignore = ["XX1"]\n', "'ignore': unknown rule code or prefix 'XX1'"),
        ('[per-node-ignores]\nn = ["QL77"]\n', "'per-node-ignores' entry 'n'"),
        ('[per-file-ignores]\n"*.onnx" = ["nope"]\n', "unknown rule code or prefix 'nope'"),
        ("strict = 1\n", "'strict' must be true or false"),
        ("select = 4\n", "'select' must be a list of strings"),
        ('output-format = "xml"\n', "'output-format' must be text or full or json"),
        ("select = [\n", "not valid TOML"),
        ("per-node-ignores = 3\n", "'per-node-ignores' must be a table"),
    ],
)
def test_mistakes_are_one_line_naming_file_and_key(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path / "qlrewrite.toml", text)
    with pytest.raises(InputError) as info:
        config.load_config(path)
    message = str(info.value)
    assert message.startswith(str(path)) and needle in message and "\n" not in message


def test_pyproject_errors_name_the_table(tmp_path: Path) -> None:
    _write(tmp_path / "pyproject.toml", "[tool.qlrewrite]\nfoo = 1\n")
    with pytest.raises(InputError, match=r"pyproject.toml: \[tool.qlrewrite\]: unknown key 'foo'"):
        config.settings_for(tmp_path / "m.onnx")


def test_config_option_naming_a_pyproject_without_the_table(tmp_path: Path) -> None:
    path = _write(tmp_path / "pyproject.toml", "[project]\n")
    with pytest.raises(InputError, match="table not found"):
        config.settings_for(tmp_path / "m.onnx", config=path)


def test_exclude_and_per_file_ignores_globs_are_relative_to_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "qlrewrite.toml",
        """
exclude = ["legacy", "build/*", "*.tmp.onnx"]
[per-file-ignores]
"models/det*.onnx" = ["QL501", "QL6"]
"*/ocr/*" = ["QL406"]
""",
    )
    s = config.load_config(path)
    assert s.excluded(tmp_path / "legacy" / "a" / "m.onnx")
    assert s.excluded(tmp_path / "legacy")
    assert s.excluded(tmp_path / "build" / "m.onnx")
    assert s.excluded(tmp_path / "x" / "y.tmp.onnx")
    assert not s.excluded(tmp_path / "models" / "legacy2.onnx")
    assert not s.excluded(tmp_path.parent / "legacy" / "m.onnx")  # outside the project
    assert s.ignored_for(tmp_path / "models" / "det_v2.onnx") == ("QL501", "QL6")
    assert s.ignored_for(tmp_path / "a" / "ocr" / "m.onnx") == ("QL406",)
    assert s.ignored_for(tmp_path / "models" / "rec.onnx") == ()


def test_selection_layers_as_ruff() -> None:
    every = set(RULES)
    from_config = select_rules(["QL4"], ["QL406"], extend_select=["QL601"])
    assert from_config == {c for c in every if c.startswith("QL4") and c != "QL406"} | {"QL601"}
    # the command line's --ignore adds to the configuration's selection
    assert select_rules(ignore=["QL401"], base=from_config) == from_config - {"QL401"}
    # --select starts afresh; --extend-select adds to the layer below
    assert select_rules(["QL5"], base=from_config) == {c for c in every if c.startswith("QL5")}
    assert select_rules(extend_select=["QL406"], base=from_config) == from_config | {"QL406"}
    # a more specific ignore wins over a select; a more specific select over an ignore
    assert "QL406" not in select_rules(["QL4"], ["QL40"])
    assert select_rules(["QL406"], ["QL4"]) == {"QL406"}
    with pytest.raises(InputError, match="extend_select: unknown rule code or prefix 'QL0'"):
        select_rules(extend_select=["QL0"])
