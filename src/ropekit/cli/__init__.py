# SPDX-License-Identifier: MIT
"""The ``ropekit`` command line (``ropekit inspect``, ``ropekit precision``; also ``python -m ropekit``)."""
