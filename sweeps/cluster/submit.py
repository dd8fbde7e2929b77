"""Submit a sweep to a Ray cluster as a job (Ray Jobs API) and follow its logs."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import re
import shlex
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

from sweeps.cluster.reach import TOKEN_HINT
from sweeps.errors import UserError

__all__ = ["DEFAULT_JOBS_API", "submit_run", "jobs_api", "job_runtime_env", "job_output"]

#: Never shipped with the job: lakes, environments, build output, version control.
EXCLUDES = [".git", ".venv*", "venv", "lake", "*.lake", "__pycache__", "*.egg-info", "build", "dist",
            ".pytest_cache", ".hypothesis", "bench-out"]
#: The packages a job needs on the head node.
PACKAGES = ("sweeps", "tasks", "analysis", "conf")


def _package_dir(name: str) -> Path:
    """Where an installed package of ours lives (found, not imported)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"package {name!r} is not installed beside commscale")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def job_runtime_env() -> Dict[str, object]:
    """The repository as the job's working directory (an editable install), or the
    packages themselves when commscale is installed without its repository."""
    root = _package_dir("sweeps").parent
    if (root / "pyproject.toml").is_file() and (root / "tasks").is_dir():
        return {"working_dir": str(root), "excludes": EXCLUDES}
    return {"py_modules": [str(_package_dir(name)) for name in PACKAGES]}


def _token_problem(message: str) -> str:
    """What Ray's ``AuthenticationError`` ``message`` says went wrong with the token, in brief."""
    if "not 'token'" in message:
        return "no token was sent (RAY_AUTH_MODE is not 'token')"
    if "Missing" in message or "couldn't find" in message:
        return "no token was found"
    return "the cluster refused the token"


#: Ray's loggers that speak while a job is packaged, uploaded and followed (two set their
#: own level, so the parent's does not reach them).
_RAY_LOGGERS = ("ray", "ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk")
#: A line Ray itself logs into a job's output ("2026-01-01 10:00:00,123\tINFO file.py:12 -- ...").
_RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(DEBUG|INFO|WARNING)\s+\S+:\d+ -- ")


@contextlib.contextmanager
def _ray_logs(verbose: bool) -> Iterator[None]:
    """Ray's own log lines below ERROR kept off the terminal, unless ``verbose``."""
    import ray.job_submission  # noqa: F401  (importing Ray sets its loggers' levels: set them after)

    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in _RAY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def job_output(lines: str, verbose: bool) -> str:
    """A chunk of a job's log as the user sees it: without Ray's own log lines unless ``verbose``."""
    if verbose:
        return lines
    return "".join(line for line in lines.splitlines(keepends=True) if not _RAY_LOG_LINE.match(line))


#: Ray's own Jobs API address where nothing names one (``ray job submit``'s default).
DEFAULT_JOBS_API = "http://127.0.0.1:8265"
#: Where a cluster's Jobs API comes from, for a client that cannot reach one.
NO_DASHBOARD = ("a cluster serves it where its head runs the dashboard: ray start --head --include-dashboard=true, "
                "scripts/cluster.py start --dashboard; `commscale run --address` needs none")
#: Seconds a cluster's GCS is asked for its Jobs API's address (the dashboard may be starting).
JOBS_API_LOOKUP_S = 10.0


