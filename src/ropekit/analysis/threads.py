# SPDX-License-Identifier: MIT
"""Run the analyses' many small tensor operations on one thread.

The analyses (band tables, the base-bound scan, phase errors) are thousands of operations on tensors of a few
thousand elements: intra-op threads only add synchronisation, and on a busy machine a two-thread pool made the
base-bound scan about 50x slower than one thread. :func:`single_thread` sets one thread for the duration of a
block and restores the previous setting.

Shapes: none.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["single_thread"]


@contextmanager
def single_thread() -> Iterator[None]:
    """``with single_thread(): ...`` runs torch's intra-op work on one thread, then restores the thread count."""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
