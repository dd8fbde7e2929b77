"""Configs from ``conf/`` presets and command-line overrides, checked before any work.

- ``schemas``: the dataclass schemas of every config group;
- ``compose``: the one compose routine (preset -> schema -> overrides -> dataclass);
- ``checks``: value checks, each naming the field and the value;
- ``run``, ``search``, ``calibration``, ``specs``: what a run, a layout search, a
  calibration, a hardware profile and a model must satisfy.
"""

from sweeps.config.calibration import fit_configs, validate_calibration
from sweeps.config.compose import list_presets, load_preset, preset_path
from sweeps.config.run import load_run_config, validate_run
from sweeps.config.schemas import (GROUPS, CalibrationSpec, LayerPoint, LinkPlacement, RoiSpec, RunConfig, ScalingSpec,
                                   Scenario, SearchSpec, SweepMode, SweepSpec, Variations)
from sweeps.config.search import DEFAULT_PRESET as DEFAULT_SEARCH_PRESET
from sweeps.config.search import SAMPLERS, SearchSetup, check_space, load_search

__all__ = ["GROUPS", "LinkPlacement", "SweepMode", "RoiSpec", "Scenario", "SweepSpec", "RunConfig", "CalibrationSpec",
           "LayerPoint", "Variations", "SearchSpec", "ScalingSpec", "SearchSetup", "SAMPLERS", "DEFAULT_SEARCH_PRESET",
           "load_run_config", "validate_run", "load_preset", "list_presets", "preset_path", "load_search",
           "check_space", "fit_configs", "validate_calibration"]
