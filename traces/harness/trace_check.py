"""The --check verdict every recorder prints: re-recorded traces against the committed ones.

Standard library only, so the vLLM and the SGLang recorders (each in its own virtual
environment) share it.
"""

import filecmp
import os
import shutil
import sys


def exit_with_verdict(names, recorded_dir, committed_dir):
    """Compare each of `names` byte for byte, remove `recorded_dir`, print and exit 0 or 1."""
    bad = [
        name
        for name in names
        if not os.path.exists(os.path.join(committed_dir, name))
        or not filecmp.cmp(os.path.join(recorded_dir, name), os.path.join(committed_dir, name), shallow=False)
    ]
    shutil.rmtree(recorded_dir)
    print("DIFFERENT: " + " ".join(bad) if bad else "identical: %d traces" % len(names))
    sys.exit(1 if bad else 0)
