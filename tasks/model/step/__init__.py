"""A whole training step under a table of parallel layouts (imports ``terms``, ``kernels`` and
``collectives``); read in this order:

- ``plan``: the step's plan, every operation costed once, and ``step_columns``, which sums
  it into each layout's step time, exposed communication and memory;
- ``compute`` and ``comm``: one micro-batch's compute and its TP and PP communication, CP's
  exchange (``comm.cp_comm``) and a mixture of experts' dispatch and combine (``comm.ep_comm``);
- ``dp_comm``: the step's DP / ZeRO collectives, split into calls as the stack's engine runs them;
- ``context``: what every layout shares (model, cluster, batch, stack) and the layouts as arrays;
- ``memory``: model states and activations of one device;
- ``parts``: one layer of a step, piece by piece (a search's winners are measured against it);
- ``timeline``: one layout's step laid out in time (a Trace Event file).
"""

__all__ = ["plan", "compute", "comm", "dp_comm", "context", "memory", "parts", "timeline"]
