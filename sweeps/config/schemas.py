"""The dataclass schemas of the config groups, against which OmegaConf checks every YAML
preset and override: ``sweep`` (``SweepSpec``), ``calibration`` (``CalibrationSpec``),
``search`` (``SearchSpec``), and the model and hardware schemas of ``tasks.model.terms.specs``.
A YAML key that is not a field is rejected; a value of the wrong type is rejected; a field
left ``MISSING`` must be given.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from omegaconf import MISSING

from tasks.model.step.memory import USABLE_HBM_FRACTION
from tasks.model.search.space import LayoutSpace
from tasks.model.terms.stack import Stack
from tasks.model.terms.specs import HardwareProfile, TransformerModel

__all__ = ["LinkPlacement", "SweepMode", "RoiSpec", "Scenario", "SweepSpec", "LayerPoint", "Variations",
           "CalibrationSpec", "RunConfig", "ScalingSpec", "SearchSpec", "GROUPS", "OPTIONAL_GROUPS", "PRESET_SCHEMAS"]


class LinkPlacement(enum.Enum):
    """Which link tier a collective group uses.

    ``ideal``: every group on the scale-up tier (the study's assumption: results from
    four devices stand in for larger groups, method.md §5). ``placed``: a group wider
    than a node crosses the scale-out tier.
    """

    ideal = "ideal"
    placed = "placed"


class SweepMode(enum.Enum):
    projection = "projection"
    roi = "roi"


@dataclass
class RoiSpec:
    """Measurement settings of a ``mode: roi`` sweep.

    ``device`` is "cpu" or "cuda" (one GPU per kernel task); ``device_model`` names the
    device for the measurement keys ("auto": whatever the workers are; each row records
    the model it ran on). The ladder sizes the α-β fit of each collective.
    """

    device: str = "cpu"
    device_model: str = "auto"
    dtype: str = "bf16"
    passes: List[str] = field(default_factory=lambda: ["ig", "wg"])
    elementwise: bool = False
    collective_ops: List[str] = field(default_factory=lambda: ["all_reduce"])
    world: int = 2
    placement: str = "pack"
    ladder_bytes: List[int] = field(default_factory=lambda: [2**k for k in range(16, 27, 2)])
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 50
    rel_spread: float = 0.05
    time_cap_s: float = 5.0
    collective_repeats: int = 10
    point_timeout_s: float = 300.0


@dataclass
class Scenario:
    """One network scenario of a projection (method.md §5.5): where the groups' links
    are placed and how much interference slows the overlapped (DP) all-reduce (>= 1)."""

    links: LinkPlacement = LinkPlacement.ideal
    dp_slowdown: float = 1.0


@dataclass
class SweepSpec:
    """A grid of configurations and hardware scenarios (one preset of ``conf/sweep``).

    The grid is the cross product h x sl x b x tp x flop_vs_bw. The serialized analysis
    reads it at the smallest b; the overlapped analysis at ``overlap_tp`` by SL*B.
    ``highlights`` names model presets projected at the TP that Eq. 10 requires of
    them on this hardware (reference: Megatron-LM 8.3B at TP 8 on ``reference_hbm_gb``).
    """

    name: str = MISSING
    description: str = ""
    h: List[int] = MISSING
    sl: List[int] = MISSING
    b: List[int] = MISSING
    tp: List[int] = MISSING
    dp: int = 4
    head_dim: int = 128
    dtype_bytes: int = 2
    flop_vs_bw: List[float] = field(default_factory=lambda: [1.0])
    dp_slowdown: float = 1.0
    links: LinkPlacement = LinkPlacement.ideal
    # When set, the grid is projected under every scenario, each replacing (links,
    # dp_slowdown): the case study's DP links inside a node, across nodes, with interference.
    scenarios: List[Scenario] = field(default_factory=list)
    overlap_tp: int = 16
    highlights: List[str] = field(default_factory=list)
    reference_model: str = "megatron-8.3b"
    reference_tp: int = 8
    reference_hbm_gb: float = 32.0
    # What the sweep does: "projection" (the cost model) or "roi" (measure the region of
    # interest of the overlapped grid, h x sl x b at overlap_tp, on real devices).
    mode: SweepMode = SweepMode.projection
    roi: RoiSpec = field(default_factory=lambda: RoiSpec())


@dataclass
class LayerPoint:
    """One layer configuration (per-device shapes follow from ``tp``)."""

    h: int = MISSING
    heads: int = MISSING
    sl: int = MISSING
    b: int = MISSING
    tp: int = 1


@dataclass
class Variations:
    """Values each hyperparameter takes while the others stay at the baseline's."""

    sl: List[int] = field(default_factory=list)
    b: List[int] = field(default_factory=list)
    h: List[int] = field(default_factory=list)
    tp: List[int] = field(default_factory=list)


