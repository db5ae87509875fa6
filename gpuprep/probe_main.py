"""The probe's entry point on a node (the zipapp's __main__ calls main): the standard library and what
the zipapp bundles only, no click. `snapshot` prints the host's snapshot; `textfile` judges the host and
writes node_exporter's textfile (temp file and rename, so the collector never reads half a file)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .errors import exit_for


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuprep-probe", description="gpuprep's node probe")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("snapshot", help="print this host's snapshot (JSON)")
    textfile = commands.add_parser("textfile", help="judge this host, write Prometheus text for node_exporter")
    textfile.add_argument("-o", "--output", required=True, metavar="FILE.prom")
    textfile.add_argument("--profile", metavar="NAME|FILE.toml")
    textfile.add_argument("--no-docker", action="store_true")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from .probe import collect
        if args.command == "snapshot":
            sys.stdout.write(collect(docker=True).to_json() + "\n")
            return 0
        return _textfile(args)
    except (Exception, KeyboardInterrupt) as exc:    # noqa: BLE001 (one line, never a traceback in a timer's journal)
        code, message, _ = exit_for(exc, {"output": "-o", "profile": "--profile"})
        sys.stderr.write(f"gpuprep-probe: error: {message}\n")
        return code


TEXTFILE_MIN_PYTHON = (3, 9)     # prometheus-client, bundled for the textfile, annotates with list[...]


def _textfile(args) -> int:
    from . import api
    if sys.version_info < TEXTFILE_MIN_PYTHON:
        from .errors import BadInput
        raise BadInput(f"textfile needs python3 >= {'.'.join(map(str, TEXTFILE_MIN_PYTHON))} (prometheus-client); "
                       f"this is {sys.version.split()[0]}")
    from .output import check_destination, write_atomic
    from .report import render
    check_destination(args.output)
    api.profile(args.profile)                  # a bad profile stops before the host is probed
    result = api.check(profile_name=args.profile, docker=not args.no_docker)
    write_atomic(args.output, render(result.document(), "prometheus"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
