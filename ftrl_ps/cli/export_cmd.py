"""``ftrl-ps export``: save (and evaluate) the model held by running servers."""

from __future__ import annotations

import argparse

from ftrl_ps.cli import _common as c

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run"]

NAME = "export"
HELP = "save the model held by running parameter servers (optionally after the workers end)"
DESCRIPTION = """\
Read the FTRL state from every server shard and write it as a model file. With
--wait it first waits until every configured worker (--num-workers of the
servers) has finished its share: use it as the last step of a cluster run,
e.g. in docker compose. If some never registered, or died and were not
replaced, it says so on stderr and keeps waiting for them until --timeout,
then fails without writing a model (--allow-incomplete: export what there is).
With --test it then prints test log loss and AUC.

The model file gets exactly what the servers hold: their bits, dtype (float64
stays float64) and hyper-parameters. --bits/--dtype/--alpha/--beta/--l1/--l2,
if given, must match them.

example:
  ftrl-ps export --server http://127.0.0.1:7000,http://127.0.0.1:7001 \\
      --wait --model model.ftrl --test test.svm
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c.add_server_arguments(parser)
    parser.add_argument("--model", required=True, metavar="OUT", help="model file to write")
    parser.add_argument("--test", metavar="TEST",
                        help="evaluate the model on this libsvm data: a file, directory, "
                             "glob or fsspec URL, as train --test")
    parser.add_argument(
        "--wait", action="store_true",
        help="first wait until every configured worker has finished its share",
    )
    parser.add_argument(
        "--allow-incomplete", action="store_true",
        help="with --wait: once no worker is running, export even if some configured "
        "workers never registered or died without a replacement (a warning, and "
        "'complete': false in the results); by default the export waits for them",
    )
    parser.add_argument(
        "--timeout",
        type=c.finite_float,
        default=86400.0,
        metavar="SECONDS",
        help="give up waiting after this long (default one day)",
    )
    c.add_start_timeout_argument(parser, "TEST")
    parser.add_argument("--metrics-json", metavar="FILE", help="write results as JSON")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    c.add_model_arguments(parser, resumable=False)
    c.add_input_arguments(parser)



def run(args: argparse.Namespace) -> int:
    from ftrl_ps.ps.export import ExportOptions, run_export

    c.check_outputs((args.model, "--model"), (args.metrics_json, "--metrics-json"),
                    inputs=((args.test, "the test data"),))
    run_export(c.options_from(ExportOptions, args))
    return 0
