"""Reason codes of a bad line, as the parser kernel reports them (texts in
:mod:`ftrl_ps.data.libsvm`). No numba here: the wrappers read them without
loading the kernels."""

from __future__ import annotations

__all__ = ["R_BAD_VALUE", "R_EMPTY_NAME", "R_EMPTY_VALUE", "R_LABEL", "R_RANGE", "R_SUM_RANGE"]

R_LABEL = 1
R_EMPTY_NAME = 2
R_EMPTY_VALUE = 3
R_BAD_VALUE = 4
R_RANGE = 5
R_SUM_RANGE = 6
