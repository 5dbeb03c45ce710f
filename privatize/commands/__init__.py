"""Built-in subcommands of the ``privatize`` CLI.

Each module exposes ``register(subparsers)`` which adds its parsers with
``parser.set_defaults(func=handler)``; a handler takes the parsed ``argparse.Namespace``
and returns the exit code. Raise a :class:`privatize.errors.PrivatizeError` for bad input:
the CLI prints it as one line and exits 2. Other packages (``train``, ``attacks``,
``services``) add commands through the ``privatize.commands`` entry-point group with the
same ``register`` function.
"""
