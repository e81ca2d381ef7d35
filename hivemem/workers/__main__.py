"""`python -m hivemem.workers embed`: the same as `hivemem worker embed`."""

from hivemem.cli.main import main

if __name__ == "__main__":
    main(["worker", *__import__("sys").argv[1:]])
