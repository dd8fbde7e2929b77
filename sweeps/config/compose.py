"""The one compose routine: a YAML preset (or defaults) merged into its dataclass schema,
then ``KEY=VALUE`` overrides in OmegaConf dotlist syntax, one at a time so that an error
names the override at fault; every error is a ``ConfigError`` naming the field and value.

Presets live in ``conf/GROUP/NAME.yaml``; a choice ending in ``.yaml`` is a path, any
other a preset name (``checks.NAME``: no path, no ``..``). A YAML file must be a regular
file of at most ``bounds.MAX_YAML_BYTES`` (unless ``allow_large``), UTF-8 text, valid YAML
nested at most ``MAX_YAML_DEPTH`` levels, and a mapping of fields at its top level; an
override's value must be valid YAML (``sweep.tp=[4,`` is not), nested as little.
"""

from __future__ import annotations

import io
import stat
from pathlib import Path
from typing import Any, List, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf import CONF_DIR
from sweeps.config.bounds import ALLOW_LARGE, MAX_YAML_BYTES
from sweeps.config.checks import NAME, NAME_MAX
from sweeps.config.schemas import PRESET_SCHEMAS
from sweeps.config.specs import complete_model
from sweeps.errors import ConfigError

__all__ = ["CONF_DIR", "MAX_YAML_DEPTH", "list_presets", "preset_path", "check_preset", "read_yaml", "preset_node",
           "compose", "load_preset", "reason"]

#: How deep a YAML config or override value may nest collections: a preset nests three
#: levels (``search.space.tp``); a deeper one is refused before it is built, since building
#: it recurses once per level.
MAX_YAML_DEPTH = 32


def list_presets(group: str) -> List[str]:
    """Names of the presets of a group (the YAML files of ``conf/GROUP/``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def preset_path(group: str, choice: str) -> Path:
    """The YAML file of a preset name, or of a path given as the choice. A name that is no
    preset name (``checks.NAME``, e.g. one holding a path) is unknown without a look at
    the file system."""
    if choice.endswith((".yaml", ".yml")):
        path = Path(choice)
        try:
            found = path.is_file()
        except (OSError, ValueError) as exc:
            raise ConfigError(group, choice, f"cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
        if not found:
            raise ConfigError(group, choice, "no such YAML file")
        return path
    path = CONF_DIR / group / f"{choice}.yaml"
    if len(choice) > NAME_MAX or not NAME.match(choice) or not path.is_file():
        raise ConfigError(group, choice, f"unknown preset; choose one of {', '.join(list_presets(group))}, or "
                                         "give a path ending in .yaml")
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


def _merge_problem(exc: Exception) -> str:
    """The reason for a value OmegaConf cannot merge (``TypeError``, ``ValueError``): a
    mapping or a list where the schema has the other, or a field indexed as a list."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "incompatible container" in message:
        return "a mapping and a list do not merge: give the field's own shape (a list [4, 8], or FIELD.KEY=VALUE)"
    return message


def _yaml_problem(exc: yaml.YAMLError, *, at: bool = True) -> str:
    """``line L, column C: CONTEXT: PROBLEM`` of a YAML error, on one line (``at``: with
    the line and column)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if at and mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f"{where}{context + ': ' if context else ''}{problem}"


def _check_depth(text: str, field: str, value: str) -> None:
    """``ConfigError`` naming ``field`` and ``value`` when the YAML ``text`` nests
    collections more than ``MAX_YAML_DEPTH`` deep: read as events, without recursion,
    and only up to that depth."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                raise ConfigError(field, value, f"nests more than {MAX_YAML_DEPTH} levels deep (line {mark.line + 1}, "
                                                f"column {mark.column + 1}); a config nests a few")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _read_bytes(path: Path, field: str, allow_large: bool) -> bytes:
    """The bytes of the YAML file ``path``: a regular file of at most ``MAX_YAML_BYTES``
    (unless ``allow_large``), its size checked before it is read."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(field, str(path), "is not a regular file")
        if info.st_size > MAX_YAML_BYTES and not allow_large:
            raise ConfigError(field, str(path), f"is {info.st_size:,} bytes, beyond the bound of {MAX_YAML_BYTES:,} "
                                                f"bytes of a YAML config; {ALLOW_LARGE}")
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(field, str(path), f"cannot be read ({exc.strerror or type(exc).__name__})") from None


def read_yaml(path: Path, field: str, *, allow_large: bool = False) -> Any:
    """The mapping at the top of the YAML file ``path`` as an OmegaConf node (an empty file
    is an empty mapping). ``ConfigError`` naming ``field`` and the file when it is no
    regular file, is larger than ``MAX_YAML_BYTES`` (unless ``allow_large``), cannot be
    read, is not UTF-8 text, is not valid YAML, nests deeper than ``MAX_YAML_DEPTH``, or
    holds a list or a single value."""
    data = _read_bytes(path, field, allow_large)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, str(path), f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                                            f"{exc.start}); save it as UTF-8") from None
    try:
        _check_depth(text, field, str(path))
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


def preset_node(schema: type, path: Path, *, prefix: str, allow_large: bool = False) -> Any:
    """The YAML at ``path`` (``read_yaml``) merged into ``schema``'s structured config; an
    error names the key (after ``prefix``, e.g. "hardware") and the file. A file naming a
    ``base`` preset of its group holds only what differs from it (``_on_base``)."""
    raw = read_yaml(path, prefix, allow_large=allow_large)
    if isinstance(raw, DictConfig) and "base" in raw:
        raw = _on_base(raw, schema, path, prefix, allow_large)
    try:
        return OmegaConf.merge(OmegaConf.structured(schema), raw)
    except OmegaConfBaseException as exc:  # before ValueError: OmegaConf's ValidationError is one
        key = getattr(exc, "full_key", "") or ""
        value = OmegaConf.select(raw, key, default=None) if key else None
        raise ConfigError(f"{prefix}.{key}" if key else prefix, value, f"{reason(exc)} (in {path})") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(prefix, str(path), f"{_merge_problem(exc)} (in {path})") from None


def _on_base(raw: DictConfig, schema: type, path: Path, prefix: str, allow_large: bool) -> DictConfig:
    """``raw`` (a file of group ``prefix`` naming ``base: PRESET``) merged over that preset,
    so the file holds only what differs (a cluster of H100s with 4 per node and slower
    links: ``base: h100``, ``devices_per_node: 4``, ``inter_node: {bandwidth_GBps: 12.5}``).
    Each figure the file sets, where its ``sources`` say nothing of it, is sourced to the
    file; the base's other sources stay. A base that names a base of its own is refused."""
    base = raw.pop("base")
    if not isinstance(base, str) or base.endswith((".yaml", ".yml")):
        raise ConfigError(f"{prefix}.base", base, f"names a preset of conf/{prefix} (in {path})")
    base_raw = read_yaml(check_preset(f"{prefix}.base", prefix, base), prefix, allow_large=allow_large)
    if isinstance(base_raw, DictConfig) and "base" in base_raw:
        raise ConfigError(f"{prefix}.base", base, f"names a base of its own; name a shipped preset (in {path})")
    fields = getattr(schema, "__dataclass_fields__", {})
    if "name" in fields and "name" not in raw:
        raw.name = _name_of(path)  # not the base's name: these are other figures
    if "description" in fields and "description" not in raw:
        raw.description = f"preset {base} with the figures of {path.name}"
    if "sources" in fields:
        sources = dict(raw.get("sources") or {})
        for key in _leaves(raw):
            if key not in ("name", "description", "sources") and not key.startswith("sources."):
                sources.setdefault(key, f"{path} (given there; the other figures are preset {base}'s)")
        raw.sources = sources
    return OmegaConf.merge(base_raw, raw)


