"""`python3 bench/peers ARGS` or `python3 -m peers ARGS` (bench/ on the path):
the same as `python3 bench/peers.py ARGS` (cli.main)."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# `python3 bench/peers` puts this folder first on the path, where its modules
# (timing, report, ...) would shadow top-level modules of the same names:
# bench/ takes its place.
if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == _HERE:
    sys.path[0] = os.path.dirname(_HERE)
else:
    sys.path.insert(0, os.path.dirname(_HERE))
from peers.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
