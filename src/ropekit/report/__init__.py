# SPDX-License-Identifier: MIT
"""``ropekit report``: a self-contained HTML page of figures showing what a RoPE configuration does.

Import the pieces from their modules (``ropekit.report.build``, ``.page``, ``.sources``, ``.lab_source``,
``.figures``, ``.captions``, ``.plotting``); this package imports nothing heavy so that ``import ropekit`` stays
light.
"""

__all__: list[str] = []
