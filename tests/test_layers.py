"""The layering contract of ``pyproject.toml`` ([tool.importlinter]) holds.

import-linter reads every import of the package, those inside functions included, and
checks: the stages point one way (adapters -> views -> analyses -> stats -> diagnosis ->
render -> cli/batch), no import cycles, no renderer imported below the command line and
batch, click imported by the command line only. The second test reverses the layers and
expects the check to fail, so the first cannot pass by checking nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT

LINT = (
    "import sys\n"
    "from importlinter.cli import lint_imports\n"
    "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))\n"
)


def lint(config: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LINT, config],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_hold():
    done = lint(str(ROOT / "pyproject.toml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout, done.stdout


def test_reversed_layers_are_broken(tmp_path):
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^layers = \[\n(.*?)^\]", text, re.S | re.M)
    assert block, "no layers list in [tool.importlinter]"
    layers = block.group(1).splitlines()
    flipped = text.replace(block.group(1), "\n".join(reversed(layers)) + "\n")
    config = tmp_path / "pyproject.toml"
    config.write_text(flipped)
    done = lint(str(config))
    assert done.returncode != 0, done.stdout
    assert "is not allowed to import" in done.stdout, done.stdout
