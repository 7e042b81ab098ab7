"""The six operators of the lifecycle, the production endpoint's monitor and the workspace's pruning, thin over
mlrunway's core."""

from mlrunway.operators.cleanup import CleanupOperator
from mlrunway.operators.deploy_blue import DeployBlueOperator
from mlrunway.operators.export_onnx import ExportOnnxOperator
from mlrunway.operators.monitor_endpoint import MonitorEndpointOperator
from mlrunway.operators.pick_best import PickBestModelOperator
from mlrunway.operators.prune_workspace import PruneWorkspaceOperator
from mlrunway.operators.sweep import SweepOperator
from mlrunway.operators.train import TrainModelOperator

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
