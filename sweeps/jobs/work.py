"""What a job asks of the cluster, as plain data: the task body and its context, the rows it
returns, the resources one task needs, the time cap of a point, and whether collective
points run among groups of ranks. ``sweeps.cluster`` turns this into Ray calls; nothing
here imports Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

import pyarrow as pa

from tasks.device import is_cuda
from tasks.identity import content_hash

__all__ = ["Resources", "CollectiveGroups", "Workload", "fingerprint_of", "key_of"]


@dataclass(frozen=True)
class Resources:
    """What one task needs of a worker: CPUs, GPUs and custom resources (standing in for
    GPUs on a laptop cluster, e.g. ``{"standin_gpu": 1}``)."""

    cpus: float = 1.0
    gpus: float = 0.0
    custom: Dict[str, float] = field(default_factory=dict)

    @classmethod
    def for_device(cls, device: str, cpus: float = 1.0) -> "Resources":
        """One CPU (or ``cpus``) and, on a CUDA device, one whole GPU."""
        return cls(cpus=cpus, gpus=1.0 if is_cuda(device) else 0.0)


@dataclass(frozen=True)
class CollectiveGroups:
    """Collective points (op in ``tasks.model.collectives.nccl.COLLECTIVE_OPS``) run among
    ``world`` ranks joined by torch.distributed (``backend`` "nccl" on CUDA, "gloo" on the
    CPU), one group per (world, placement); ``context`` is the ranks'
    ``tasks.measure.collectives.CollectiveContext``."""

    backend: str
    device: str
    context: Any


@dataclass
class Workload:
    """What to run on each chunk of points, and what a chunk needs from a worker.

    ``body(points, context)`` is a plain function of ``tasks`` returning rows of
    ``schema``; ``point_timeout_s`` caps the time of one point; a task runs at most
    ``max_chunk`` points (fewer when the cluster has more slots than points to fill); with
    ``collectives``, the collective points of a chunk run among groups of ranks instead of
    ``body``.
    """

    kind: str
    body: Callable[[pa.Table, Any], pa.Table]
    context: Any
    schema: pa.Schema
    schema_version: int
    resources: Resources = field(default_factory=Resources)
    point_timeout_s: float = 300.0
    collectives: Optional[CollectiveGroups] = None
    max_chunk: int = 512


def fingerprint_of(config: object) -> str:
    """A job's identity: the short content hash of what its results depend on."""
    return content_hash(config)


def key_of(content: object) -> str:
    """A point's key: the content hash (32 hex characters) of what identifies it (a list or
    a mapping; the same content gives the same key in every lake)."""
    return content_hash(content, length=32)
