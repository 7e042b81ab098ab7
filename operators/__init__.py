"""The six operators of the lifecycle, the production endpoint's monitor and the workspace's pruning, thin over
mlrunway's core."""

from operators.cleanup import CleanupOperator
from operators.deploy_blue import DeployBlueOperator
from operators.export_onnx import ExportOnnxOperator
from operators.monitor_endpoint import MonitorEndpointOperator
from operators.pick_best import PickBestModelOperator
from operators.prune_workspace import PruneWorkspaceOperator
from operators.sweep import SweepOperator
from operators.train import TrainModelOperator

__all__ = [
    "CleanupOperator",
    "DeployBlueOperator",
    "ExportOnnxOperator",
    "MonitorEndpointOperator",
    "PickBestModelOperator",
    "PruneWorkspaceOperator",
    "SweepOperator",
    "TrainModelOperator",
]
