"""A multi-node Ray cluster of separate ``ray start`` processes on this host, every node on
127.0.0.1 with token authentication on (test support: see ``harness``).

- ``local``: ``LocalCluster``, the cluster (start, add and remove nodes, stop, state file);
- ``launcher``: spawns, watches and stops its nodes (``ray_start`` is the program each runs);
- ``processes``: the node processes and their process groups, from /proc;
- ``host``: checks of settings, free ports, the ``ray`` executable;
- ``sockets``: what the cluster's processes listen on, and which answer without the token;
- ``ray_start``: the program a node runs: ``ray start`` kept on loopback.
"""

__all__ = ["local", "launcher", "processes", "host", "sockets", "ray_start"]
