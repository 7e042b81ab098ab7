"""The environments Azure ML runs our code in: trials train with the project's own torch, deployments serve ONNX.

Why the trial pins torch: a trial saves its model as a ``torch.export`` program (``model.pt2``), and the export
task loads it on the Airflow side with the project's torch (``TORCH_VERSION``) to write ONNX and run the parity
gate. A ``.pt2`` is only promised to load in the torch that wrote it, so the trial installs that same version
(a CPU build on CPU VMs, PyPI's CUDA build on GPU VMs) over a documented Azure ML base image with a pinned tag,
rather than a curated PyTorch environment whose torch drifts (the tutorial's ACPT image has torch 2.8).
A user who names an environment (on the job, or the connection's ``environment``) gets exactly that one.

Images, pinned (Azure/azureml-assets records these tags as the bases of its curated images):
- ``mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:20260707.v1`` (CPU training),
- ``mcr.microsoft.com/azureml/openmpi5.0-cuda12.4-ubuntu22.04:20260715.v1`` (GPU training; the torch wheel
  brings its own CUDA runtime, the image its driver-side libraries and MPI),
- ``mcr.microsoft.com/azureml/curated/minimal-py311-inference:59`` (scoring; the image of the curated
  ``azureml/curated/minimal-py311-inference`` environment, with onnxruntime added).
"""

from __future__ import annotations

import re
from typing import Any

TORCH_VERSION = "2.13.0"  # the project's torch (constraints.txt); a test keeps the two in step
CPU_IMAGE = "mcr.microsoft.com/azureml/openmpi5.0-ubuntu24.04:20260707.v1"
GPU_IMAGE = "mcr.microsoft.com/azureml/openmpi5.0-cuda12.4-ubuntu22.04:20260715.v1"
INFERENCE_IMAGE = "mcr.microsoft.com/azureml/curated/minimal-py311-inference:59"
_TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Azure's GPU VM families: NC, ND and NV (Standard_NC6s_v3, Standard_ND96asr_v4, Standard_NV36ads_A10_v5...).
_GPU_SIZE = re.compile(r"^(standard_)?n[cdv]", re.IGNORECASE)

# What the export job adds to the trials' packages beside the scoring onnxruntime (constraints.txt's versions).
EXPORT_PACKAGES = ("onnx==1.23.2", "onnxscript==0.7.2")

SCORING_CONDA: dict[str, Any] = {
    "name": "mlrunway-onnx-inference",
    "channels": ["conda-forge"],
    "dependencies": ["python=3.11", "pip", {"pip": [
        "azureml-inference-server-http", "onnxruntime==1.31.1", "numpy<3", "pillow",
        "azureml-ai-monitoring==1.0.0", "pandas",  # the data collector's SDK (a deployment's model_inputs/outputs)
    ]}],
}


def is_gpu_size(vm_size: str | None) -> bool:
    """Whether an Azure VM size has GPUs (the NC, ND and NV families); None (the service's default) has none."""
    return bool(vm_size and _GPU_SIZE.match(vm_size))


def training_conda(gpu: bool) -> dict[str, Any]:
    """The trial's packages: the project's torch (CPU build unless ``gpu``) and what train.py imports."""
    torch = [f"torch=={TORCH_VERSION}"] if gpu else [f"--extra-index-url {_TORCH_CPU_INDEX}", f"torch=={TORCH_VERSION}"]
    return {
        "name": f"mlrunway-torch-{TORCH_VERSION}-{'cuda' if gpu else 'cpu'}",
        "channels": ["conda-forge"],
        "dependencies": ["python=3.11", "pip", {"pip": [
            *torch, "numpy<3", "pillow", "mlflow-skinny", "azureml-mlflow",
        ]}],
    }


def export_conda(gpu: bool) -> dict[str, Any]:
    """The export job's packages: the trials' torch (a ``.pt2`` loads in the torch that wrote it) and the scoring
    environment's onnxruntime (parity is measured with the runtime that serves), with onnx and onnxscript."""
    conda = training_conda(gpu)
    pip = conda["dependencies"][-1]["pip"]
    runtime = next(p for p in SCORING_CONDA["dependencies"][-1]["pip"] if p.startswith("onnxruntime=="))
    pip = [p for p in pip if not p.startswith(("mlflow", "azureml-mlflow"))] + [runtime, *EXPORT_PACKAGES]
    return {**conda, "name": f"mlrunway-export-torch-{TORCH_VERSION}-{'cuda' if gpu else 'cpu'}",
            "dependencies": [*conda["dependencies"][:-1], {"pip": pip}]}


def export_environment(gpu: bool) -> Any:
    """An ``Environment`` entity for the export job: the training image with :func:`export_conda`."""
    from azure.ai.ml.entities import Environment

    return Environment(image=GPU_IMAGE if gpu else CPU_IMAGE, conda_file=export_conda(gpu),
                       description=f"mlrunway export: torch {TORCH_VERSION}, onnx and onnxruntime")


def training_environment(gpu: bool) -> Any:
    """An ``Environment`` entity: the pinned base image for ``gpu`` or CPU, with ``training_conda``."""
    from azure.ai.ml.entities import Environment

    return Environment(image=GPU_IMAGE if gpu else CPU_IMAGE, conda_file=training_conda(gpu),
                       description=f"mlrunway trial: torch {TORCH_VERSION} ({'CUDA' if gpu else 'CPU'})")


def scoring_environment() -> Any:
    """An ``Environment`` entity for ONNX scoring: the curated inference image plus onnxruntime."""
    from azure.ai.ml.entities import Environment

    return Environment(image=INFERENCE_IMAGE, conda_file=SCORING_CONDA)
