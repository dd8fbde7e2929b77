"""Ask the GCS at ADDRESS for its node table and print it as one JSON line.

    python node_table.py ADDRESS MODE ARG TIMEOUT_S

Modes: ``list`` (once), ``temp_dir DIR`` (until a node started with ``--temp-dir=DIR`` is
alive), ``count N`` (until exactly N nodes are alive). It ends at the deadline either way;
the caller judges. Imports only the standard library and Ray (``sweeps.cluster.programs``).
"""

import json
import sys
import time


def main(address: str, mode: str, arg: str, timeout_s: float) -> None:
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    deadline = time.monotonic() + timeout_s
    alive_state = GcsNodeInfo.GcsNodeState.ALIVE
    client = None
    while client is None:
        try:
            client = GcsClient(address=address)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)
    while True:
        nodes = [
            {"node_id": info.node_id.hex(), "alive": info.state == alive_state,
             "ip": info.node_manager_address, "head": bool(info.is_head_node),
             "temp_dir": info.temp_dir, "resources": dict(info.resources_total)}
            for info in client.get_all_node_info(timeout=10).values()
        ]
        alive = [n for n in nodes if n["alive"]]
        done = (mode == "list"
                or (mode == "temp_dir" and any(n["temp_dir"] == arg for n in alive))
                or (mode == "count" and len(alive) == int(arg)))
        if done or time.monotonic() > deadline:
            print(json.dumps(nodes), flush=True)
            return
        time.sleep(0.25)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
