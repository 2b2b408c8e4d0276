"""``python -m traceql``: the command line."""

from .cli import console

console()
