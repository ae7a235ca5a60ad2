"""What the exporter's processes refuse to import (exporter/importblocker.py): pandas, which
pyarrow would load for nothing, and pyarrow.dataset, which `Table.group_by` would. Each
probe runs in a process of its own: the refusal is for the rest of a process's life."""

from __future__ import annotations

import subprocess
import sys

import pytest

_GROUP_BY = """
import sys
{setup}
import pyarrow as pa

table = pa.table({{"k": ["a", "b", "a"], "v": [1, 2, 3]}})
summed = table.group_by("k", use_threads=False).aggregate([("v", "sum")]).sort_by("k")
print(summed.to_pydict(), "pyarrow.dataset" in sys.modules)
"""


def _run(code: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", code, *args], check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.mark.parametrize("setup, loaded", [
    ("", True),  # what pyarrow does by itself: the refusal has something to refuse
    ("from exporter import importblocker; importblocker.refuse()", False),
])
def test_group_by_works_without_pyarrow_dataset(setup: str, loaded: bool) -> None:
    assert _run(_GROUP_BY.format(setup=setup)) == f"{{'k': ['a', 'b'], 'v_sum': [4, 2]}} {loaded}"


def test_every_command_refuses_them_and_says_where_from(tmp_path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cluster: c\nsources:\n  brokers:\n    - url: http://broker:8080/metrics\n")
    probe = """
import sys
from exporter.cli import main
assert main(["validate-config", sys.argv[1]]) == 0
for name in ("pandas", "pyarrow.dataset", "pandas.core"):
    try:
        __import__(name)
    except ModuleNotFoundError as exc:
        print(exc)
"""
    assert _run(probe, str(config)).splitlines() == [
        "OK",
        "No module named 'pandas' in the exporter's processes (exporter/importblocker.py)",
        "No module named 'pyarrow.dataset' in the exporter's processes (exporter/importblocker.py)",
        "No module named 'pandas' in the exporter's processes (exporter/importblocker.py)",
    ]
