"""The `engine` command: a thin shell over engine. Errors are one line that says what to do."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from cli.commands import export, inspect, reset, send, status, tables, worker
from cli.loader import LoadError
from cli.settings_options import add_setting_options
from engine import BrokerRefused, BrokerUnavailable, EngineError

if TYPE_CHECKING:
    from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-A", "--app", required=True, metavar="MODULE[:ATTRIBUTE]",
                        help="the app: module:attribute, or a module alone for module:app (default "
                             "attribute: app), e.g. -A examples.wordcount")
    common.add_argument("--loglevel", default="INFO",
                        help="what the command logs: DEBUG, INFO, WARNING or ERROR (default: INFO)")
    add_setting_options(common)
    parser = argparse.ArgumentParser(prog="engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (worker, send, inspect, tables, export, status, reset):
        module.add_parser(_WithCommon(sub, common))
    return parser


class _WithCommon:
    """Makes every command's parser the same way: the common options (-A, --loglevel, the settings), its
    `help` (the line `engine --help` lists) as the description `engine COMMAND --help` opens with, and an
    example command line its help ends with."""

    def __init__(self, sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:  # type: ignore[type-arg]
        self._sub = sub
        self._common = common

    def add_parser(self, name: str, *, help: str, example: str,  # (`help`: argparse's own name)
                   **kwargs: object) -> argparse.ArgumentParser:
        return self._sub.add_parser(  # type: ignore[no-any-return]
            name, parents=[self._common], help=help, description=f"{help[0].upper()}{help[1:]}.",
            epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter,
            **kwargs)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = getattr(logging, str(args.loglevel).upper(), None)
    if not isinstance(level, int):
        print(f"engine: --loglevel {args.loglevel!r} is not one of DEBUG, INFO, WARNING, ERROR",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=level, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(max(level, logging.WARNING))
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # here, where a closed pipe is caught below, not at exit
        return code
    except LoadError as exc:
        print(f"engine: {exc}", file=sys.stderr)
    except BrokerRefused as exc:  # a broker is there: what it refused is the whole story
        print(f"engine: {exc}", file=sys.stderr)
    except BrokerUnavailable as exc:
        print(f"engine: {exc} Start one (see README: python -m tests.kafka start) or pass --broker.",
              file=sys.stderr)
    except EngineError as exc:
        print(f"engine: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (engine topics | head): stop quietly as Unix tools do, with stdout pointed
        # at /dev/null so that Python's own flush at exit does not fail on the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
