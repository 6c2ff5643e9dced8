"""Argument groups and helpers shared by several sub-commands.

Sub-commands turn their flags into the typed options of the layer below with
:func:`options_from` (an option's field name is its flag's ``dest``); nothing
below ``ftrl_ps.cli`` sees an ``argparse.Namespace``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from typing import Any, TypeVar

from ftrl_ps.cluster.signals import sigterm_as_interrupt
from ftrl_ps.core.params import DTYPES, FTRLParams, check_bits
from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.auth import TOKEN_ENV
from ftrl_ps.server.options import DEFAULT_BITS

__all__ = [
    "PARAM_DEFAULTS",
    "add_input_arguments",
    "add_model_arguments",
    "add_server_arguments",
    "add_start_timeout_argument",
    "bits_arg",
    "chunk_mb_arg",
    "check_input",
    "check_model",
    "check_outputs",
    "finite_float",
    "non_negative_float",
    "non_negative_int",
    "options_from",
    "params_from",
    "positive_float",
    "positive_int",
    "sigterm_as_interrupt",
    "staleness_arg",
]

T = TypeVar("T")
PARAM_DEFAULTS = FTRLParams()


def _int_at_least(text: str, minimum: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def chunk_mb_arg(text: str) -> int:
    """``--chunk-mb``: 1..1024 (each chunk is held, with its parsed arrays, in memory)."""
    value = positive_int(text)
    if value > 1024:
        raise argparse.ArgumentTypeError(f"expected at most 1024 (MiB), got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def staleness_arg(text: str) -> int | None:
    """SSP staleness: an integer >= 0, or ``inf`` (also ``none``/``async``) for None."""
    if text.strip().lower() in ("inf", "infinity", "none", "async"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer >= 0 or 'inf', got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"staleness must be >= 0, got {value}")
    return value


def bits_arg(text: str) -> int:
    try:
        return check_bits(int(text))
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(
            f"bits must be an integer in [1, 30], got {text!r}"
        ) from exc


def add_model_arguments(
    parser: argparse.ArgumentParser, *, resumable: bool = True, params_from: bool = False
) -> None:
    """``--bits``, hyper-parameters and ``--dtype`` (defaults None so a resumed model, or
    the one of ``--params-from``, fills what is not given)."""
    g = parser.add_argument_group("model")
    g.add_argument(
        "--bits",
        type=bits_arg,
        default=None,
        help=f"feature space of 2**BITS slots plus a bias (default {DEFAULT_BITS}); "
        "indices >= 2**BITS and non-numeric names are hashed into it",
    )
    d = PARAM_DEFAULTS
    g.add_argument(
        "--alpha", type=finite_float, help=f"FTRL learning rate alpha (default {d.alpha})"
    )
    g.add_argument("--beta", type=finite_float, help=f"FTRL beta (default {d.beta})")
    g.add_argument(
        "--l1", type=finite_float, help=f"L1 regularisation; larger = sparser (default {d.l1})"
    )
    g.add_argument("--l2", type=finite_float, help=f"L2 regularisation (default {d.l2})")
    g.add_argument(
        "--dtype", choices=DTYPES, help="storage type of the n/z state (default float32)"
    )
    if params_from:
        g.add_argument(
            "--params-from",
            metavar="MODEL",
            help="take alpha, beta, l1, l2, the passes, bits and dtype from MODEL (those "
            "'ftrl-ps tune' chose, or any model's); flags given explicitly win",
        )
    if resumable:
        g.add_argument(
            "--resume",
            metavar="MODEL",
            help="start from a saved model (its bits, dtype and hyper-parameters are used)",
        )


def params_from(args: argparse.Namespace) -> FTRLParams:
    d = PARAM_DEFAULTS.as_dict()
    given = {k: getattr(args, k) for k in d if getattr(args, k, None) is not None}
    return FTRLParams(**{**d, **given})


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("input")
    g.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip malformed lines (counted and reported at the end) instead of stopping",
    )
    g.add_argument(
        "--chunk-mb",
        type=chunk_mb_arg,
        default=4,
        help="read the input in chunks of this many MiB, 1..1024 (default 4); memory "
        "stays bounded",
    )


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """``--server URL[,URL...]`` and ``--token`` of commands that talk to running servers."""
    parser.add_argument(
        "--server",
        required=True,
        metavar="URL[,URL...]",
        help="parameter-server shard URLs in shard order, comma-separated",
    )
    parser.add_argument(
        "--token", default=None, help=f"bearer token of the servers (default: ${TOKEN_ENV})"
    )



def add_start_timeout_argument(parser: argparse.ArgumentParser, files: str) -> None:
    """``--start-timeout``: how long a client of the servers waits for them (and
    for its ``files``) at start-up."""
    parser.add_argument(
        "--start-timeout",
        type=non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help=f"wait up to this long at start for every server to answer /health and for "
        f"{files} to exist, saying what is missing (processes in containers start in any "
        "order); 0 (default): fail at once",
    )


def check_input(path: str, what: str = "input") -> str:
    """``-``, an existing file, or a directory / glob / fsspec URL with files."""
    if path == "-" or os.path.isfile(path):
        return path
    from ftrl_ps.data.sources import expand

    try:
        expand(path)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    return path


def check_model(path: str, what: str = "model") -> str:
    """An existing model file, checked before any work (a kernel compile, a read of
    the data): a wrong path is a usage error (exit 2), like a missing input."""
    if not os.path.isfile(path):
        raise ConfigError(f"{what} file not found: {path}")
    return path


def check_outputs(*outputs: tuple[str | None, str],
                  inputs: tuple[tuple[str | None, str], ...] = ()) -> None:
    """Each ``(path, flag)`` given can be written (folders made as the model file's
    writer makes them): a wrong path fails now, not after the run it would save.
    No output may be one of the ``inputs`` (``(path, what)``: a data file it would
    replace) or another output (one would replace the other)."""
    from ftrl_ps.core.outfile import check_writable

    taken = {os.path.realpath(p): what for p, what in inputs
             if p and p != "-" and os.path.isfile(p)}
    for path, flag in outputs:
        if path and path != "-":
            real = os.path.realpath(path)
            if real in taken:
                raise ConfigError(f"{flag} {path} is also {taken[real]}: it would be "
                                  "replaced; write it elsewhere")
            taken[real] = f"the {flag} file"
        if path:
            check_writable(path, flag, make_parents=flag == "--model")


def options_from(cls: type[T], args: argparse.Namespace, **overrides: Any) -> T:
    """An options dataclass ``cls`` filled from the parsed flags of the same names.

    Fields without a flag keep their defaults; ``overrides`` win over both.
    """
    assert dataclasses.is_dataclass(cls)
    values = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(cls)
        if hasattr(args, f.name)
    }
    values.update(overrides)
    return cls(**values)

