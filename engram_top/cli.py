"""engram-top's command line (filled in below the sim subcommand as the product grows)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="engram-top")
    sub = parser.add_subparsers(dest="command")
    sim = sub.add_parser("sim", help="the simulated node")
    simsub = sim.add_subparsers(dest="sim_command", required=True)
    from engram_top.simnode import server
    serve = simsub.add_parser("serve", help="run one simulated SGLang server")
    server.add_arguments(serve)
    args = parser.parse_args(argv)
    if args.command == "sim":
        return server.main(args=args)
    parser.print_help()
    return 0
