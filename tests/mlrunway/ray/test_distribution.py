"""A distributed command job planned onto a Ray cluster, no cluster needed: the processes get what torchrun, TF_CONFIG's
tasks or mpirun would give them, the bundles hold the profile once per process placed on them (in Ray's resource
keys), each refusal names the field and the fix, and ``fits`` says why a cluster's alive nodes could never place a
plan."""

from __future__ import annotations

from typing import Any

import pytest

from mlrunway.errors import SpecError
from mlrunway.ray.connection import Profile
from mlrunway.ray.distribution import fits, kept, plan, processes
from mlrunway.specs.job import (
    CommandJobSpec,
    Distribution,
    MpiDistribution,
    PyTorchDistribution,
    TensorFlowDistribution,
)

GPU = Profile(num_cpus=4, num_gpus=1, memory=8_000_000_000, resources={"accelerator_type:A100": 1})
ONCE = {"CPU": 4.0, "GPU": 1.0, "memory": 8_000_000_000.0, "accelerator_type:A100": 1.0}  # GPU as a bundle names it


def job(distribution: Distribution | None = None, instances: int = 1) -> CommandJobSpec:
    return CommandJobSpec(code=".", command="python train.py", distribution=distribution, instance_count=instances)


def times(count: int) -> dict[str, float]:
    return {key: value * count for key, value in ONCE.items()}


def node(state: str = "ALIVE", **resources: float) -> dict[str, Any]:
    return {"state": state, "resources_total": resources}


def test_a_job_with_no_distribution_on_one_instance_has_no_plan() -> None:
    assert plan(job(), "gpu", GPU, "j") is None


