r"""Start, inspect and stop a multi-node Ray cluster on this host (`harness.loopback.local.LocalCluster`).

    python scripts/cluster.py start --workers 2 --cpus 1 --resources '{"standin_gpu": 2}' \
        --state /tmp/commscale-cluster [--dashboard]
    python scripts/cluster.py status --state /tmp/commscale-cluster [--ports]
    python scripts/cluster.py stop --state /tmp/commscale-cluster

`start` runs a head and the worker nodes as separate `ray start` processes, each in a
session of its own, with token authentication on; it prints the address, the dashboard
URL and the `export ...` line a client needs, saves the state, and leaves the cluster
running. `stop` kills exactly those processes (not `ray stop`, which would kill every
Ray on the host). `status` prints how many nodes the GCS lists as alive.

Exit status: 0 done; 1 the cluster failed to start, is not running, or has no state;
2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from harness.loopback.local import LocalCluster
from harness.loopback.sockets import answers_without_token, listeners

DEFAULT_STATE = "/tmp/commscale-cluster"


def _start(args: argparse.Namespace) -> int:
    try:
        resources = json.loads(args.resources) if args.resources else None
    except ValueError as exc:
        print(f"--resources is not JSON: {exc}", file=sys.stderr)
        return 2
    if resources is not None and not isinstance(resources, dict):
        print("--resources must be a JSON object, e.g. '{\"standin_gpu\": 2}'", file=sys.stderr)
        return 2
    if args.workers < 0:
        print("--workers must be >= 0", file=sys.stderr)
        return 2
    try:
        cluster = LocalCluster(state_dir=args.state, head_cpus=args.head_cpus, dashboard=args.dashboard)
    except (TypeError, ValueError) as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    try:
        cluster.start_head()
        for _ in range(args.workers):
            cluster.add_worker(cpus=args.cpus, resources=resources)
    except (TypeError, ValueError) as exc:
        cluster.stop()
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, KeyboardInterrupt) as exc:
        cluster.stop()
        print(f"the cluster failed to start and was stopped: {exc}", file=sys.stderr)
        return 1
    cluster.save_state()
    alive = cluster.alive_nodes()
    print(f"Ray cluster: a head and {args.workers} worker node(s), {alive} alive "
          f"(registered under {cluster.node_ip}), token authentication on")
    print(f"address:   {cluster.address}")
    print(f"dashboard: {cluster.dashboard_url or 'off (start with --dashboard)'}")
    print(f"state:     {cluster.state_dir} (logs there; "
          f"stop: python scripts/cluster.py stop --state {cluster.state_dir})")
    print(f"export RAY_ADDRESS={cluster.address} RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={cluster.token_path} "
          "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0")
    return 0


def _load(state: str) -> LocalCluster | None:
    try:
        return LocalCluster.load(state)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return None


def _stop(args: argparse.Namespace) -> int:
    cluster = _load(args.state)
    if cluster is None:
        return 1
    running = bool(cluster.pids())
    cluster.stop()
    print(f"stopped the cluster of {args.state}" if running else f"the cluster of {args.state} was not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _load(args.state)
    if cluster is None:
        return 1
    pids = cluster.pids()
    if not pids:
        print(f"the cluster of {args.state} is stopped (or its processes are gone)")
        return 1
    try:
        alive = cluster.alive_nodes()
    except RuntimeError as exc:
        print(f"address {cluster.address}: {len(pids)} processes, but the GCS does not answer: {exc}")
        return 1
    print(f"address {cluster.address}: {alive} alive node(s) in the GCS; workers started here: "
          f"{', '.join(cluster.workers) or 'none'}; {len(pids)} processes")
    if cluster.dashboard_url:
        print(f"dashboard: {cluster.dashboard_url}")
    if args.ports:
        print("listening sockets (address:port, process, what an HTTP GET without the token gets):")
        for listener in listeners(pids):
            path = answers_without_token(listener)
            print(f"  {listener.address}:{listener.port}  {listener.process}  "
                  + (f"200 on {path}" if path else "no answer without the token"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a head and worker nodes, and leave them running")
    start.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    start.add_argument("--cpus", type=int, default=1, help="CPUs of each worker node (default 1)")
    start.add_argument("--head-cpus", type=int, default=1, help="CPUs of the head node (default 1)")
    start.add_argument("--resources", default=None,
                       help='custom resources of each worker, JSON: \'{"standin_gpu": 2}\'')
    start.add_argument("--dashboard", action="store_true", help="run Ray's dashboard on 127.0.0.1")
    status = sub.add_parser("status", help="how many nodes of the cluster in --state are alive")
    status.add_argument("--ports", action="store_true", help="also list the sockets its processes listen on")
    for command in (start, sub.add_parser("stop", help="stop the cluster saved in --state"), status):
        command.add_argument("--state", default=DEFAULT_STATE, help=f"state directory (default {DEFAULT_STATE})")
    args = parser.parse_args(argv)
    return {"start": _start, "stop": _stop, "status": _status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
