"""`qlrewrite rules`: the catalogue of check rules, or one rule's explanation."""

from __future__ import annotations

import click

from qlrewrite import render
from qlrewrite.cli._common import debug_option, out_console, run_command
from qlrewrite.errors import InputError
from qlrewrite.findings import Rule

__all__ = ["find_rule", "rules_command"]


def find_rule(key: str) -> Rule:
    """The rule with code (any case) or name ``key``; InputError naming it otherwise."""
    from qlrewrite.rules import RULES

    wanted = key.strip()
    for rule in RULES.values():
        if wanted.upper() == rule.code or wanted.lower() == rule.name:
            return rule
    raise InputError(f"unknown rule '{key}' (run `qlrewrite rules` for the list)")


@click.command(
    "rules",
    epilog="""\b
Examples:
  qlrewrite rules
  qlrewrite rules QL401
  qlrewrite rules axis-out-of-range
  qlrewrite rules --format json | jq '.[] | select(.severity == "warning") | .code'
""",
)
@click.argument("code", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@debug_option
@run_command
def rules_command(code: str | None, fmt: str) -> None:
    """List the check rules, or explain rule CODE (a code or a name) with an example."""
    from qlrewrite.rules import RULES

    rules = [find_rule(code)] if code else list(RULES.values())
    if fmt == "json":
        click.echo(render.rules_json(rules[0] if code else rules), nl=False)
    elif code:
        if out_console.is_terminal:
            render.print_rule(rules[0], out_console)
        else:
            click.echo(render.rule_text(rules[0]), nl=False)
    elif out_console.is_terminal:
        render.print_rules_table(rules, out_console)
    else:
        click.echo("\n".join(render.rules_lines(rules)))
