# run_child(code, *args): `code` in a fresh Python interpreter that imports the meshlayout
# under test (the one this pytest process imported), with 8 virtual CPU devices. For what must
# not take the test process down with it: crashes, and what happens at interpreter exit.
import os
import subprocess
import sys

import meshlayout as ml


def run_child(code, *args, timeout=300, debug_malloc=False):
    """debug_malloc: Python's debug allocator, which aborts on the first Python allocation made
    without the GIL (PYTHONMALLOC=debug)."""
    env = dict(os.environ, MESHLAYOUT_CPU_DEVICES="8")
    if debug_malloc:
        env["PYTHONMALLOC"] = "debug"
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(ml.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_dir] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)
