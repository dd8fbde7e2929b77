"""``python -m sweeps.cli``: the ``commscale`` command line."""

from sweeps.cli import main

main(prog_name="commscale")
