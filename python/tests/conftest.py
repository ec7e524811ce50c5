"""pytest setup for python/tests: the package under test is python/normgate,
imported from this checkout (not an installed copy), whichever test file or
subset is run (`python3 -m pytest python/tests/test_normgate.py` included)."""
import os
import sys

sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
