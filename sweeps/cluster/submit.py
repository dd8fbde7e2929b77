"""Submit a sweep to a Ray cluster as a job (Ray Jobs API) and follow its logs."""

from __future__ import annotations

import asyncio
import importlib.util
import shlex
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from sweeps.cluster.reach import TOKEN_HINT
from sweeps.errors import UserError

__all__ = ["submit_run", "job_runtime_env"]

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


def submit_run(address: str, run_args: List[str], *, python_bin: str, follow: bool,
               echo: Callable[[str], None], env_vars: Optional[Dict[str, str]] = None) -> bool:
    """Submit ``PYTHON_BIN -m sweeps.cli run RUN_ARGS`` as a job, with ``env_vars`` set for
    it; with ``follow``, stream its logs and return whether it succeeded (without, return
    True once it is accepted)."""
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobStatus, JobSubmissionClient

    try:
        client = JobSubmissionClient(address)
    except AuthenticationError as exc:
        raise UserError(f"cannot submit to the Jobs API at {address!r}: {_token_problem(str(exc))}; "
                        f"{TOKEN_HINT}") from None
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot reach the Jobs API at {address!r}: {str(exc).splitlines()[0]}") from None
    entrypoint = shlex.join([python_bin, "-m", "sweeps.cli", "run", *run_args])
    runtime_env = {**job_runtime_env(), **({"env_vars": dict(env_vars)} if env_vars else {})}
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env)
    echo(f"submitted job {job_id} to {address}: {entrypoint}\n")
    if not follow:
        return True

    async def stream() -> None:
        async for lines in client.tail_job_logs(job_id):
            echo(lines)

    asyncio.run(stream())
    status = client.get_job_status(job_id)
    while status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        time.sleep(0.5)
        status = client.get_job_status(job_id)
    echo(f"job {job_id}: {status.value}\n")
    return status == JobStatus.SUCCEEDED
