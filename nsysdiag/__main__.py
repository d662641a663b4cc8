"""``python -m nsysdiag`` and the ``nsysdiag`` command."""

import signal
import sys


def main() -> None:
    """Load the command line, then run it. Ctrl-C while its modules load (half a second)
    is held until they are loaded: an interrupt inside a compiled module's start-up can
    abort the interpreter instead of raising KeyboardInterrupt."""
    held: list[int] = []
    hold = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if hold:
        signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        from .cli.main import run
    finally:
        if hold:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        sys.stderr.write("nsysdiag: interrupted\n")
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
