"""Modules the exporter's processes refuse to import, because a library would load them
for nothing: the driver (`cli.main`, every command) and its Spark workers
(pipeline/spark/daemon.py) install the refusal before anything else loads.

- pandas: pyarrow imports it on its first `pa.array`, only to ask whether the argument is a
  pandas object (its pandas shim takes an ImportError as "no pandas"); nothing here hands it
  one, and PySpark imports pandas only for pandas UDFs and DataFrame conversions, which the
  exporter has none of, and a worker that imports it is larger and slower to its first job
  (docs/design.md, "Start-up and memory"). (The exporter does not depend on pandas; a venv
  may hold it anyway.)
- pyarrow.dataset: `Table.group_by` loads pyarrow.acero, which imports pyarrow.dataset
  (and with it the file-system and Parquet modules) only to offer scan nodes, and falls
  back to a stub without it (pyarrow/acero.py); refusing it shrinks the driver and the
  workers alike (docs/design.md, "Start-up and memory").
"""

from __future__ import annotations

import importlib.abc
import sys

REFUSED = ("pandas", "pyarrow.dataset", "pyarrow._dataset")


class _Refused(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if any(name == r or name.startswith(r + ".") for r in REFUSED):
            raise ModuleNotFoundError(f"No module named {name!r} in the exporter's processes "
                                      "(exporter/importblocker.py)", name=name)
        return None


def refuse() -> None:
    """From now on, importing any of `REFUSED` in this process raises ModuleNotFoundError
    (modules loaded already stay loaded). Idempotent."""
    if not any(isinstance(f, _Refused) for f in sys.meta_path):
        sys.meta_path.insert(0, _Refused())
