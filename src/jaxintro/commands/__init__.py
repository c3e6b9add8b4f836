"""One module per `jaxintro` command, each with `run(args) -> int`; `jaxintro.cli` parses the flags."""
