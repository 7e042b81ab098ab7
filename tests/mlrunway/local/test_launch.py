from __future__ import annotations

import sys
from pathlib import Path

from mlrunway.local.launch import plan, resolve_command
from mlrunway.specs import CommandJobSpec, Input, PyTorchDistribution


def test_placeholders_are_substituted_per_argument_and_python_is_this_interpreter():
    argv = resolve_command(
        "python train.py --data-dir ${{inputs.data}} --lr=${{inputs.lr}} --out ${{outputs.model}} --name 'a b'",
        {"data": Input(path="/d"), "lr": 0.5}, {"model": Path("/o/model")},
    )
    assert argv == [sys.executable, "train.py", "--data-dir", "/d", "--lr=0.5", "--out", "/o/model", "--name", "a b"]


def test_pytorch_plan_wraps_the_script_in_torchrun_and_sets_node_rank():
    spec = CommandJobSpec(code=".", command="python train.py", distribution=PyTorchDistribution(process_count_per_instance=3))
    (launch,) = plan(spec, [sys.executable, "train.py", "--x", "1"], {})
    assert launch.argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=3" in launch.argv and launch.argv[-3:] == ["train.py", "--x", "1"]
    assert launch.env["NODE_RANK"] == "0"


def test_pytorch_plan_runs_modules_and_other_programs():
    spec = CommandJobSpec(code=".", command="x", distribution=PyTorchDistribution(process_count_per_instance=2))
    (module,) = plan(spec, [sys.executable, "-m", "pkg.train"], {})
    assert module.argv[-2:] == ["--module", "pkg.train"]
    (binary,) = plan(spec, ["./run.sh", "a"], {})
    assert binary.argv[-3:] == ["--no-python", "./run.sh", "a"]
