"""``python -m workers.benchmarks.loadtest``: see ``workers.benchmarks.loadtest.cli``."""

from workers.benchmarks.loadtest.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
