"""The ``commscale`` command group: bad input becomes one line on stderr and exit status 2."""

from __future__ import annotations

import click

from sweeps.errors import UserError

__all__ = ["main"]


class _Group(click.Group):
    """Turns ``UserError`` into one line on stderr and exit status 2, no traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="commscale", prog_name="commscale", message="%(prog)s %(version)s")
def main() -> None:
    """commscale: how much of a Transformer's training step is communication."""
