"""Names that become lake folders, and YAML files that are not a config, refused with
the field and the value (``checks.check_name``, ``compose.read_yaml``)."""

from __future__ import annotations

import pytest

from sweeps.config import load_run_config
from sweeps.config.checks import NAME_MAX, check_name
from sweeps.config.compose import read_yaml
from sweeps.errors import ConfigError


@pytest.mark.parametrize("name", ["table2", "a", "mi210x4", "run-1.b_2", "a" * NAME_MAX])
def test_names_inside_the_rule_pass(name):
    check_name("sweep.name", name)


@pytest.mark.parametrize("name, reason", [
    ("a" * (NAME_MAX + 1), f"{NAME_MAX + 1} characters long"),
    ("a..b", "no '..'"),
    ("..", "no '..'"),
    (".hidden", "starting with a letter or a digit"),
    ("a/b", "letters, digits"),
    ("a=b", "letters, digits"),
    ("", "letters, digits"),
])
def test_names_outside_the_rule_are_refused(name, reason):
    with pytest.raises(ConfigError, match="sweep.name") as raised:
        check_name("sweep.name", name)
    assert reason in str(raised.value)
    assert len(str(raised.value)) < 200  # a long name is shown cut


def test_a_long_hardware_name_in_a_profile_is_refused():
    with pytest.raises(ConfigError, match=r"hardware\.name='bbbb.*70 characters long"):
        load_run_config(["sweep=smoke", f"hardware.name={'b' * 70}"])


@pytest.mark.parametrize("text, reason", [
    (b"name: x\npeak_tflops: [1, 2\n", "is not valid YAML: line 3, column 1"),
    (b"name: \xe9t\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 6)"),
    (b"- name: x\n", "its top level is a list"),
    (b"just words\n", "its top level is a single value"),
    (b"a: &x [*x]\n", "is not valid YAML"),
])
def test_a_yaml_file_that_is_not_a_config_is_refused(tmp_path, text, reason):
    path = tmp_path / "profile.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError, match="hardware=") as raised:
        read_yaml(path, "hardware")
    assert reason in str(raised.value) and str(path) in str(raised.value)


def test_an_empty_yaml_file_is_an_empty_mapping(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_bytes(b"# nothing but a comment\n")
    assert dict(read_yaml(path, "hardware")) == {}
