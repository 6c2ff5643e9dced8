"""ftrl-ps: sparse FTRL-Proximal logistic regression, single process or parameter-server cluster."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
