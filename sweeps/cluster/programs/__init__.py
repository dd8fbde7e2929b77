"""Programs that run as processes of their own, started by path (``PROGRAMS``), so that the
interpreter running them (possibly the one next to another ``ray`` executable) needs
nothing of this package: each imports only the standard library and Ray.

- ``node_table``: asks a GCS for its node table and prints it as one JSON line;
- ``reaper``: kills what a driver spawned, and removes its temp folder, once it dies.
"""

from pathlib import Path

__all__ = ["node_table", "reaper", "program_path"]


def program_path(name: str) -> str:
    """The file of program ``name`` (one of ``__all__``'s modules), to run as ``python FILE``."""
    return str(Path(__file__).with_name(f"{name}.py"))
