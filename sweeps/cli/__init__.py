"""The ``commscale`` command line: parsing and rendering only, one module per command group.

    commscale run [GROUP=NAME | GROUP.FIELD=VALUE ...] [--lake PATH] [--address HOST:PORT] [--restart]
    commscale probe --points 1000 --sleep-ms 50 [--fail die_once:3] [--resource standin_gpu=1]
    commscale submit [OVERRIDES ...] --address HOST:PORT   # as a Ray job (or --dashboard http://HEAD:8265)
    commscale status [SWEEP]              # done, failed, pending per sweep, from the lake
    commscale lake verify|vacuum|upgrade  # maintenance
    commscale query "SELECT ... FROM projection" [--format table|csv|json|parquet]
    commscale report [--lake PATH] [--out DIR]   # figures, tables, provenance: HTML + Markdown
    commscale search [PRESET] [FIELD=VALUE ...]  # the layout with least exposed communication (Optuna)
    commscale timeline [PRESET] [FIELD=VALUE ...] [layout.FIELD=VALUE ...] [-o FILE]  # a step as a Perfetto trace
    commscale calibrate calibration=NAME  # measure a layer, fit operator models, judge them
    commscale validate [--runs FILE] [--dataset runs ...] [--format table|csv|json]  # vs published measurements
    commscale limits [PRESET] [FIELD=VALUE ...] [--format table|json]  # utilisation against training compute
    commscale codesign [PRESET] [FIELD=VALUE ...] [--format table|json]  # hardware and layout vs cluster cost
    commscale config [OVERRIDES ...]      # the composed config, as YAML
    commscale presets                     # the presets of each config group
    commscale --version                   # the installed version

Bad input ends with exit status 2 and one message naming the field, the value or the
statement; nothing in the lake changes. Shared options are spelled once (``options``), and
what every command prints alike is in ``render``.
"""

from sweeps.cli.calibrate import calibrate
from sweeps.cli.group import main
from sweeps.cli.codesign import codesign
from sweeps.cli.lake import lake, query, status
from sweeps.cli.limits import limits
from sweeps.cli.report import report
from sweeps.cli.run import config, presets, probe, run, submit
from sweeps.cli.search import search
from sweeps.cli.timeline import timeline
from sweeps.cli.validate import validate

for _command in (run, probe, submit, status, lake, query, report, search, timeline, calibrate, validate, limits,
                 codesign, config, presets):
    main.add_command(_command)

__all__ = ["main"]
