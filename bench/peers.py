#!/usr/bin/env python3
"""normgate against its peers: runs the bench/peers package (cli.main; the
package's __init__.py says what each module does). A file of its own so that
`python3 bench/peers.py ARGS`, the command every result JSON records, still
runs; `python3 bench/peers ARGS` is the same."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers.cli import main  # noqa: E402 - the package bench/peers/, not this file

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
