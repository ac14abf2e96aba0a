"""A SteM's implied columns (modules/stem/storage.py): row ids that are the positions and
Done bits that are one value are not written, and are written out once the pattern
breaks; every read gives what a plain array would have held."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from eddies.modules.stem.storage import DoneBits, RowIds


@given(st.lists(st.tuples(st.integers(0, 6), st.booleans()), max_size=12), st.booleans())
@settings(max_examples=200, deadline=None)
def test_row_ids_read_as_a_plain_array(batches, implied):
    rows = RowIds(4, implied=implied)
    plain: list[int] = []
    for n, contiguous in batches:
        ids = (
            np.arange(len(plain), len(plain) + n, dtype=np.int64)
            if contiguous
            else np.arange(n, dtype=np.int64) * 3 + 1000
        )
        rows.extend(ids)
        plain += ids.tolist()
        assert len(rows) == len(plain)
        assert rows.view().tolist() == plain
        positions = np.array([i for i in range(len(plain)) if i % 2 == 0], dtype=np.int64)
        assert rows.at(positions).tolist() == [plain[i] for i in positions]
    assert rows.is_positions == (implied and plain == list(range(len(plain))))


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), max_size=12), st.booleans())
@settings(max_examples=200, deadline=None)
def test_done_bits_read_as_a_plain_array(batches, restore_first):
    done = DoneBits(2)
    plain: list[int] = []
    if restore_first:
        done.extend(np.array([1, 1], dtype=np.uint64))
        plain += [1, 1]
    for n, bits in batches:
        done.extend_constant(n, bits)
        plain += [bits] * n
        assert done.view().tolist() == plain
    if done.constant is not None:
        assert len(set(plain)) <= 1 and done.constant == (plain[0] if plain else 0)
    else:
        assert restore_first or len(set(plain)) > 1
