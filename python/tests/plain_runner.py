"""Run a test module's test_* functions without pytest (the tests that CI
runs with a bare python3): each in name order, a failure reported and the
rest still run; exit status 1 when any failed."""
import sys


def run_module_tests(namespace):
    passed = failed = 0
    for name, fn in sorted(namespace.items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                passed += 1
            except Exception as e:  # report and go on
                failed += 1
                print("FAILED %s: %r" % (name, e))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
