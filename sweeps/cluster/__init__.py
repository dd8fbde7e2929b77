"""The only package of the product that imports Ray: a session on an embedded or joined
cluster (``session``, with ``reaper``), chunks of points as tasks and collectives among
actor groups (``dispatch``, ``groups``), jobs submitted to a cluster (``submit``), what a
cluster can run (``capacity``) and whether an address answers (``reach``, ``gcs``); the
programs it runs as processes of their own are modules of ``programs``. The multi-node
cluster of ``ray start`` processes on this host that the tests and ``scripts/cluster.py``
stand up is test support, in ``harness.loopback`` (``local.LocalCluster``).

Work arrives as plain data (``sweeps.jobs.work.Workload`` and ``Resources``); this
package turns it into Ray options and calls. Every cluster it starts binds to 127.0.0.1
and keeps token authentication on.

What Ray 2.60 does with the addresses, found by running it (see ``harness.loopback.local``):

- Every node is started with ``--node-ip-address=127.0.0.1``, and the GCS address the
  cluster hands out is ``127.0.0.1:PORT``. On Linux Ray then swaps a loopback address for
  the host's own routable address (``resolve_ip_for_localhost``): the nodes register
  under that IP (``LocalCluster.node_ip``), and a client that connects to
  ``127.0.0.1:PORT`` is redirected to it. The dashboard binds to 127.0.0.1.
- The C++ servers (GCS, raylets, object managers, core workers) listen on every
  interface whatever the flags say; token authentication is what keeps other hosts out.
  The dashboard asks for the token too (``Authorization: Bearer <token>``).
- Several nodes on one host need ports of their own: each node gets its own temp dir,
  and lets the OS pick its dashboard agent port and its workers' ports (the defaults,
  52365 and 10002-19999, are the same for every node).
- A client with a wrong token is refused only after Ray has retried the GCS once a
  second ``RAY_NUM_REDIS_GET_RETRIES`` times (20 by default); set it to 1-2 in a client
  that should fail fast. A node (``ray start --address``) with a wrong token fails the
  same way, before it spawns anything.
"""
