"""``ftrl-ps server``: run one parameter-server shard (FastAPI + uvicorn)."""

from __future__ import annotations

import argparse

from ftrl_ps.cli import _common as c
from ftrl_ps.ps.auth import TOKEN_ENV
from ftrl_ps.ps.layout import DEFAULT_GROUP_SIZE
from ftrl_ps.ps.merge import DEFAULT_RULE, RULES

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run"]

NAME = "server"
HELP = "run one parameter-server shard (HTTP, one process per shard)"
DESCRIPTION = """\
Run ONE shard of the ftrl-ps parameter server. The shard holds the FTRL state
(n, z) of its key range and adds the deltas workers push; shard 0 also runs
the worker registry and the SSP clock. Start M processes with --shard-index
0..M-1 and otherwise the same flags for an M-shard cluster: --num-shards,
--bits, --group-size, and also --num-workers, --staleness, --merge-rule, the
hyper-parameters and --warm-rounds (workers refuse shards that differ).

Once serving, the command prints exactly one line on stdout:
    listening on http://127.0.0.1:PORT
(with --port 0 the OS picks a free port; a launcher reads this line).

The servers own the model: its hyper-parameters (--alpha --beta --l1 --l2),
--bits and --dtype are set here, reported by /v1/status and adopted by the
workers; 'ftrl-ps export' saves exactly them.

Durability: with --checkpoint-dir the shard writes an atomic, checksummed
snapshot every --checkpoint-interval seconds (and at shutdown), and a shard
started on the same directory restores the newest valid one (a corrupt one is
reported and skipped). Workers replay what a restored shard lacks
(docs/durability.md).

Security: binds 127.0.0.1 by default. With --token (or $FTRL_PS_TOKEN) every
request but GET /health and GET /ready must send 'Authorization: Bearer TOKEN'
(reads, /docs and /openapi.json included).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    net = parser.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1",
                     help="address to bind (default 127.0.0.1, loopback only)")
    net.add_argument("--port", type=int, default=0,
                     help="TCP port; 0 (default) picks a free port and prints it")
    net.add_argument("--fd", type=int, default=None, metavar="FD",
                     help="serve on this already-listening socket inherited from a launcher "
                          "(then --host and --port are not used)")
    net.add_argument("--token", default=None,
                     help="bearer token required on every request but /health and /ready "
                          f"(default: ${TOKEN_ENV}, else no authentication)")
    net.add_argument("--max-body-mb", type=c.positive_float, default=64.0, metavar="MB",
                     help="largest accepted request body in MiB; larger -> 413 (default 64). "
                     "Workers read it from the status and split rounds whose push "
                     "would be larger")
    net.add_argument("--body-timeout", type=c.positive_float, default=30.0, metavar="SECONDS",
                     help="a request body that stalls this long is answered 408 and its "
                          "connection closed (default 30)")
    net.add_argument("--max-exports", type=c.positive_int, default=2, metavar="N",
                     help="state exports (GET /v1/state) served at once, each streamed in "
                          "bounded memory; more get 503 and clients retry (default 2)")
    net.add_argument("--log-level", default="warning",
                     choices=("critical", "error", "warning", "info", "debug"),
                     help="uvicorn log level, logs go to stderr (default warning)")

    net.add_argument("--peers", default=None, metavar="URL[,URL...]",
                     help="shard 0: URLs of shards 1..M-1, so that its /dashboard shows "
                          "their keys and load (default: only this shard)")

    lay = parser.add_argument_group("layout (must match the workers)")
    lay.add_argument("--bits", type=c.bits_arg, default=c.DEFAULT_BITS,
                     help="2**bits hashed feature slots plus one bias key "
                          f"(default {c.DEFAULT_BITS}, as 'ftrl-ps train')")
    lay.add_argument("--group-size", type=int, default=DEFAULT_GROUP_SIZE,
                     help=f"keys per parameter group, the unit of locking and of shard "
                          f"boundaries (default {DEFAULT_GROUP_SIZE})")
    lay.add_argument("--shard-index", type=int, default=0,
                     help="which shard this process serves, 0-based (default 0)")
    lay.add_argument("--num-shards", type=int, default=1,
                     help="number of shards in the cluster (default 1)")
    lay.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                     help="storage dtype of n and z (default float32)")
    lay.add_argument("--init-model", default=None, metavar="PATH",
                     help="model file to start from (this shard loads its key range)")

    lay.add_argument("--merge-rule", choices=RULES, default=DEFAULT_RULE,
                     help="how the workers' deltas are merged: 'contraction' (default: keys in "
                          "at least --dense-fraction of a push's rows, and the bias, are "
                          "scaled between their mean over the workers and their sum by how "
                          "much the push's rows contract them, the others summed), "
                          "'threshold' (those keys averaged), or for "
                          "experiments 'compose' (docs/algorithm.md), 'compose-late', 'compose-n', "
                          "'curvature' and 'sum'; the workers follow the servers")

    mod = parser.add_argument_group("model (owned by the servers, adopted by the workers)")
    d = c.PARAM_DEFAULTS
    mod.add_argument("--alpha", type=c.finite_float, default=d.alpha,
                     help=f"FTRL learning rate alpha (default {d.alpha})")
    mod.add_argument("--beta", type=c.finite_float, default=d.beta,
                     help=f"FTRL beta (default {d.beta})")
    mod.add_argument("--l1", type=c.finite_float, default=d.l1,
                     help=f"L1 regularisation (default {d.l1})")
    mod.add_argument("--l2", type=c.finite_float, default=d.l2,
                     help=f"L2 regularisation (default {d.l2})")

    dur = parser.add_argument_group("durability")
    dur.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                     help="write checkpoints of this shard here and restore the newest valid "
                          "one at start (default: none, the state lives in memory only)")
    dur.add_argument("--checkpoint-interval", type=c.positive_float, default=30.0,
                     metavar="SECONDS", help="seconds between checkpoints; an interval in "
                     "which nothing changed writes none (default 30)")
    dur.add_argument("--start-timeout", type=c.non_negative_float, default=0.0,
                     metavar="SECONDS",
                     help="wait up to this long at start for --checkpoint-dir to exist (a "
                          "volume being mounted) instead of creating it, then fail; 0 "
                          "(default): create it when missing")

    ssp = parser.add_argument_group("SSP clock (used by shard 0)")
    ssp.add_argument("--staleness", type=c.staleness_arg, default=None, metavar="S",
                     help="max clock gap between fastest and slowest live worker: "
                          "0 = BSP lockstep, 'inf' (default) = asynchronous")
    ssp.add_argument("--num-workers", type=int, default=None,
                     help="expected number of workers; missing ones count at clock 0 "
                          "until they register (default: the first registration says)")
    ssp.add_argument("--worker-timeout", type=c.positive_float, default=30.0, metavar="SECONDS",
                     help="a worker without heartbeat for this long is dead and no longer "
                          "holds back the others (default 30)")
    ssp.add_argument("--registration-timeout", type=c.positive_float, default=60.0,
                     metavar="SECONDS",
                     help="after this long from the first registration, workers that never "
                          "registered stop holding back the others (default 60)")
    ssp.add_argument("--clock-wait-timeout", type=c.positive_float, default=5.0, metavar="SECONDS",
                     help="longest one clock/wait request blocks before answering "
                          "ready=false so the client asks again (default 5)")
    ssp.add_argument("--warm-rounds", type=c.non_negative_int, default=0, metavar="R",
                     help="warm start: the first worker to ask trains R rounds alone, its "
                          "pushes merged as one worker's, before the others begin (workers "
                          "that all start from the initial model each make its first, largest "
                          "moves; docs/algorithm.md, section 13) (default 0: none)")



def run(args: argparse.Namespace) -> int:
    from ftrl_ps.server.options import ShardOptions
    from ftrl_ps.server.run import run_shard

    return run_shard(c.options_from(ShardOptions, args))
