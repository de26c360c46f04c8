"""One module per `preemptscope` subcommand; each exposes `register(subparsers)`."""