def jobs_api(address: Optional[str], dashboard: Optional[str]) -> str:
    """The Jobs API URL to submit to: that of the Ray cluster at ``address`` (HOST:PORT of
    its GCS, as ``--address`` means in every command); else ``dashboard`` (a URL); else
    that of the cluster at ``RAY_ADDRESS``; else ``DEFAULT_JOBS_API``.

    A cluster records its dashboard's address in its GCS; this reads it as Ray's own
    lookup does (``ray.dashboard.utils.ray_address_to_api_server_url``, key
    ``ray_constants.DASHBOARD_ADDRESS`` in namespace ``KV_NAMESPACE_DASHBOARD``), for
    ``JOBS_API_LOOKUP_S`` rather than Ray's 20 tries 2 s apart. A ``ray://`` address is
    left to Ray's client."""
    cluster = address or (None if dashboard else os.environ.get("RAY_ADDRESS"))
    if not cluster:
        return dashboard or DEFAULT_JOBS_API
    if "://" in cluster:
        return cluster
    from ray._private import ray_constants
    from ray._raylet import GcsClient

    client = GcsClient(address=cluster)
    deadline = time.monotonic() + JOBS_API_LOOKUP_S
    while True:
        url = client.internal_kv_get(ray_constants.DASHBOARD_ADDRESS.encode(), ray_constants.KV_NAMESPACE_DASHBOARD,
                                     timeout=JOBS_API_LOOKUP_S)
        if url:
            return f"http://{url.decode()}"
        if time.monotonic() > deadline:
            raise UserError(f"the Ray cluster at {cluster!r} records no Jobs API ({NO_DASHBOARD})")
        time.sleep(0.5)


@contextlib.contextmanager
def _address_as_given() -> Iterator[None]:
    """Ray's Jobs client takes ``RAY_API_SERVER_ADDRESS``, else ``RAY_ADDRESS``, over the
    address it is given (``ray.dashboard.utils.get_address_for_submission_client``); kept
    out while the client is made, the address commscale chose is the one it uses."""
    saved = {name: os.environ.pop(name) for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS") if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def submit_run(run_args: List[str], *, address: Optional[str], dashboard: Optional[str], python_bin: str,
               follow: bool, echo: Callable[[str], None], env_vars: Optional[Dict[str, str]] = None,
               verbose: bool = False) -> int:
    """Submit ``PYTHON_BIN -m sweeps.cli run RUN_ARGS`` as a job to the Jobs API that
    ``jobs_api(address, dashboard)`` names, with ``env_vars`` set for it; with ``follow``,
    stream its logs and return its exit status (0 once it succeeded; the job's own status
    where Ray reports it, else 1); without, 0 once it is accepted. Ray's own log lines
    (packaging, uploading, setting up the job) are left out unless ``verbose``."""
    with _ray_logs(verbose):
        url = jobs_api(address, dashboard)
        return _submit(url, run_args, python_bin=python_bin, follow=follow, echo=echo, env_vars=env_vars,
                       verbose=verbose)


def _submit(address: str, run_args: List[str], *, python_bin: str, follow: bool, echo: Callable[[str], None],
            env_vars: Optional[Dict[str, str]], verbose: bool) -> int:
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobStatus, JobSubmissionClient

    try:
        with _address_as_given():
            client = JobSubmissionClient(address)
    except AuthenticationError as exc:
        raise UserError(f"cannot submit to the Jobs API at {address!r}: {_token_problem(str(exc))}; "
                        f"{TOKEN_HINT}") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot reach the Jobs API at {address!r}: {str(exc).splitlines()[0]} ({NO_DASHBOARD})") \
            from None
    entrypoint = shlex.join([python_bin, "-m", "sweeps.cli", "run", *run_args])
    runtime_env = {**job_runtime_env(), **({"env_vars": dict(env_vars)} if env_vars else {})}
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env)
    echo(f"submitted job {job_id} to {address}: {entrypoint}\n")
    if not follow:
        return 0

    async def stream() -> None:
        async for lines in client.tail_job_logs(job_id):
            shown = job_output(lines, verbose)
            if shown:
                echo(shown)

    asyncio.run(stream())
    status = client.get_job_status(job_id)
    while status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        time.sleep(0.5)
        status = client.get_job_status(job_id)
    echo(f"job {job_id}: {status.value}\n")
    if status == JobStatus.SUCCEEDED:
        return 0
    code = client.get_job_info(job_id).driver_exit_code
    return code if code else 1
