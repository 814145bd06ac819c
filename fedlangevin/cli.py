"""Command-line entry point: ``fedlangevin <command> ...`` (also ``python -m fedlangevin``).

Each command lives in its own module exposing ``configure(parser)`` (adds arguments to an
``argparse`` sub-parser) and ``main(args) -> int``. Modules are imported only when their
command runs, so ``fedlangevin --help`` stays fast and optional extras are only needed by
the commands that use them.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from typing import Sequence

#: command name -> (module path, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("fedlangevin.commands.demo", "FA-LD on the paper's Gaussian simulation: W2 table + figure (about 15 seconds on a CPU)"),
    "simulate": ("fedlangevin.commands.simulate", "reproduce the paper's studies (Sec. 7): PNG + CSV per study"),
    "privacy": ("fedlangevin.commands.privacy", "differential-privacy budget of an FA-LD run (paper bound and tight accountant)"),
    "compare": ("fedlangevin.commands.compare", "FA-LD beside quantized-communication FL optimizers on the same data"),
    "diagnose": ("fedlangevin.commands.diagnose", "convergence diagnostics (R-hat, ESS, summary) of saved samples"),
    "validate": ("fedlangevin.commands.validate", "FA-LD's defaults on posteriordb posteriors against Stan's reference draws"),
}


def version() -> str:
    """The installed distribution's version, else the package's ``__version__`` (source checkout)."""
    from importlib import metadata

    try:
        return metadata.version("fedlangevin")
    except metadata.PackageNotFoundError:
        from fedlangevin import __version__

        return __version__


def _option_names(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, str]:
    """dest -> the option string of the sub-parser(s) that ran (e.g. 'local_steps' -> '--local-steps')."""
    names: dict[str, str] = {}
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(sub for name, sub in action.choices.items() if name in argv)
            elif action.option_strings:
                names[action.dest] = max(action.option_strings, key=len)
    return names


def _name_option(message: str, names: dict[str, str]) -> str:
    """A message starting with a library argument name that is an option's dest names the option."""
    m = re.match(r"(\w+)(?= must| is|:|=)", message)
    if m and m.group(1) in names:
        return names[m.group(1)] + message[m.end():]
    return message


def build_parser(load: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Build the parser; only the commands named in ``load`` get their full arguments."""
    parser = argparse.ArgumentParser(
        prog="fedlangevin",
        description="Bayesian federated sampling with Federated Averaging Langevin Dynamics.",
    )
    parser.add_argument("--version", action="version", version=f"fedlangevin {version()}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if load is not None and name in load:
            try:
                importlib.import_module(module).configure(p)
            except ModuleNotFoundError as exc:  # command not available in this install
                if exc.name is not None and exc.name.startswith("fedlangevin.commands"):
                    p.set_defaults(_missing=f"command '{name}' is not available in this version")
                else:
                    raise
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(load=[command] if command in COMMANDS else [])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    missing = getattr(args, "_missing", None)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    from fedlangevin.commands._checks import extra_hint, missing_module

    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.main(args) or 0)
    except ValueError as exc:  # invalid user input: one clear line, no traceback
        names = {**_option_names(parser, argv), **getattr(module, "OPTION_ALIASES", {})}
        message = _name_option(str(exc), names)
        print(f"fedlangevin {args.command}: error: {message}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional extra this run needs is not installed
        top = missing_module(exc)
        if top is None:
            raise
        print(f"fedlangevin {args.command}: error: this run needs the optional package '{top}': "
              f"{extra_hint(top)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
