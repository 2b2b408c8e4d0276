"""``python -m traceql``: the command line."""

from .cli import main

main()
