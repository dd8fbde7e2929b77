"""A search's winning layout as a training framework's own flags or config.

``export(framework, case)`` renders an ``ExportCase`` (the layout, and the model, cluster,
batch and stack it was costed under) for one of ``FRAMEWORKS``:

- ``megatron``: Megatron-LM core_v0.15.3 command-line flags (``sweeps.export.megatron``);
- ``nemo``: edits of a NeMo 2.0 (v2.4.0) NeMo-Run pretraining recipe, as Python
  (``sweeps.export.nemo``);
- ``torchtitan``: torchtitan v0.2.2 TOML (``sweeps.export.torchtitan``).

Each module names the release, repository and commit its names come from. A layout a
framework cannot express raises ``Unexpressible`` (a ``UserError``: one line, exit 2).
"""

from __future__ import annotations

from typing import Dict, Sequence

from sweeps.export import megatron, nemo, torchtitan
from sweeps.export.case import ExportCase, Source, Unexpressible

__all__ = ["FRAMEWORKS", "SOURCES", "ExportCase", "Source", "Unexpressible", "export", "case_of"]

_MODULES = {module.NAME: module for module in (megatron, nemo, torchtitan)}
#: The frameworks an export targets, by the name ``--export`` takes.
FRAMEWORKS = tuple(_MODULES)
#: Where each framework's names come from.
SOURCES: Dict[str, Source] = {name: module.SOURCE for name, module in _MODULES.items()}


def export(framework: str, case: ExportCase) -> str:
    """``case`` as ``framework``'s flags or config (text ending in a newline)."""
    if framework not in _MODULES:
        raise Unexpressible(framework, f"no such framework; choose one of {', '.join(FRAMEWORKS)}")
    return _MODULES[framework].render(case)


def case_of(setup, row, notes: Sequence[str] = ()) -> ExportCase:
    """The ``ExportCase`` of a ``search`` row (or an exhaustive frame's row) of the search
    ``setup`` (a ``sweeps.config.SearchSetup``), with ``notes`` for its header."""
    from sweeps.search.results import layout_of

    return ExportCase(layout=layout_of(row), model=setup.model, hardware=setup.hardware, devices=setup.spec.devices,
                      global_batch=setup.spec.global_batch, stack=setup.stack, stack_name=setup.spec.stack,
                      notes=tuple(notes))
