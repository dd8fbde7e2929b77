"""The project's YAML presets (model, hardware, sweep); ``CONF_DIR`` locates them."""

from pathlib import Path

#: Folder holding ``defaults.yaml`` and one sub-folder per config group.
CONF_DIR = Path(__file__).resolve().parent
