"""What every ``ort-roi`` command's flags accept: a value out of range is a usage error
(``Parser``: one line naming the command, the flag and the value, exit status 2), never a
traceback or a finding about the model."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line on stderr (exit status 2): the
    command, what is wrong and where to read more; its subcommands' parsers are of this
    class too."""

    def error(self, message: str) -> NoReturn:
        """Print one line (``PROG: error: MESSAGE (PROG --help)``) and exit with status 2.

        Args:
            message: argparse's or a flag type's words.
        """
        print(f"{self.prog}: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(2)


def bounded(kind: type, least: float, what: str) -> Callable[[str], int | float]:
    """A flag's type: ``kind`` (int or float) of at least ``least``.

    Args:
        kind: int or float.
        least: the smallest value accepted.
        what: the words for the values accepted ("a positive integer").

    Returns:
        the function argparse calls with the flag's text; it raises ``ArgumentTypeError``
        naming the value where it is not ``what``.
    """

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value != value or value < least or value in (float("inf"),):  # NaN, inf, too small
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what  # argparse's "invalid <name> value" where it words it itself
    return parse


#: The flags' types: a count of at least 1; seconds, 0 or more.
POSITIVE_INT = bounded(int, 1, "a positive integer")
SECONDS = bounded(float, 0.0, "a number of seconds >= 0")
