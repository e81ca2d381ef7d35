"""`python -m hivemem.workers embed`: the same as `hivemem worker embed`."""

import sys

from hivemem.cli.main import main

if __name__ == "__main__":
    main(["worker", *sys.argv[1:]])
