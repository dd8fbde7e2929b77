"""The one compose routine: a YAML preset (or defaults) merged into its dataclass schema,
then ``KEY=VALUE`` overrides in OmegaConf dotlist syntax, one at a time so that an error
names the override at fault; every error is a ``ConfigError`` naming the field and value.

Presets live in ``conf/GROUP/NAME.yaml``; a choice ending in ``.yaml`` is a path. A
YAML file must be UTF-8 text, valid YAML and a mapping of fields at its top level; an
override's value must be valid YAML (``sweep.tp=[4,`` is not).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, List, Sequence

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf import CONF_DIR
from sweeps.config.schemas import PRESET_SCHEMAS
from sweeps.errors import ConfigError

__all__ = ["CONF_DIR", "list_presets", "preset_path", "check_preset", "read_yaml", "preset_node", "compose",
           "load_preset", "reason"]


def list_presets(group: str) -> List[str]:
    """Names of the presets of a group (the YAML files of ``conf/GROUP/``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def preset_path(group: str, choice: str) -> Path:
    """The YAML file of a preset name, or of a path given as the choice."""
    if choice.endswith((".yaml", ".yml")):
        path = Path(choice)
        if not path.is_file():
            raise ConfigError(group, choice, "no such YAML file")
        return path
    path = CONF_DIR / group / f"{choice}.yaml"
    if not path.is_file():
        raise ConfigError(group, choice, f"unknown preset; choose one of {', '.join(list_presets(group))}")
    return path


def check_preset(field: str, group: str, choice: str) -> Path:
    """``preset_path(group, choice)`` for a preset named in ``field`` (``sweep.highlights``,
    ``search.scaling.models``): a ``ConfigError`` names that field, not the group."""
    try:
        return preset_path(group, choice)
    except ConfigError as exc:
        raise ConfigError(field, choice, exc.reason) from None


def reason(exc: OmegaConfBaseException) -> str:
    """A one-line reason for an OmegaConf error, in the user's terms."""
    kind = type(exc).__name__
    if kind == "ConfigKeyError":
        return "unknown key"
    if kind == "MissingMandatoryValue":
        return "missing field (it has no default and the YAML does not set it)"
    message = str(getattr(exc, "msg", None) or exc).splitlines()[0]
    if "ListConfig" in message:
        return "expected a list, e.g. [1, 2]"
    if "is not a subclass of" in message or "Merge error" in message:
        return "expected a mapping of fields here, not a single value"
    return message


def _yaml_problem(exc: yaml.YAMLError, *, at: bool = True) -> str:
    """``line L, column C: CONTEXT: PROBLEM`` of a YAML error, on one line (``at``: with
    the line and column)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if at and mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f"{where}{context + ': ' if context else ''}{problem}"


def read_yaml(path: Path, field: str) -> Any:
    """The mapping at the top of the YAML file ``path`` as an OmegaConf node (an empty file
    is an empty mapping). ``ConfigError`` naming ``field`` and the file when it cannot be
    read, is not UTF-8 text, is not valid YAML, or holds a list or a single value."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(field, str(path), f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, str(path), f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                                            f"{exc.start}); save it as UTF-8") from None
    try:
        top = yaml.compose(text, Loader=yaml.SafeLoader)  # the shape, before any value is built
        if top is None:
            return OmegaConf.create()
        if not isinstance(top, yaml.MappingNode):
            shape = "a list" if isinstance(top, yaml.SequenceNode) else "a single value"
            raise ConfigError(field, str(path), f"its top level is {shape}; a YAML config is a mapping of "
                                                "fields (one FIELD: VALUE per line)")
        return OmegaConf.load(io.StringIO(text))
    except yaml.YAMLError as exc:
        raise ConfigError(field, str(path), f"is not valid YAML: {_yaml_problem(exc)}") from None


def preset_node(schema: type, path: Path, *, prefix: str) -> Any:
    """The YAML at ``path`` (``read_yaml``) merged into ``schema``'s structured config; an
    error names the key (after ``prefix``, e.g. "hardware") and the file."""
    raw = read_yaml(path, prefix)
    try:
        return OmegaConf.merge(OmegaConf.structured(schema), raw)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        value = OmegaConf.select(raw, key, default=None) if key else None
        raise ConfigError(f"{prefix}.{key}" if key else prefix, value, f"{reason(exc)} (in {path})") from None


def compose(node: Any, overrides: Sequence[str], *, prefix: str = "", source: str = "") -> Any:
    """Merge ``KEY=VALUE`` ``overrides`` into ``node`` one at a time, then build the
    dataclass. Errors name ``prefix`` + the key; ``source`` (e.g. "in FILE") is added to the
    reason of an error found when building."""
    for item in overrides:
        key, _, value = item.partition("=")
        try:
            node = OmegaConf.merge(node, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{prefix}{key}", value, reason(exc)) from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{prefix}{key}", value, f"is not a valid value ({_yaml_problem(exc, at=False)}); "
                                                       "a list is written [4, 8], quoted for the shell") from None
    try:
        return OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        where = f" ({source})" if source else ""
        raise ConfigError(f"{prefix}{key}" if key else (prefix.rstrip(".") or "config"), None,
                          f"{reason(exc)}{where}") from None


def load_preset(group: str, choice: str, overrides: Sequence[str] = ()) -> Any:
    """Load and validate one preset of ``group`` against its schema, with ``overrides``
    (``FIELD=VALUE``, the group's name left off) applied; returns the dataclass."""
    path = preset_path(group, choice)
    return compose(preset_node(PRESET_SCHEMAS[group], path, prefix=group), overrides, prefix=f"{group}.",
                   source=f"in {path}")
