"""Running the `floodway` command in a fresh process, as a user runs it."""

import os
import subprocess
import sys

from tests.conftest import ROOT


def floodway(*args, env=None):
    """``python -m floodway.cli ARGS`` in the repository root, `env` added."""
    return subprocess.run([sys.executable, "-m", "floodway.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=120)
