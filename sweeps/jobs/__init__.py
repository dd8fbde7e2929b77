"""Work as plain data: one module per kind of job, each planning points with keys.

- ``work``: what a job asks of the cluster (``Workload``, ``Resources``) and the one
  identity and key function (``fingerprint_of``, ``key_of``);
- ``job``: a planned sweep (``SweepJob``);
- ``projection``, ``probe``, ``roi``, ``calibration``, ``search``, ``scaling``,
  ``winners``: the jobs of ``commscale run``, ``probe``, ``run sweep=roi``, ``calibrate``,
  ``search``, ``search --scaling`` and ``search --measure``;
- ``validation``: the work of ``commscale validate`` (published measurements predicted in
  this process, no Ray, and committed as kind ``validation``).

Nothing here imports Ray: ``sweeps.cluster`` runs what these describe.
"""

from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import CollectiveGroups, Resources, Workload, fingerprint_of, key_of

__all__ = ["SweepJob", "Workload", "Resources", "CollectiveGroups", "fingerprint_of", "key_of"]
