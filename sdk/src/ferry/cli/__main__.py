"""`python -m ferry.cli …` is the `ferry` command: how a supervisor starts a `ferry serve
broker` tree of its own (`ferry dev up --ha`) by module, as it starts every service."""

from ferry.cli.main import main

if __name__ == "__main__":
    main()
