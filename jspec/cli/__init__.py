"""`jspec` command line: generate | bench | report | calibrate | train | assets. User mistakes exit with status 2 and
one `jspec: error: ...` line; each subcommand lives in its own module here."""

import sys

from jspec.cli.args import Parser
from jspec.errors import UserError


def build_parser() -> Parser:
    from jspec.cli.assets import add_assets_parser
    from jspec.cli.bench import add_bench_parsers
    from jspec.cli.calibrate import add_calibrate_parser
    from jspec.cli.generate import add_generate_parser
    from jspec.cli.train import add_train_parser

    parser = Parser(prog="jspec", description="Lossless speculative decoding in JAX.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    add_generate_parser(sub)
    add_bench_parsers(sub)
    add_calibrate_parser(sub)
    add_train_parser(sub)
    add_assets_parser(sub)
    return parser


def _check_attention_choice() -> None:
    """JSPEC_ATTENTION is read deep inside the model's trace: a bad value fails here, with one line."""
    from pallas_kernels.tree_attention import choose_kernel

    try:
        choose_kernel()
    except ValueError as e:
        raise UserError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser().parse_args(argv)
        args.argv = argv  # the command line as given, for the reports
        if args.command != "assets":
            _check_attention_choice()
        args.run(args)
    except UserError as e:
        print(f"jspec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jspec: interrupted", file=sys.stderr)
        return 130
    return 0
