"""A sweep's progress in lines: each trial's start, each value of its metric and its end, said once each."""

from __future__ import annotations

from mlrunway.backend.types import JobStatus, SweepResult, TrialInfo
from mlrunway.specs.sweep import Objective
from mlrunway.sweep.progress import TrialWatch

OBJECTIVE = Objective(primary_metric="best_val_acc")


def result(*trials: TrialInfo) -> SweepResult:
    return SweepResult(name="s", status=JobStatus.RUNNING, objective=OBJECTIVE, trials=trials)


def trial(index: int, history: tuple[float, ...], status: JobStatus = JobStatus.RUNNING, **fields) -> TrialInfo:
    return TrialInfo(name=f"s_trial_{index}", params={"learning_rate": 0.0123456, "momentum": 0.8}, status=status,
                     history=history, **fields)


def test_each_event_is_said_once_as_it_appears():
    watch = TrialWatch()
    first = watch.events(result(trial(0, ()), trial(1, (0.5,))))
    assert [str(e) for e in first] == [
        "trial s_trial_0 started: learning_rate=0.01235, momentum=0.8",
        "trial s_trial_1 started: learning_rate=0.01235, momentum=0.8",
        "trial s_trial_1 epoch 1: best_val_acc = 0.5000"]
    assert watch.events(result(trial(0, ()), trial(1, (0.5,)))) == []  # nothing new: nothing said
    stop = {"interval": 2, "value": 0.52, "threshold": 0.6, "reason": "0.52 is below 0.6"}
    later = watch.events(result(
        trial(0, (0.7, 0.8, 0.9), JobStatus.COMPLETED), trial(1, (0.5, 0.52, 0.53), JobStatus.CANCELED,
                                                             early_termination=stop),
        trial(2, (), JobStatus.FAILED, error="CUDA out of memory\ntraceback")))
    assert [(e.kind, str(e)) for e in later] == [
        ("value", "trial s_trial_0 epoch 1: best_val_acc = 0.7000"),
        ("value", "trial s_trial_0 epoch 2: best_val_acc = 0.8000"),
        ("value", "trial s_trial_0 epoch 3: best_val_acc = 0.9000"),
        ("ended", "trial s_trial_0 completed after 3 epochs, best best_val_acc 0.9000"),
        ("value", "trial s_trial_1 epoch 2: best_val_acc = 0.5200"),
        ("value", "trial s_trial_1 epoch 3: best_val_acc = 0.5300"),
        ("ended", "trial s_trial_1 stopped early (stopped at interval 2, 3 logged: 0.52 is below 0.6), best "
                  "best_val_acc 0.5200"),
        ("started", "trial s_trial_2 started: learning_rate=0.01235, momentum=0.8"),
        ("ended", "trial s_trial_2 failed: CUDA out of memory")]
    assert watch.events(result(trial(0, (0.7, 0.8, 0.9), JobStatus.COMPLETED))) == []  # an ended trial is done


def test_the_sweep_trigger_logs_the_progress_into_the_tasks_log_as_it_polls(tmp_path, capfd):
    import re

    from mlrunway.airflow.triggers import SweepTrigger
    from mlrunway.backend.fake import FakeBackend
    from mlrunway.specs import SweepSpec, vocabulary
    from tests.tutorial import SPACE, tutorial_job

    fake = FakeBackend(tmp_path)
    fake.jobs.script("s", *[JobStatus.RUNNING] * 4, JobStatus.COMPLETED)  # a status per read of the job
    fake.jobs.submit_sweep("s", SweepSpec(trial=vocabulary.command_job(tutorial_job("/data")),
                                          search_space=vocabulary.search_space(SPACE), objective=OBJECTIVE))
    trigger = SweepTrigger("fake", "s", poll_interval_s=0)
    fake.jobs.set_trials("s", [trial(0, (0.4,))])
    capfd.readouterr()
    assert trigger.look(fake) is None
    fake.jobs.set_trials("s", [trial(0, (0.4, 0.6), JobStatus.COMPLETED)])
    event = next(e for e in (trigger.look(fake) for _ in range(5)) if e is not None)  # the trigger's last look
    assert event["status"] == "Completed"
    written = capfd.readouterr()  # the trigger's logger (structlog), as the triggerer writes it to the task log
    said = re.findall(r"(trial s_trial_0 [^\n]*?)\s+\[", written.out + written.err)
    assert said == ["trial s_trial_0 started: learning_rate=0.01235, momentum=0.8",
                    "trial s_trial_0 epoch 1: best_val_acc = 0.4000", "trial s_trial_0 epoch 2: best_val_acc = 0.6000",
                    "trial s_trial_0 completed after 2 epochs, best best_val_acc 0.6000"]


def test_a_trial_queued_waiting_for_the_cluster_is_said_to_wait_once():
    watch = TrialWatch()
    queued = trial(0, (), JobStatus.QUEUED, waiting="for the cluster to place its 4 processes")
    first = watch.events(result(queued))
    assert [(e.kind, str(e)) for e in first] == [
        ("started", "trial s_trial_0 started: learning_rate=0.01235, momentum=0.8"),
        ("waiting", "trial s_trial_0 waits for the cluster to place its 4 processes")]
    assert watch.events(result(queued)) == []  # still waiting: nothing new said
    assert [e.kind for e in watch.events(result(trial(0, (0.5,))))] == ["value"]  # placed: no word of waiting
