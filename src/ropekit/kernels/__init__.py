# SPDX-License-Identifier: MIT
"""Compiled kernels: the fused CPU kernel (C, built at first use) and the Triton kernels (GPUs)."""
