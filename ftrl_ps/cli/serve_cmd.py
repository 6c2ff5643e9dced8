"""``ftrl-ps serve``: the prediction service (FastAPI + uvicorn), optionally learning online."""

from __future__ import annotations

import argparse

from ftrl_ps.cli import _common as c
from ftrl_ps.ps.auth import TOKEN_ENV
from ftrl_ps.server.serve_options import PREDICT_TOKEN_ENV

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run"]

NAME = "serve"
HELP = "serve predictions over HTTP from a model file or the live cluster; learn online"
DESCRIPTION = f"""\
Answer POST /v1/predict with P(click) for every row of the request, from a
model file (--model, reloaded when the file is atomically replaced) or from
the live parameter-server cluster (--server, refreshed every --refresh
seconds with only the parameter groups that changed). With --server and
--learn, POST /v1/learn takes labelled rows: a worker loop inside the service
trains on them and pushes to the cluster at least every --push-interval
seconds. Answers equal 'ftrl-ps predict' on the same model (within 1e-6).

Bodies (Content-Type): text/plain libsvm lines (the label may be there and
is ignored for predict), application/json {{"rows": [{{"features":
{{"user=42": 1, "123": 0.5}}, "label": 1}}]}} (names hashed as training
hashes them), or binary application/x-ftrl-ps. A malformed row answers 400
naming its line and field; nothing of that request is scored or learned.

Also: GET /health (liveness), GET /ready (readiness: 503 until a model is
served; a failing source keeps the last model served, and the service ready),
GET /v1/status (model version, reload/refresh errors, learner, freshness),
GET /metrics (Prometheus: model version and age, reloads, the learner's rows).
With --start-timeout it first waits for the shards (or the --model file).
Once serving it prints 'listening on http://HOST:PORT'.

Staleness: the learner of --learn pushes asynchronously and never registers
with or waits on the SSP clock, so it runs against a cluster of any
staleness. A cluster just for online learning: 'ftrl-ps server --num-workers 1
--staleness inf' (which also lets 'ftrl-ps worker --input -' stream workers,
which are SSP workers, run without waiting for one another).

examples:
  ftrl-ps serve --model model.ftrl --port 8000
  ftrl-ps server --port 7000 --num-workers 1 --staleness inf &
  ftrl-ps serve --server http://127.0.0.1:7000 --port 8000 --learn
  curl -s -H 'Content-Type: text/plain' --data-binary @test.svm \\
      http://127.0.0.1:8000/v1/predict

security: binds 127.0.0.1 by default. --token (default ${TOKEN_ENV}) guards
/v1/learn and is sent to the cluster; --predict-token (default
${PREDICT_TOKEN_ENV}) guards /v1/predict when set.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("model source (exactly one)")
    src.add_argument("--model", metavar="FILE", help="serve this model file; reloaded when "
                     "it is replaced (atomically, e.g. by 'ftrl-ps train' or 'export')")
    src.add_argument("--reload-interval", type=c.positive_float, default=1.0,
                     metavar="SECONDS", help="how often to look for a new --model file "
                     "(default 1)")
    src.add_argument("--server", metavar="URL[,URL...]",
                     help="serve the live cluster: parameter-server shard URLs in shard order")
    src.add_argument("--refresh", type=c.positive_float, default=0.5, metavar="SECONDS",
                     help="pull the cluster's changed parameter groups every SECONDS "
                     "(default 0.5; also right after each push of the learner)")

    learn = parser.add_argument_group("online learning (--server only)")
    learn.add_argument("--learn", action="store_true",
                       help="add POST /v1/learn: train on labelled rows, push to the cluster")
    learn.add_argument("--push-interval", type=c.positive_float, default=0.5, metavar="SECONDS",
                       help="push what was learned at least this often (default 0.5)")
    learn.add_argument("--batch-size", type=c.positive_int, default=500,
                       help="rows per training step (default 500)")
    learn.add_argument("--fetch-step", type=c.positive_int, default=4,
                       help="steps per pull of fresh state (default 4)")
    learn.add_argument("--push-step", type=c.positive_int, default=4,
                       help="also push after this many steps (default 4)")
    learn.add_argument("--num-workers", type=c.positive_int, default=1,
                       help="learners training the cluster at the same time; dense keys' "
                       "deltas are divided by it (merge rule, default 1)")
    learn.add_argument("--dense-fraction", type=c.finite_float, default=0.5, metavar="F",
                       help="keys in this share of a push's rows (and the bias) are dense "
                       "for the servers' merge rule, as 'ftrl-ps worker --dense-fraction' "
                       "says: e.g. 'contraction' scales their deltas for the learners, "
                       "'threshold' averages them over the learners (default 0.5)")
    learn.add_argument("--max-queue-rows", type=c.positive_int, default=1_000_000,
                       help="rows queued for the learner, a request's included, before "
                       "/v1/learn answers 503; a request with more rows: 413 "
                       "(default 1000000)")

    net = parser.add_argument_group("network and limits")
    net.add_argument("--host", default="127.0.0.1",
                     help="address to bind (default 127.0.0.1, loopback only)")
    net.add_argument("--port", type=int, default=0,
                     help="TCP port; 0 (default) picks a free port and prints it")
    net.add_argument("--fd", type=int, default=None, metavar="FD",
                     help="serve on this already-listening socket (then --host/--port unused)")
    net.add_argument("--token", default=None,
                     help=f"bearer token of /v1/learn and of the cluster (default ${TOKEN_ENV})")
    net.add_argument("--predict-token", default=None,
                     help=f"bearer token /v1/predict requires (default ${PREDICT_TOKEN_ENV}; "
                     "unset: predictions are open)")
    net.add_argument("--max-body-mb", type=c.positive_float, default=16.0, metavar="MB",
                     help="largest request body in MiB; larger -> 413 (default 16)")
    net.add_argument("--max-rows", type=c.positive_int, default=100_000,
                     help="most rows per request; more -> 413 (default 100000)")
    c.add_start_timeout_argument(parser, "the --model file")
    net.add_argument("--log-level", default="info",
                     choices=("critical", "error", "warning", "info", "debug"),
                     help="lowest level logged on stderr (default info: model reloads, "
                     "failed reloads, the cluster source failing and recovering, rows the "
                     "learner drops); uvicorn's own records from warning up, all at debug")

    g = parser.add_argument_group(
        "hyper-parameters (--server: the servers' are used, they own the model; one given "
        "here must equal theirs)")
    d = c.PARAM_DEFAULTS
    g.add_argument("--alpha", type=c.finite_float, help=f"FTRL alpha (default {d.alpha})")
    g.add_argument("--beta", type=c.finite_float, help=f"FTRL beta (default {d.beta})")
    g.add_argument("--l1", type=c.finite_float, help=f"L1 (default {d.l1})")
    g.add_argument("--l2", type=c.finite_float, help=f"L2 (default {d.l2})")


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.server.serve_options import ServeOptions, run_serve

    if args.model is not None and args.start_timeout == 0:  # else: waited for at start
        c.check_input(args.model, "model")
    return run_serve(c.options_from(ServeOptions, args))
