"""Argument groups and helpers shared by several sub-commands."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from ftrl_ps.errors import ConfigError
from ftrl_ps.core.params import DTYPES, FTRLParams, check_bits

DEFAULT_BITS = 22
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


def add_model_arguments(parser: argparse.ArgumentParser, *, resumable: bool = True) -> None:
    """``--bits``, hyper-parameters and ``--dtype`` (defaults None so a resumed model wins)."""
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
        type=positive_int,
        default=4,
        help="read the input in chunks of this many MiB (default 4); memory stays bounded",
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
        "--token", default=None, help="bearer token of the servers (default: $FTRL_PS_TOKEN)"
    )


def server_urls(args: argparse.Namespace) -> list[str]:
    """The shard URLs of ``--server``."""
    return [u.strip() for u in args.server.split(",") if u.strip()]


def server_token(args: argparse.Namespace) -> str | None:
    """``--token``, else ``$FTRL_PS_TOKEN``, else None."""
    return args.token if args.token is not None else os.environ.get("FTRL_PS_TOKEN")


def check_input(path: str, what: str = "input") -> str:
    if path != "-" and not os.path.exists(path):
        raise ConfigError(f"{what} file not found: {path}")
    return path


def write_json(path: str | None, data: dict[str, Any]) -> None:
    if not path:
        return
    if path == "-":
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, target)


def report_bad_lines(count: int, examples: list[Any]) -> None:
    if not count:
        return
    print(f"skipped {count} malformed line(s); first ones:", file=sys.stderr)
    for ex in examples[:10]:
        print(f"  {ex}", file=sys.stderr)
