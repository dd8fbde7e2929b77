"""``ray start ARGS``, kept on loopback (the program each node of ``LocalCluster`` runs).

    python ray_start.py start --block --node-ip-address=127.0.0.1 ...

On Linux Ray swaps a loopback node address for the host's routable one
(``services.resolve_ip_for_localhost``), and its servers then listen on every interface,
the Prometheus ``/metrics`` endpoints of the dashboard, the autoscaler and every node's agent
among them, and those ask for no token. This keeps the address as given. The processes it
spawns inherit ``launcher.LOOPBACK_ENV``, under which Ray's own ``get_node_ip_address``
answers 127.0.0.1 (``ray_constants.ENABLE_RAY_CLUSTER``); ``ray start`` turns that switch
back on for itself, since it would otherwise refuse to join a worker node. Imports only the
standard library and Ray.
"""

import os
import sys


def main() -> None:
    # Run by path, this folder is sys.path[0]: its modules (host, local, ...) must shadow nothing.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    import ray._private.ray_constants as ray_constants
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    ray_constants.ENABLE_RAY_CLUSTER = True
    services.resolve_ip_for_localhost = lambda host: host
    sys.argv[0] = "ray"
    ray_main()


if __name__ == "__main__":
    main()
