"""The kit's own data files (``kit/data/``): YAML read with libyaml when PyYAML has it.

PyYAML's pure-Python loader takes 90 ms for ``gpus.yaml`` alone, which a warm ``sgl-kit doctor``
paid on every run; its C loader (``CSafeLoader``, built into the PyYAML wheels) reads the same
data in a tenth of that. Both are safe loaders and give the same values for these files
(``tests/test_data_files.py`` compares them). Text pasted by a user is read with
``yaml.safe_load``, whose error messages are the ones people know.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA", "load_yaml", "yaml_loader"]

DATA = Path(__file__).resolve().parent / "data"


def yaml_loader():
    """libyaml's safe loader when this PyYAML has it, else the pure-Python one."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: Path | str):
    """The data of one of the kit's YAML files."""
    import yaml

    return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=yaml_loader())  # noqa: S506 - a safe loader
