"""``python -m nsysdiag``."""

import sys

try:
    from .cli.main import run
except KeyboardInterrupt:  # Ctrl-C while the modules load
    sys.stderr.write("nsysdiag: interrupted\n")
    sys.exit(130)

run()
