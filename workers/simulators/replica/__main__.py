"""``python -m workers.simulators.replica``: see ``workers.simulators.replica.cli``."""

from workers.simulators.replica.cli import main

if __name__ == "__main__":
    main()
