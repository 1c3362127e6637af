"""One module per `gantry` subcommand; each defines ``register(subparsers)``."""
