"""User-facing errors: the CLI prints them as one `jspec: error: ...` line and exits with status 2."""


class UserError(Exception):
    """A mistake in the user's input or environment (bad argument, missing asset, corrupt file)."""
