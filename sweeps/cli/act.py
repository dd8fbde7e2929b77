"""Acting on a search's answer: ``--tokens``, ``--price-per-device-hour`` and ``--export``.

    commscale search small --exhaustive --tokens 1T --price-per-device-hour 2.5
    commscale search default --export megatron      # the winner as Megatron-LM flags
    commscale search default --export nemo          # ... as a NeMo 2.0 recipe's edits
    commscale search default --export torchtitan    # ... as torchtitan TOML

``--tokens N`` adds, for the winner and each runner-up shown, the days to train on N tokens
(``tasks.model.terms.train_time``, from each row's own tokens/s per device) and, with a price,
what it costs. ``--export`` prints the winner in the framework's own terms
(``sweeps.export``), its header carrying the same figures. Parsing and rendering only.

Bad values (no tokens, a negative price, an unknown framework, a price without tokens,
these options with --scaling, an export of a Pareto front) end with one line and exit
status 2 before any work; a winner the framework cannot express ends the same way after
the search, naming what it cannot express.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from sweeps.errors import ConfigError, UserError
from sweeps.export import FRAMEWORKS

__all__ = ["Act", "act_options", "check_act", "act", "tokens_text"]

#: Suffixes ``--tokens`` takes: 15T is 15 x 10^12 tokens.
TOKEN_SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _tokens(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[float]:
    """A positive, finite token count: a number (1.5e13) or one with a suffix (15T, 300B)."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([KMBT]?)\s*", value, flags=re.IGNORECASE)
    try:
        tokens = float(match.group(1)) * TOKEN_SUFFIXES.get(match.group(2).upper(), 1.0) if match else math.nan
    except ValueError:
        tokens = math.nan
    if not (math.isfinite(tokens) and tokens > 0):
        raise ConfigError("--tokens", value, "must be a positive number of training tokens, e.g. 15T or 1.5e13")
    return tokens


def _price(ctx: click.Context, param: click.Parameter, value: Optional[float]) -> Optional[float]:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError("--price-per-device-hour", value, "must be a positive price (USD per device-hour)")
    return value


def act_options(command):
    """The three options, for ``commscale search``."""
    command = click.option("--export", "export_to", type=click.Choice(FRAMEWORKS), default=None,
                           help="Print the winning layout as that framework's flags or config.")(command)
    command = click.option("--price-per-device-hour", "price", type=float, default=None, callback=_price,
                           help="With --tokens: the cost of the time to train, at this price (USD) per "
                                "device-hour.")(command)
    return click.option("--tokens", type=str, default=None, callback=_tokens,
                        help="Total training tokens (15T, 1.5e13): adds the days to train on them for the layouts "
                             "shown.")(command)


@dataclass(frozen=True)
class Act:
    """What to do with the answer: the framework to export to, the tokens to train on and the
    price of a device-hour (each None where not asked)."""

    export_to: Optional[str] = None
    tokens: Optional[float] = None
    price: Optional[float] = None

    @property
    def asked(self) -> bool:
        return self.export_to is not None or self.tokens is not None


def check_act(action: Act, setup, *, scaling: bool) -> None:
    """Refuse, before any work, what the options cannot do together."""
    from tasks.model.search.rows import OBJECTIVES

    if action.price is not None and action.tokens is None:
        raise UserError("--price-per-device-hour: prices the time to train on --tokens; give --tokens too")
    if scaling and action.asked:
        raise UserError("--tokens, --export: act on one search's winner; not with --scaling")
    if action.export_to and len(OBJECTIVES[setup.spec.objective]) > 1:
        raise UserError(f"--export {action.export_to}: objective {setup.spec.objective} has a front, no single "
                        "winner; search one objective (objective=step_time)")


def _figures(setup, shown: pd.DataFrame, action: Act) -> pd.DataFrame:
    """Days (and cost) to train on the tokens, per layout shown, from its tokens/s per device."""
    from tasks.model.terms.train_time import train_cost, train_days

    days = train_days(action.tokens, shown["tokens_per_s_per_device"].to_numpy(), setup.spec.devices)
    cost = train_cost(days, setup.spec.devices, action.price) if action.price is not None else None
    return shown.assign(train_days=days, train_cost=cost)


def tokens_text(tokens: float) -> str:
    """A token count as ``--tokens`` takes it: 1.5T, 300B, 999."""
    suffix, unit = next(((s, u) for s, u in reversed(TOKEN_SUFFIXES.items()) if tokens >= u), ("", 1.0))
    return f"{tokens / unit:.4g}{suffix}"


def _time_table(figures: pd.DataFrame, action: Act) -> Table:
    from sweeps.search.results import layout_of

    priced = action.price is not None
    title = f"Time to train {tokens_text(action.tokens)} tokens" + (f" at {action.price:,.2f} USD per device-hour"
                                                                    if priced else "")
    table = Table(title=title, title_justify="left")
    for name in ("layout", "tokens/s/device", "days", *(("cost USD",) if priced else ())):
        table.add_column(name, justify="left" if name == "layout" else "right", no_wrap=True)
    for _, row in figures.iterrows():
        cells = [layout_of(row).describe(), f"{row['tokens_per_s_per_device']:,.0f}", f"{row['train_days']:,.1f}"]
        table.add_row(*cells, *((f"{row['train_cost']:,.0f}",) if priced else ()))
    return table


def _formula(setup, action: Act) -> str:
    devices = setup.spec.devices
    line = (f"days = {tokens_text(action.tokens)} tokens / (tokens/s/device x {devices} devices) / 86,400 s, from "
            "each row's tokens/s per device")
    return line + (f"; cost = days x 24 h x {devices} devices x {action.price:,.2f} USD" if action.price else "")


def _notes(setup, winner, action: Act) -> List[str]:
    """The export's header lines: the study, the winner's figures, its time and cost to train."""
    notes = [f"commscale search {setup.study_name}: the best layout by {setup.spec.objective}; step "
             f"{winner['step_time_s']:.4g} s, {winner['tokens_per_s_per_device']:,.0f} tokens/s per device, "
             f"{winner['memory_per_device_bytes'] / 1e9:.1f} GB per device"]
    if action.tokens is not None:
        line = f"time to train {tokens_text(action.tokens)} tokens: {winner['train_days']:,.1f} days"
        if action.price is not None:
            line += f", {winner['train_cost']:,.0f} USD at {action.price:,.2f} USD per device-hour"
        notes.append(line)
    return notes


def act(out: Console, setup, top: pd.DataFrame, action: Act) -> None:
    """Print the time to train of the layouts the search showed of ``top`` (its distinct
    feasible layouts best first, or its Pareto front) and the winner's export, as ``action``
    asks; ``UserError`` if the framework cannot express the winner."""
    from sweeps.export import case_of, export
    from tasks.model.search.rows import OBJECTIVES

    if not action.asked:
        return
    shown = top if len(OBJECTIVES[setup.spec.objective]) > 1 else top.head(setup.spec.top)
    if shown.empty:
        out.print("No feasible layout to act on")
        return
    figures = shown
    if action.tokens is not None:
        figures = _figures(setup, shown, action)
        out.print(_time_table(figures, action))
        out.print(_formula(setup, action), soft_wrap=True, highlight=False)
    if action.export_to is not None:
        text = export(action.export_to, case_of(setup, figures.iloc[0], _notes(setup, figures.iloc[0], action)))
        out.print(f"\nThe winner for {action.export_to}:", highlight=False)
        click.echo(text, nl=False)
