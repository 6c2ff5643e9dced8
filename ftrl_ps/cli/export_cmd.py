"""``ftrl-ps export``: save (and evaluate) the model held by running servers."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ftrl_ps.cli import _common as c
from ftrl_ps.errors import ClockTimeoutError

NAME = "export"
HELP = "save the model held by running parameter servers (optionally after the workers end)"
DESCRIPTION = """\
Read the FTRL state from every server shard and write it as a model file. With
--wait it first waits until every expected worker has finished or been marked
dead (use it as the last step of a cluster run, e.g. in docker compose). With
--test it then prints test log loss and AUC.

The hyper-parameters (--alpha, --beta, --l1, --l2) are stored in the model
file and must be the ones the workers trained with.

example:
  ftrl-ps export --server http://127.0.0.1:7000,http://127.0.0.1:7001 \\
      --wait --model model.ftrl --test test.svm
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c.add_server_arguments(parser)
    parser.add_argument("--model", required=True, metavar="OUT", help="model file to write")
    parser.add_argument("--test", metavar="TEST", help="evaluate the model on this libsvm file")
    parser.add_argument(
        "--wait", action="store_true", help="first wait until no worker is live or missing"
    )
    parser.add_argument(
        "--timeout",
        type=c.finite_float,
        default=86400.0,
        metavar="SECONDS",
        help="give up waiting after this long (default one day)",
    )
    parser.add_argument("--metrics-json", metavar="FILE", help="write results as JSON")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    c.add_model_arguments(parser, resumable=False)
    c.add_input_arguments(parser)


def workers_done(snapshot: dict) -> bool:
    """True when shard 0's clock shows no live and no missing worker."""
    workers = snapshot.get("workers", [])
    live = [w for w in workers if w.get("state") == "live"]
    return bool(workers) and not live and not snapshot.get("missing_indices")


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.ps.client import PSClient
    from ftrl_ps.core.modelio import SavedModel, save_model
    from ftrl_ps.learn.training import evaluate

    if args.test:
        c.check_input(args.test, "test")
    urls = c.server_urls(args)
    with PSClient(urls, token=c.server_token(args)) as client:
        layout = client.layout
        if args.wait:
            deadline = time.monotonic() + args.timeout
            last = 0.0
            while True:
                snap = client.status().get("clock") or {}
                if workers_done(snap):
                    break
                if time.monotonic() > deadline:
                    raise ClockTimeoutError(f"workers still running after {args.timeout:g} s")
                if not args.quiet and time.monotonic() - last > 10:
                    last = time.monotonic()
                    states = [
                        f"{w['index']}:{w['state']}@{w['clock']}" for w in snap.get("workers", [])
                    ]
                    print(f"export: waiting for workers {' '.join(states)}", file=sys.stderr)
                time.sleep(0.5)
        keys, n, z = client.dump_state()
        snap = client.status().get("clock") or {}
    dtype = args.dtype or "float32"
    saved = SavedModel(
        bits=layout.bits,
        params=c.params_from(args),
        dtype=dtype,
        keys=np.asarray(keys),
        n=np.asarray(n, dtype=dtype),
        z=np.asarray(z, dtype=dtype),
    )
    workers = snap.get("workers", [])
    rows = int(sum(w.get("stats", {}).get("rows", 0) for w in workers))
    dead = [w["index"] for w in workers if w.get("state") == "dead"]
    path = save_model(args.model, saved, rows=rows, servers=len(urls), dead_workers=dead)
    print(f"model saved to {path} ({saved.keys.size:,} keys with state, {rows:,} rows trained)")
    if dead:
        print(f"warning: worker(s) {dead} were marked dead during the run", file=sys.stderr)
    results: dict[str, object] = {"rows": rows, "dead_workers": dead, "keys": int(saved.keys.size)}
    if args.test:
        ev = evaluate(saved.to_ftrl(), args.test, chunk_bytes=args.chunk_mb << 20)
        print(
            f"test {args.test}: logloss {ev['logloss']:.5f}  AUC {ev['auc']:.5f}  "
            f"rows {ev['rows']:,}"
        )
        results.update({f"test_{k}": v for k, v in ev.items()})
    c.write_json(args.metrics_json, results)
    return 0
