"""An informal A/B of two checkouts on the same sweep: N trials of trial_overhead's trivial MLflow script, C at
once, each sweep from a process of its own with that checkout's code (its controller and supervisors too),
alternating which goes first. Not a harness benchmark: it prints one line per sweep, to be kept as text.

    .venv/bin/python bench/commit_ab.py <checkout A> <checkout B> <N> <C> <rounds>

(``git worktree add --detach /tmp/a <commit>`` makes a checkout of a commit.)
"""

import os
import subprocess
import sys

ONE = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/bench")
from trial_overhead import SCRIPT, run_sweep
tmp = Path(tempfile.mkdtemp())
code = tmp / "code"
code.mkdir()
(code / "script.py").write_text(SCRIPT)
print(run_sweep(Path(tempfile.mkdtemp(dir=tmp)), code, int(sys.argv[2]), int(sys.argv[3]), watch=False)["wall_s"])
"""


def main() -> None:
    a, b, n, c, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    for r in range(rounds):
        for tree in ([a, b] if r % 2 == 0 else [b, a]):
            out = subprocess.run([sys.executable, "-c", ONE, tree, n, c], env={**os.environ, "PYTHONPATH": tree},
                                 capture_output=True, text=True, check=True).stdout.split()[-1]
            print(f"round {r} {tree:16} sweep {float(out):7.2f} s", flush=True)


if __name__ == "__main__":
    main()