def test_a_pytorch_job_on_two_instances_gives_each_process_torchruns_ranks() -> None:
    launch = plan(job(PyTorchDistribution(process_count_per_instance=2), instances=2), "gpu", GPU, "j")
    assert launch is not None
    assert (launch["name"], launch["type"], launch["strategy"]) == ("j", "pytorch", "STRICT_SPREAD")
    envs = [(p["bundle"], p["env"]) for p in launch["processes"]]
    assert envs == [
        (bundle, {"RANK": str(rank), "LOCAL_RANK": str(rank % 2), "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                  "NODE_RANK": str(bundle), "GROUP_RANK": str(bundle)})
        for rank, bundle in ((0, 0), (1, 0), (2, 1), (3, 1))]


def test_a_pytorch_job_holds_the_profile_once_per_process_in_each_bundle_with_rays_keys() -> None:
    launch = plan(job(PyTorchDistribution(process_count_per_instance=2), instances=2), "gpu", GPU, "j")
    assert launch is not None
    assert launch["bundles"] == [times(2), times(2)]
    assert all(p["options"] == {"num_cpus": 4.0, "num_gpus": 1.0, "memory": 8_000_000_000,
                                "resources": {"accelerator_type:A100": 1.0}} for p in launch["processes"])


def test_a_pytorch_job_on_one_instance_packs_its_one_bundle() -> None:
    launch = plan(job(PyTorchDistribution(process_count_per_instance=3)), "gpu", GPU, "j")
    assert launch is not None
    assert launch["strategy"] == "PACK" and launch["bundles"] == [times(3)]
    assert [p["env"]["RANK"] for p in launch["processes"]] == ["0", "1", "2"]
    assert {p["env"]["WORLD_SIZE"] for p in launch["processes"]} == {"3"}


def test_a_profile_with_no_memory_or_custom_resources_leaves_their_keys_out_of_the_bundle() -> None:
    launch = plan(job(PyTorchDistribution(process_count_per_instance=2)), "cpu", Profile(num_cpus=2), "j")
    assert launch is not None
    assert launch["bundles"] == [{"CPU": 4.0}]  # Ray refuses a bundle's zero, not a missing key
    assert launch["processes"][0]["options"] == {"num_cpus": 2.0, "num_gpus": 0.0}


def test_a_tensorflow_job_deals_its_workers_then_its_parameter_servers_over_the_bundles_in_turn() -> None:
    launch = plan(job(TensorFlowDistribution(worker_count=3, parameter_server_count=2), instances=2), "gpu", GPU, "j")
    assert launch is not None
    dealt = [(p["bundle"], p["tf"]["type"], p["tf"]["index"]) for p in launch["processes"]]
    assert dealt == [(0, "worker", 0), (1, "worker", 1), (0, "worker", 2), (1, "ps", 0), (0, "ps", 1)]
    assert launch["bundles"] == [times(3), times(2)]  # each bundle sized for the processes dealt to it
    assert launch["strategy"] == "STRICT_SPREAD" and all(p["env"] == {} for p in launch["processes"])


def test_a_tensorflow_job_with_no_worker_count_runs_a_worker_per_instance() -> None:
    launch = plan(job(TensorFlowDistribution(parameter_server_count=1), instances=2), "gpu", GPU, "j")
    assert launch is not None
    assert [(p["bundle"], p["tf"]["type"]) for p in launch["processes"]] == [(0, "worker"), (1, "worker"), (0, "ps")]
    assert launch["bundles"] == [times(2), times(1)]


def test_an_mpi_job_on_one_instance_is_one_process_holding_the_profile_once_per_rank() -> None:
    launch = plan(job(MpiDistribution(process_count_per_instance=4)), "gpu", GPU, "j")
    assert launch is not None
    assert launch["strategy"] == "PACK" and launch["bundles"] == [times(4)]
    [process] = launch["processes"]
    assert process["mpi"] == 4 and process["bundle"] == 0
    assert process["options"] == {"num_cpus": 16.0, "num_gpus": 4.0, "memory": 32_000_000_000,
                                  "resources": {"accelerator_type:A100": 4.0}}


@pytest.mark.parametrize(("spec", "profile", "field", "fix"), [
    (job(instances=2), GPU, "command_job.instance_count", "give a distribution"),
    (job(MpiDistribution(process_count_per_instance=2), instances=2), GPU, "command_job.instance_count",
     "run it on one instance"),
    (job(PyTorchDistribution()), Profile(num_cpus=0), "command_job.compute", "name a profile with num_cpus"),
    (job(TensorFlowDistribution(worker_count=1), instances=2), GPU, "command_job.instance_count",
     "give at most as many instances as processes"),
], ids=["no-distribution", "mpi-on-several", "empty-profile", "idle-instance"])
def test_a_job_the_cluster_cannot_run_is_refused_naming_the_field_and_the_fix(
        spec: CommandJobSpec, profile: Profile, field: str, fix: str) -> None:
    with pytest.raises(SpecError) as refused:
        plan(spec, "tiny", profile, "j")
    message = str(refused.value)
    assert message.startswith(f"{field}: ") and fix in message


def test_the_refusals_say_what_is_wrong_with_the_numbers_given() -> None:
    with pytest.raises(SpecError, match=r"3 instances with no distribution"):
        plan(job(instances=3), "gpu", GPU, "j")
    with pytest.raises(SpecError, match=r"distribution mpi on 2 instances: .*ssh"):
        plan(job(MpiDistribution(), instances=2), "gpu", GPU, "j")
    with pytest.raises(SpecError, match=r"profile 'tiny' asks for no resources"):
        plan(job(PyTorchDistribution()), "tiny", Profile(num_cpus=0), "j")
    with pytest.raises(SpecError, match=r"3 instances for 2 processes: instance 2 would run none"):
        plan(job(TensorFlowDistribution(worker_count=1, parameter_server_count=1), instances=3), "gpu", GPU, "j")


def test_a_spread_plan_needing_more_qualifying_nodes_than_alive_ones_says_the_counts() -> None:
    launch = plan(job(PyTorchDistribution(process_count_per_instance=2), instances=2), "cpu", Profile(num_cpus=4), "j")
    assert launch is not None
    nodes = [node(CPU=16), node(CPU=2), node("DEAD", CPU=16)]  # the head, too small; a dead node is no node
    assert fits(launch, nodes) == ("2 instances each need a node of their own with 8 CPU, and the cluster's 2 nodes "
                                   "have 1 such")
    assert fits(launch, [node(CPU=16), node(CPU=2), node(CPU=16)]) is None  # the same node alive places it


def test_a_spread_plan_fits_a_cluster_with_a_big_enough_node_per_bundle() -> None:
    launch = plan(job(TensorFlowDistribution(worker_count=3, parameter_server_count=2), instances=2), "gpu", GPU, "j")
    assert launch is not None and launch["bundles"] == [times(3), times(2)]
    big = {"CPU": 12.0, "GPU": 3.0, "memory": 24e9, "accelerator_type:A100": 3.0}
    small = {"CPU": 8.0, "GPU": 2.0, "memory": 16e9, "accelerator_type:A100": 2.0}
    assert fits(launch, [node(**small), node(**big)]) is None
    assert fits(launch, [node(**small), node(**small)]) is not None  # the bundle of 3 fits neither
    no_custom = {key: value for key, value in big.items() if key != "accelerator_type:A100"}
    assert "have 0 such" in (fits(launch, [node(**small), node(**no_custom)]) or "")


def test_a_packed_plan_needs_one_alive_node_with_its_whole_bundle() -> None:
    launch = plan(job(MpiDistribution(process_count_per_instance=4)), "cpu", Profile(num_cpus=2, num_gpus=1), "j")
    assert launch is not None
    reason = fits(launch, [node(CPU=64, GPU=2), node("DEAD", CPU=8, GPU=4)])
    assert reason == "its instance needs a node with 8 CPU, 4 GPU, and none of the cluster's 1 nodes has it"
    assert fits(launch, [node(CPU=64, GPU=2), node(CPU=8, GPU=4)]) is None


@pytest.mark.parametrize(("spec", "count"), [
    (job(), 1),
    (job(PyTorchDistribution(process_count_per_instance=3), instances=2), 6),
    (job(MpiDistribution(process_count_per_instance=4)), 4),
    (job(TensorFlowDistribution(worker_count=3, parameter_server_count=2), instances=2), 5),
    (job(TensorFlowDistribution(parameter_server_count=1), instances=3), 4),
], ids=["none", "pytorch", "mpi", "tensorflow", "tensorflow-default-workers"])
def test_processes_counts_the_processes_each_distribution_runs_across_the_instances(
        spec: CommandJobSpec, count: int) -> None:
    assert processes(spec) == count


def test_processes_agrees_with_the_plan_for_every_distribution() -> None:
    for spec in (job(PyTorchDistribution(process_count_per_instance=3), instances=2),
                 job(TensorFlowDistribution(worker_count=3, parameter_server_count=2), instances=2)):
        launch = plan(spec, "gpu", GPU, "j")
        assert launch is not None and processes(spec) == len(launch["processes"])
    launch = plan(job(MpiDistribution(process_count_per_instance=4)), "gpu", GPU, "j")
    assert launch is not None and processes(job(MpiDistribution(process_count_per_instance=4))) == \
        launch["processes"][0]["mpi"]


def test_each_process_of_an_instance_sees_the_gpus_of_every_process_there_in_local_rank_order() -> None:
    """As torchrun's processes on one machine see all its GPUs: LOCAL_RANK j's ``set_device(j)`` is its own GPU."""
    from mlrunway.ray import ranks

    spec = CommandJobSpec(code=".", command="python t.py", instance_count=2,
                          distribution=PyTorchDistribution(process_count_per_instance=2))
    launch = plan(spec, "gpu1", Profile(num_cpus=1, num_gpus=1), "job")
    assert launch is not None
    where = [{"ip": "10.0.0.1", "gpus": ["3"]}, {"ip": "10.0.0.1", "gpus": ["1"]},
             {"ip": "10.0.0.2", "gpus": ["0"]}, {"ip": "10.0.0.2", "gpus": ["2"]}]
    envs = ranks._environments(launch, where, [29500, 1, 2, 3])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3,1", "3,1", "0,2", "0,2"]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("10.0.0.1", "29500")}
    cpu_only = ranks._environments(launch, [{**w, "gpus": []} for w in where], [29500, 1, 2, 3])
    assert all("CUDA_VISIBLE_DEVICES" not in e for e in cpu_only)


def test_a_kept_job_is_one_process_holding_the_profile_once_on_no_placement_group() -> None:
    """An endpoint's server: its actor holds the profile (Ray starts it again elsewhere when its node is lost), with
    no bundle that would pin it to a node."""
    profile = Profile(num_cpus=0.5, memory=2**30, resources={"serve": 0.5})
    assert kept(profile, "ns.serving.ep-1234abcd-server-1") == {
        "type": "keep", "name": "ns.serving.ep-1234abcd-server-1",
        "options": {"num_cpus": 0.5, "num_gpus": 0.0, "memory": 2**30, "resources": {"serve": 0.5}}}
