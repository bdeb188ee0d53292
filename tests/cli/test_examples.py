"""crw.cli.examples: the examples are found in the package, wherever it is installed."""

from __future__ import annotations

from pathlib import Path

import pytest

import crw
from crw.cli.examples import example
from crw.errors import InputError


def test_an_example_is_found_in_the_package_crw_is_imported_from() -> None:
    found = example("demo.toml")
    assert found == Path(crw.__file__).parent / "examples" / "demo.toml"
    assert (found.parent / "schemas" / "plan.json").is_file()  # the schemas it names


def test_a_missing_example_is_one_line_naming_the_reinstall() -> None:
    with pytest.raises(InputError) as raised:
        example("absent.toml")
    assert "\n" not in str(raised.value)
    assert "absent.toml is missing" in str(raised.value)
    assert "pip install --force-reinstall crw-flow" in str(raised.value)
