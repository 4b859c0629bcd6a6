"""``python -m workers.benchmarks.engine``: see ``workers.benchmarks.engine.cli``."""

from workers.benchmarks.engine.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