def _leaves(node: Any, prefix: str = "") -> List[str]:
    """The dotted names of every value a YAML mapping sets."""
    if not isinstance(node, DictConfig):
        return [prefix.rstrip(".")]
    return [leaf for key in node for leaf in _leaves(node[key], f"{prefix}{key}.")]


def compose(node: Any, overrides: Sequence[str], *, prefix: str = "", source: str = "") -> Any:
    """Merge ``KEY=VALUE`` ``overrides`` into ``node`` one at a time, then build the
    dataclass. Errors name ``prefix`` + the key; ``source`` (e.g. "in FILE") is added to the
    reason of an error found when building."""
    for item in overrides:
        key, _, value = item.partition("=")
        try:
            _check_depth(value, f"{prefix}{key}", value)
            node = OmegaConf.merge(node, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as exc:  # before ValueError: OmegaConf's ValidationError is one
            raise ConfigError(f"{prefix}{key}", value, reason(exc)) from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{prefix}{key}", value, _merge_problem(exc)) from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{prefix}{key}", value, f"is not a valid value ({_yaml_problem(exc, at=False)}); "
                                                       "a list is written [4, 8], quoted for the shell") from None
    missing = sorted(OmegaConf.missing_keys(node))
    if len(missing) == 1:
        raise ConfigError(f"{prefix}{missing[0]}", None, f"missing field{f' ({source})' if source else ''}")
    if missing:  # every one at once, not one per try
        fields = ", ".join(f"{prefix}{key}" for key in missing)
        raise ConfigError(prefix.rstrip(".") or "config", source[3:] if source.startswith("in ") else source,
                          f"lacks {len(missing)} fields: {fields}")
    try:
        return OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        where = f" ({source})" if source else ""
        raise ConfigError(f"{prefix}{key}" if key else (prefix.rstrip(".") or "config"), None,
                          f"{reason(exc)}{where}") from None


def load_preset(group: str, choice: str, overrides: Sequence[str] = (), *, allow_large: bool = False) -> Any:
    """Load and validate one preset of ``group`` against its schema, with ``overrides``
    (``FIELD=VALUE``, the group's name left off) applied; returns the dataclass.
    ``allow_large``: a YAML file beyond ``MAX_YAML_BYTES`` is read all the same."""
    path = preset_path(group, choice)
    node = preset_node(PRESET_SCHEMAS[group], path, prefix=group, allow_large=allow_large)
    if "name" in getattr(PRESET_SCHEMAS[group], "__dataclass_fields__", {}) and OmegaConf.is_missing(node, "name"):
        node.name = _name_of(path)  # a file of the user's may leave its name to its file name
    built = compose(node, overrides, prefix=f"{group}.", source=f"in {path}")
    return complete_model(built) if group == "model" else built


def _name_of(path: Path) -> str:
    """A preset name from a file's name: its stem, each character a name cannot hold (see
    ``checks.NAME``) made '-', cut to ``NAME_MAX``."""
    name = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in path.stem).strip(".-_")
    return (name or "model").replace("..", "-")[:NAME_MAX]
