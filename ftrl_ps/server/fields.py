"""Field types of JSON request bodies that mean what their JSON Schema says.

pydantic's lax ``int`` takes ``true`` as 1; JSON Schema's integer takes ``3.0``
and never a boolean. The API tests (schemathesis) hold the routes to the schema.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

__all__ = ["Count", "Epoch", "NonNegative", "integer", "number"]


def integer(value: Any) -> Any:
    """JSON Schema's integer: ``3`` or ``3.0``, never ``true``."""
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def number(value: Any) -> Any:
    """JSON Schema's number: never ``true`` or ``false``."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


#: a count or sequence number (a JSON-safe integer >= 0)
Count = Annotated[int, Field(ge=0, le=(1 << 53) - 1), BeforeValidator(integer)]
#: a finite number >= 0 (e.g. a sum of log losses)
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False), BeforeValidator(number)]
#: a registration's epoch (>= 1)
Epoch = Annotated[int, Field(ge=1, le=(1 << 53) - 1), BeforeValidator(integer)]
