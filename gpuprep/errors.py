"""gpuprep's own exceptions and the exit codes they stand for. Library code words its messages without
command-line flags: an error about one argument names it in `argument` (the API's parameter name), and the
CLI shows the flag that sets it (cli.FLAGS)."""
from typing import Callable, Optional, Union

EXIT_OK = 0          # nothing failed
EXIT_FAILED = 1      # a finding failed, a host failed, a burn-in failed
EXIT_BAD_INPUT = 2   # bad input or usage


class GpuprepError(Exception):
    """An expected failure with a message meant for the user. `message` is text, or a function that words it given
    a function naming arguments (for a message that mentions other arguments: the CLI names them by their flags)."""
    exit_code = EXIT_FAILED

    def __init__(self, message: Union[str, Callable[[Callable[[str], str]], str]], argument: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.argument = argument

    def text(self, name: Callable[[str], str] = lambda argument: argument) -> str:
        body = self.message(name) if callable(self.message) else self.message
        return f"{name(self.argument)} {body}" if self.argument else body

    def __str__(self) -> str:
        return self.text()


class BadInput(GpuprepError):
    """The user's input (file, inventory, argument) cannot be used."""
    exit_code = EXIT_BAD_INPUT


def bad_argument(argument: str, message) -> BadInput:
    """BadInput about one argument, worded after its name (the CLI puts the flag there)."""
    return BadInput(message, argument=argument)


def _internal(exc: BaseException) -> str:
    return f"internal error: {type(exc).__name__}: {exc} (set GPUPREP_DEBUG=1 for the traceback)"


# What ended a command -> (exit code, the line for stderr or None, re-raised under GPUPREP_DEBUG=1 for the
# traceback). First match wins; the CLI puts click's own rows in front. `flags` names the flag of an argument.
EXITS = (
    (GpuprepError, lambda e: e.exit_code, lambda e, flags: e.text(lambda name: flags.get(name, name)), True),
    (KeyboardInterrupt, lambda e: 130, lambda e, flags: "interrupted", False),
    (Exception, lambda e: EXIT_FAILED, lambda e, flags: _internal(e), True),
)


def exit_for(exc: BaseException, flags: Optional[dict] = None, table=EXITS):
    """(exit code, message or None, debug) for an exception that ended a command; re-raises what no row takes."""
    for kind, code, message, debug in table:
        if isinstance(exc, kind):
            return code(exc), (message(exc, flags or {}) if message else None), debug
    raise exc
