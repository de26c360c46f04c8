"""Lines of a read chunk as a Polars Series without copying them: Arrow's C data interface.

Polars takes any object with `__arrow_c_array__` (the Arrow PyCapsule interface) as a
Series. Here that object is built with ctypes over two buffers the reader already holds: the
chunk's bytes and the int64 offsets of its lines, as a LargeBinary array (format `Z`). No
Python object per line and no copy of the text; the array's release callback frees the
buffers once Polars drops them. (pyarrow did the same, and was 170 MB of the install.)
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl


class _Schema(ctypes.Structure):
    """struct ArrowSchema (arrow/c/abi.h)."""


class _Array(ctypes.Structure):
    """struct ArrowArray (arrow/c/abi.h)."""


_SCHEMA_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Schema))
_ARRAY_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Array))
_Schema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", _SCHEMA_RELEASE),
    ("private_data", ctypes.c_void_p),
]
_Array._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", _ARRAY_RELEASE),
    ("private_data", ctypes.c_void_p),
]

# What a live array points into, by the key in its private_data: the consumer may move the
# struct (the release callback gets the moved copy), so the key travels with it.
_ALIVE: dict[int, tuple[Any, ...]] = {}
_KEYS = itertools.count(1)


def _release_schema(schema: Any) -> None:
    schema.contents.release = _SCHEMA_RELEASE()


def _release_array(array: Any) -> None:
    _ALIVE.pop(array.contents.private_data or 0, None)
    array.contents.release = _ARRAY_RELEASE()


# Module-level: a callback must outlive every struct that names it.
_SCHEMA_RELEASE_FN = _SCHEMA_RELEASE(_release_schema)
_ARRAY_RELEASE_FN = _ARRAY_RELEASE(_release_array)

_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _LargeBinary:
    """`count` binary values over `data`: value i is data[offsets[i]:offsets[i + 1]]."""

    def __init__(
        self, count: int, offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8]
    ) -> None:
        self._count = count
        self._offsets = offsets
        self._data = data
        # Read by the consumer while it imports (Polars copies the field; it does not call
        # this struct's release): alive as long as this object, which the call holds.
        self._schema = _Schema(
            format=b"Z", name=b"raw", flags=2, n_children=0, release=_SCHEMA_RELEASE_FN
        )

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        buffers = (ctypes.c_void_p * 3)(None, self._offsets.ctypes.data, self._data.ctypes.data)
        array = _Array(
            length=self._count,
            null_count=0,
            offset=0,
            n_buffers=3,
            n_children=0,
            buffers=buffers,
            release=_ARRAY_RELEASE_FN,
        )
        key = next(_KEYS)
        array.private_data = key
        _ALIVE[key] = (array, buffers, self._offsets, self._data)
        return (
            _capsule(ctypes.addressof(self._schema), b"arrow_schema", None),
            _capsule(ctypes.addressof(array), b"arrow_array", None),
        )


def binary_lines(
    count: int, offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8]
) -> pl.Series:
    """A Binary Series of `count` values over `data` cut at `offsets` (count + 1 of them)."""
    assert offsets.dtype == np.int64 and offsets.flags.c_contiguous and len(offsets) > count
    assert data.dtype == np.uint8 and data.flags.c_contiguous
    series = pl.Series(_LargeBinary(count, offsets, data))
    assert series.dtype == pl.Binary and series.len() == count
    return series
