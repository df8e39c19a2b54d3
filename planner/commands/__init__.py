"""One module per `kplan` command: argument parsing only; the work is done by the library."""
