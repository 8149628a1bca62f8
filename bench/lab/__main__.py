"""`python -m bench.lab [scenario …] [--quick]`, `python -m bench.lab clean`: see bench/README.md."""

import sys

from bench.lab.scenarios import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
