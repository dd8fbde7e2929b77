"""Whether a Ray cluster answers at an address, asked within a deadline before anything
is written or started.

Ray itself waits on a dead or wrong address for minutes: it retries the GCS
``RAY_NUM_REDIS_GET_RETRIES`` times (20 by default), and each try can block for about
40 s when something accepts the TCP connection without being a GCS. So this module
first connects to the port, then asks the GCS for its node table from a short Python
subprocess (``gcs.start_node_query``) that is killed at the deadline. Importing it
imports no Ray, so the command line can ask before it touches the lake.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

from sweeps.cluster.gcs import start_node_query
from sweeps.errors import UserError

__all__ = ["CONNECT_TIMEOUT_S", "ANSWER_TIMEOUT_S", "TOKEN_HINT", "host_port", "check_reachable"]

#: Seconds to wait for the address to accept a TCP connection.
CONNECT_TIMEOUT_S = 10.0
#: Seconds for the GCS to answer with its node table (Python and Ray's start included).
ANSWER_TIMEOUT_S = 15.0
#: The GCS query's own retry window, in seconds: a refused token is reported, not retried.
_QUERY_RETRY_S = 2.0
#: What a client refused for its token is told to do.
TOKEN_HINT = ("set RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
              "or ~/.ray/auth_token")

#: Node tables already read in this process, by address (the CLI asks first, the session again).
_ANSWERS: Dict[str, List[Dict[str, Any]]] = {}


def host_port(address: str) -> Optional[Tuple[str, int]]:
    """``(host, port)`` of a ``[scheme://]host:port`` address, or None (e.g. "auto")."""
    bare = address.split("://")[-1]
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _refused(address: str, why: str) -> UserError:
    return UserError(f"cannot join the Ray cluster at {address!r}: {why}")


def _connect(address: str, target: Tuple[str, int]) -> None:
    try:
        with socket.create_connection(target, timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as exc:
        raise _refused(address, f"nothing answers there ({exc.strerror or type(exc).__name__}); "
                                "check the address") from None


def _ask_gcs(address: str) -> List[Dict[str, Any]]:
    """The node table of the GCS at ``address``, or ``UserError`` once ``ANSWER_TIMEOUT_S``
    has passed or the GCS refused."""
    import json

    query = start_node_query(sys.executable, address, os.environ, "list", "-", _QUERY_RETRY_S)
    try:
        out, err = query.communicate(timeout=ANSWER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        query.kill()
        query.communicate()
        raise _refused(address, f"something accepts connections there but no Ray cluster answered within "
                                f"{ANSWER_TIMEOUT_S:g} s; check the address (host:port of the head's GCS)") from None
    tables = [line for line in out.splitlines() if line.startswith("[")]
    if query.returncode == 0 and tables:
        return json.loads(tables[-1])
    if "AuthenticationError" in err or "InvalidAuthToken" in err:
        raise _refused(address, f"the cluster refused the token; {TOKEN_HINT}")
    if "has_token" in err:  # token mode on, and no token found at all
        raise _refused(address, f"no token found (RAY_AUTH_MODE=token); {TOKEN_HINT}")
    last = next((line.strip() for line in reversed(err.splitlines()) if line.strip()), "no answer")
    raise _refused(address, f"no Ray cluster answered there ({last[:200]}); check the address")


def check_reachable(address: str) -> Optional[List[Dict[str, Any]]]:
    """``UserError`` (one line) within about ``CONNECT_TIMEOUT_S + ANSWER_TIMEOUT_S`` when no
    Ray cluster answers at ``address``, or it refuses this client's token. Returns the
    cluster's node table (dicts with ``ip`` and ``alive``, see ``programs.node_table``) for a
    ``host:port`` GCS address; None for an address it cannot ask ("auto"), and for another
    scheme (``ray://``), whose port it only connects to."""
    if address in _ANSWERS:
        return _ANSWERS[address]
    target = host_port(address)
    if target is None:  # "auto" and the like: Ray finds the cluster itself
        return None
    _connect(address, target)
    if "://" in address:
        return None
    _ANSWERS[address] = _ask_gcs(address)
    return _ANSWERS[address]