@dataclass
class CalibrationSpec:
    """One calibration preset. When ``h`` varies, heads = h / ``head_dim``."""

    name: str = MISSING
    description: str = ""
    device: str = "cpu"
    dtype: str = "fp32"
    causal: bool = True
    threads: int = 0                   # torch threads on the CPU (0: torch's default)
    baseline: LayerPoint = field(default_factory=LayerPoint)
    head_dim: int = 64
    vary: Variations = field(default_factory=Variations)
    held_out: List[LayerPoint] = field(default_factory=list)
    warmup: int = 2
    steps: int = 5                     # profiled steps per measurement (the fastest counts)
    plain_repeats: int = 12            # unprofiled steps per measurement
    time_cap_s: float = 10.0           # no re-measurement of a configuration starts after this long
    point_timeout_s: float = 600.0
    dropout: float = 0.1
    judged_from_ms: float = 10.0       # accuracy is judged on measured steps at least this long
    # Stability (tasks/measure/stability.py): the configurations are measured together in
    # `rounds` interleaved rounds; one whose fastest plain step no second round comes within
    # `max_drift` of, or that exceeds the sum of its classes' fastest times by more than
    # `max_excess`, is measured again up to `remeasure` times, then stored as unstable (and
    # not judged).
    rounds: int = 3
    max_drift: float = 0.10
    max_excess: float = 0.12
    remeasure: int = 2


@dataclass
class RunConfig:
    """A composed run: which presets were chosen and their (overridden) content."""

    hardware: HardwareProfile = MISSING
    sweep: SweepSpec = MISSING
    model: Optional[TransformerModel] = None
    # A measured calibration (``commscale calibrate``) whose operator models replace the
    # spec roofline; None projects with the hardware profile's spec.
    calibration: Optional[CalibrationSpec] = None


@dataclass
class ScalingSpec:
    """The scaling view: the best layout of ``space`` for each model and device count, at
    one global batch (sequences)."""

    models: List[str] = field(default_factory=lambda: ["llama3-70b", "gpt3"])
    devices: List[int] = field(default_factory=lambda: [2**k for k in range(3, 13)])
    global_batch: int = 2048


@dataclass
class SearchSpec:
    """One layout search (a preset of ``conf/search``).

    ``trials`` is the budget of completed trials; ``batch`` trials are asked at once and
    evaluated in parallel as Ray tasks; ``memory_fraction`` of HBM is usable; ``stack``
    names the software stack, a preset of ``conf/stack`` (``tasks.model.terms.stack``).
    """

    name: str = MISSING
    description: str = ""
    model: str = MISSING
    hardware: str = MISSING
    devices: int = MISSING
    global_batch: int = MISSING
    objective: str = "step_time"
    sampler: str = "auto"
    trials: int = 200
    batch: int = 8
    seed: int = 0
    memory_fraction: float = USABLE_HBM_FRACTION
    dtype_bytes: int = 2
    top: int = 10
    space: LayoutSpace = field(default_factory=LayoutSpace)
    scaling: ScalingSpec = field(default_factory=ScalingSpec)
    stack: str = "megatron-2022"


#: The groups of a run config, each one YAML preset of ``conf/GROUP/``.
GROUPS: Dict[str, type] = {"model": TransformerModel, "hardware": HardwareProfile, "sweep": SweepSpec,
                           "calibration": CalibrationSpec}
#: Groups that may be chosen as null (none).
OPTIONAL_GROUPS = ("model", "calibration")
#: The schema of every preset folder of ``conf/``.
PRESET_SCHEMAS: Dict[str, type] = {**GROUPS, "search": SearchSpec, "stack": Stack}
