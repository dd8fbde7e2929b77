"""The ``commscale`` command group: bad input becomes one line on stderr and exit status 2."""

from __future__ import annotations

import sys

import click

from sweeps.errors import UserError

__all__ = ["main"]

#: What click raises for a group given no command (click 8.2 and later): its help is shown.
_NO_ARGS = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _Group(click.Group):
    """Turns ``UserError``, and click's own usage errors (an unknown option, a missing
    argument, a value of the wrong type), into one line on stderr and exit status 2, no
    traceback and no usage block."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _NO_ARGS as exc:  # the group alone: its help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = f" (`{exc.ctx.command_path} -h` lists what it takes)" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message()}{where}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="commscale", prog_name="commscale", message="%(prog)s %(version)s")
def main() -> None:
    """commscale: how much of a Transformer's training step is communication."""
