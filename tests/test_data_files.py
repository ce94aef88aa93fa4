"""The kit's own YAML files read the same with libyaml (kit._data) as with PyYAML's pure-Python loader."""

from __future__ import annotations

import pytest
import yaml

from kit._data import DATA, load_yaml, yaml_loader

FILES = sorted(DATA.rglob("*.yaml")) + sorted(DATA.rglob("*.yml"))


def test_there_are_data_files_and_libyaml_is_used_when_present():
    assert len(FILES) >= 5
    assert yaml_loader() is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_each_file_gives_the_same_data_with_both_loaders(path):
    text = path.read_text(encoding="utf-8")
    assert load_yaml(path) == yaml.safe_load(text)
