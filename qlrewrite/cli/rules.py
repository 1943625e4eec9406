"""`qlrewrite rules`: the catalogue of check rules, or one rule's explanation."""

from __future__ import annotations

import click

from qlrewrite.checking import render
from qlrewrite.cli._common import debug_option, out_console, output_format_option, run_command
from qlrewrite.errors import InputError
from qlrewrite.findings import Rule

__all__ = ["find_rule", "matching_rules", "rules_command"]


def find_rule(key: str) -> Rule:
    """The rule with code (any case) or name ``key``; InputError naming it otherwise."""
    from qlrewrite.rules import RULES

    wanted = key.strip()
    for rule in RULES.values():
        if wanted.upper() == rule.code or wanted.lower() == rule.name:
            return rule
    raise InputError(f"unknown rule '{key}' (run `qlrewrite rules` for the list)")


def matching_rules(key: str) -> list[Rule]:
    """The rules a code prefix names, as ``--select`` reads it (``QL4``, ``ql40``,
    ``QL4,QL5``, ``ALL``); InputError naming ``key`` when it names none."""
    from qlrewrite.rules import RULES
    from qlrewrite.rules.selection import parse_codes

    try:
        prefixes = parse_codes(key, "rules")
    except InputError:
        prefixes = []
    if not prefixes:
        raise InputError(
            f"unknown rule '{key}': no rule code, name or code prefix "
            "(run `qlrewrite rules` for the list)"
        )
    return [r for r in RULES.values() if any(r.code.startswith(p) for p in prefixes)]


@click.command(
    "rules",
    epilog="""\b
Examples:
  qlrewrite rules
  qlrewrite rules QL401
  qlrewrite rules axis-out-of-range
  qlrewrite rules QL4                      # every rule whose code starts with QL4
  qlrewrite rules --output-format json | jq '.[] | select(.severity == "warning") | .code'
""",
)
@click.argument("code", required=False, metavar="[CODE|NAME|PREFIX]")
@output_format_option(["text", "json"], "Output format.")
@debug_option
@run_command
def rules_command(code: str | None, output_format: str) -> None:
    """List the check rules, or explain rule CODE (a code or a name) with an example; a
    code prefix (QL4, as --select takes it) lists the rules it names."""
    from qlrewrite.rules import RULES

    fmt = output_format
    if code is None:
        _print_catalogue(list(RULES.values()), fmt)
        return
    try:
        rule = find_rule(code)
    except InputError:
        _print_catalogue(matching_rules(code), fmt)
        return
    if fmt == "json":
        click.echo(render.rules_json(rule), nl=False)
    elif out_console.is_terminal:
        render.print_rule(rule, out_console)
    else:
        click.echo(render.rule_text(rule), nl=False)


def _print_catalogue(rules: list[Rule], fmt: str) -> None:
    """The catalogue of ``rules``: JSON, a table on a terminal, one line a rule otherwise."""
    if fmt == "json":
        click.echo(render.rules_json(rules), nl=False)
    elif out_console.is_terminal:
        render.print_rules_table(rules, out_console)
    else:
        click.echo("\n".join(render.rules_lines(rules)))
