"""Errors the CLI turns into one line on stderr, and the exit codes it uses."""

EXIT_OK = 0          # nothing failed
EXIT_FAILED = 1      # a finding failed, a host failed, a burn-in failed
EXIT_BAD_INPUT = 2   # bad input or usage


class GpuprepError(Exception):
    """An expected failure with a message meant for the user."""
    exit_code = EXIT_FAILED


class BadInput(GpuprepError):
    """The user's input (file, inventory, option) cannot be used."""
    exit_code = EXIT_BAD_INPUT
