"""A randomized soak of the local backend: a workload of jobs, sweeps, endpoint traffic and stable-endpoint
rollouts, with faults injected at random times, and the backend's invariants checked after each one.

    .venv/bin/python -m tests.chaos.soak --faults 1000 [--seed 27] [--chunk-s 3000] [--results FILE]
    make soak    # the long profile, chunk after chunk, into tests/chaos/results/soak.json

The workload, all real processes on this machine:
- two command jobs at a time (a script that logs a metric each epoch and saves a model at the end), each retried
  as Airflow would (``submit_or_reattach``) when a fault killed it, and now and then canceled;
- one sweep at a time (three trials, Bandit), its dead controller recovered by the retry, now and then canceled;
- a stable endpoint (``soak-prod``): a client sends steady traffic, and a rollout of a new model version runs
  through :mod:`mlrunway.deploy.stable` (gate, 50% then 100%), then its cleanup, again and again.

The faults (:data:`FAULTS`), one at a time, at random, each drawn from the seed and its index: SIGKILL and SIGSTOP
(0.5 to 3 s) of each process kind (job supervisor, job script, sweep controller, endpoint master, endpoint worker),
a full workspace (ENOSPC for 0.5 to 3 s: the workspace is a tmpfs; where mounting is refused that class is skipped
and the results say why), and a reboot (every process killed at once, then ``recover``, as at boot).

After each fault ends, the invariants (:func:`Soak.check`), each a line in the results when broken:
- **truth**: a job that reads Running has a live supervisor, at the first read (one poll) after the fault;
- **orphans**: no process carries a token that nothing owns (a job that ended, an endpoint that is gone) for
  longer than a supervisor takes to exit (:data:`ORPHAN_GRACE_S`);
- **attempts**: never two live attempts of one job; a canceled job or sweep never runs again;
- **kept**: no metric, model or record written before the fault is lost (MLflow histories of running and completed
  jobs, completed jobs' model files, registered versions, the endpoint's recorded request counts);
- **production**: between rollouts, the ``production`` alias names the model that serves;
- **evidence**: a rollout never promotes without its gate's figures and challenger requests in every window.

Chunks: a run stops at ``--chunk-s`` (under an hour) after the fault in progress, and the next run of the same
command goes on from the results file (faults are drawn from the seed and their index, so the sequence is the one
an unbroken run makes); every chunk starts on a fresh workspace and ends with everything stopped and nothing left.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mlrunway.backend.attempts import submit_or_reattach
from mlrunway.backend.naming import base_name
from mlrunway.backend.types import DeploymentSettings, JobStatus, ProvisioningState
from mlrunway.deploy import stable
from mlrunway.deploy.gate import GateSettings, team_set
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.errors import MlrunwayError
from mlrunway.local.__main__ import recover_workspace
from mlrunway.local.backend import LocalBackend
from mlrunway.local.processes import JOB_TOKEN_ENV, Identity, wait_gone
from mlrunway.local.supervisor import JobState
from mlrunway.specs import BanditPolicy, Choice, CommandJobSpec, Objective, SweepLimits, SweepSpec

KINDS = ("supervisor", "script", "controller", "master", "worker")
FAULTS = (*(f"kill:{k}" for k in KINDS), *(f"stop:{k}" for k in KINDS), "enospc", "reboot")
ENDPOINT, MODEL = "soak-prod", "soak"
ORPHAN_GRACE_S = 20.0  # a supervisor SIGTERMs its script, waits 10 s, then SIGKILLs it and exits
SETTLE_S = 1.0  # after the fault ends: a supervisor's poll, then the reads
MAX_ATTEMPTS = 3
MIN_REQUESTS = 5  # a rollout window's evidence: the client sends about 20 a second, half to the challenger at 50%
UNFINISHED = 3  # the exit status of a chunk that stopped before the last fault: run it again

TRAIN = """
import os, pathlib, sys, time, mlflow
epochs = int(sys.argv[1])
for epoch in range(epochs):
    mlflow.log_metric("loss", 1 / (epoch + 1), step=epoch)
    time.sleep(0.25)
out = pathlib.Path("outputs")
(out / "model.tmp").write_bytes(os.urandom(4096))
os.replace(out / "model.tmp", out / "model.bin")
"""
CURVE = """
import argparse, time, mlflow
p = argparse.ArgumentParser(); p.add_argument("--curve"); a = p.parse_args()
for step, value in enumerate(float(v) for v in a.curve.split(",")):
    mlflow.log_metric("best_val_acc", value, step=step)
    time.sleep(0.3)
"""
CURVES = ("0.5,0.7,0.8,0.9,0.92,0.93", "0.45,0.65,0.75,0.85,0.88,0.9", "0.1,0.2,0.3,0.35,0.4,0.45")
SCORE = """
import json, os, pathlib
def init():
    global QUALITY
    found = sorted(pathlib.Path(os.environ["AZUREML_MODEL_DIR"]).rglob("quality.json"))
    QUALITY = json.loads(found[0].read_text())["quality"]
def run(raw):
    return {"quality": QUALITY}
"""
METRIC = "def quality(answers, expected):\n    return sum(a['quality'] for a in answers) / len(answers)\n"


@dataclass
class Fault:
    index: int
    kind: str
    duration_s: float
    target: str = ""
    skipped: str | None = None
    broken: list[str] = field(default_factory=list)
    took_s: float = 0.0


def draw(seed: int, index: int) -> Fault:
    """Fault ``index`` of the run seeded ``seed``: the same in every chunk, on every machine."""
    rng = random.Random(f"soak:{seed}:{index}")
    return Fault(index, rng.choice(FAULTS), round(rng.uniform(0.5, 3.0), 2))


def marked_processes() -> dict[str, list[psutil.Process]]:
    """Every live process carrying a job or endpoint token, by token."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["status"]):
        try:
            token = proc.environ().get(JOB_TOKEN_ENV) if proc.info["status"] != psutil.STATUS_ZOMBIE else None
        except psutil.Error:
            continue
        if token:
            found.setdefault(token, []).append(proc)
    return found


def digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class Traffic(threading.Thread):
    """A steady client of the stable endpoint: about 20 requests a second, each answer counted."""

    def __init__(self, backend: LocalBackend) -> None:
        super().__init__(daemon=True)
        self.backend, self.stopping = backend, threading.Event()
        self.answers: dict[str, int] = {}  # by status code (0: no answer), as JSON keeps them
        self.began, self.served = time.monotonic(), False
        self.failures: list[str] = []  # the first 50 answers that were not 200: when, and what

    def run(self) -> None:
        while not self.stopping.wait(0.05):
            try:
                state = self.backend.endpoints.state(ENDPOINT)
            except (MlrunwayError, OSError, ValueError):
                continue
            request = urllib.request.Request(state.scoring_uri, data=b'{"data": [1]}', method="POST", headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {state.keys['primary']}"})
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    code, why = response.status, ""
            except urllib.error.HTTPError as exc:
                code, why = exc.code, exc.read()[:100].decode(errors="replace")
            except OSError as exc:
                code, why = 0, str(exc)[:100]
            self.answers[str(code)] = self.answers.get(str(code), 0) + 1
            self.served = self.served or code == 200
            if code != 200 and len(self.failures) < 50:
                when = "" if self.served else " (before the first 200)"
                self.failures.append(f"{time.monotonic() - self.began:.1f} s{when}: {code} {why}")


class Rollouts(threading.Thread):
    """Register a new version (a random quality), roll it out to the stable endpoint as the deploy task does,
    then clean up as the DAG's cleanup task does; again and again. After each cleanup, with the endpoint at rest,
    it checks the production and evidence invariants (``broken``)."""

    def __init__(self, backend: LocalBackend, root: Path, seed: int) -> None:
        super().__init__(daemon=True)
        self.backend, self.root, self.rng = backend, root, random.Random(f"rollouts:{seed}")
        self.stopping = threading.Event()
        self.results: list[dict[str, Any]] = []
        self.broken: list[str] = []
        self.code = root / "score"
        self.code.mkdir(parents=True, exist_ok=True)
        (self.code / "score.py").write_text(SCORE)
        (self.code / "metrics.py").write_text(METRIC)
        (self.code / "eval.jsonl").write_text("".join('{"request": {"data": [1]}, "expected": 0}\n' for _ in range(4)))

    def run(self) -> None:
        count = 0
        while not self.stopping.is_set():
            count += 1
            try:
                self.results.append(self.once(count))
            except Exception as exc:  # a fault mid-rollout: the task fails, as in Airflow; cleanup still runs
                self.results.append({"decision": "error", "reason": f"{type(exc).__name__}: {exc}"[:300]})
            finally:
                self.clean_up(f"soak-run-{count}")
            with contextlib.suppress(MlrunwayError, OSError, ValueError):  # a fault now: checked after the next one
                self.broken += [line for line in self.at_rest(self.results[-1]) if line not in self.broken[-3:]]
            self.stopping.wait(1.0)

    def clean_up(self, holder: str) -> None:
        """The DAG's cleanup task, retried as Airflow retries it (a fault may fail a try) for up to a minute."""
        for _ in range(30):
            try:
                stable.clean_up(self.backend, ENDPOINT, holder)
                return
            except (MlrunwayError, OSError, ValueError):
                self.stopping.wait(2.0)

    def at_rest(self, result: dict[str, Any]) -> list[str]:
        """Between two rollouts: the alias names what serves; a promotion had its evidence; no half-written
        version is left."""
        broken = []
        if result["decision"] == "promoted":
            short = [w["phase"] for w in result["windows"] if w["challenger"].get("requests", 0) < MIN_REQUESTS]
            if not result["gate"] or short:
                broken.append(f"evidence: {result['model']} promoted with fewer than {MIN_REQUESTS} challenger "
                              f"requests in the {short} window(s)" if short else
                              f"evidence: {result['model']} promoted with no gate")
        live = stable.serving(self.backend, ENDPOINT)
        alias = self.backend.models.alias(MODEL, "production")
        named = f"{alias.name}:{alias.version}" if alias else None
        if live is not None and live["model"] != named:
            broken.append(f"production: {live['deployment']} serves {live['model']}, the alias names {named} (after "
                          f"{result['decision']}: {result['reason'][:120]})")
        if left := [p.name for p in (self.backend.workspace.models).glob("*/.new.*")]:
            broken.append(f"kept: a registration's temporary folders were left behind: {left}")
        return broken

    def once(self, count: int) -> dict[str, Any]:
        folder = self.root / f"model-{count}"
        folder.mkdir(exist_ok=True)
        quality = 0.5 + count / 1000 + self.rng.uniform(-0.05, 0.05)  # better than the champion about half the time
        (folder / "quality.json").write_text(json.dumps({"quality": round(quality, 4)}))
        version = self.backend.models.register(MODEL, folder)
        settings = DeploymentSettings(model=f"{MODEL}:{version.version}", code_dir=str(self.code))
        b = self.backend
        policy = RolloutPolicy.parse({"steps": [50, 100], "window_s": 4.0, "min_requests": MIN_REQUESTS},
                                     metrics_lag_s=b.capabilities.metrics_lag_s)
        r = stable.begin(b, ENDPOINT, f"soak-run-{count}", settings, policy, lease_s=120.0)
        deadline = time.monotonic() + 60
        while not (info := b.endpoints.get_deployment(ENDPOINT, r.slot)).provisioning_state.is_terminal():
            if time.monotonic() > deadline:
                raise TimeoutError(f"deployment {r.slot} not provisioned in 60 s")
            time.sleep(0.2)
        if info.provisioning_state is not ProvisioningState.SUCCEEDED:
            raise MlrunwayError(f"deployment {r.slot}: {info.error}")
        if r.champion is None:
            b.endpoints.set_traffic(ENDPOINT, {r.slot: 100})
            return stable.conclude(b, r, "created", "the endpoint's first model")
        evaluation = team_set(self.code, {"file": "eval.jsonl", "metric": "metrics.py:quality"})
        # Every row alike and each version's quality a constant: the paired comparison is exact at any size.
        if not stable.judge_challenger(b, r, evaluation, GateSettings(min_samples=1)):
            return stable.conclude(b, r, "held", "not better")
        wait = stable.next_phase(b, r)
        while True:
            self.stopping.wait(wait)
            after = stable.after_window(b, r)
            if after.decision:
                return stable.conclude(b, r, after.decision, after.reason)
            wait = after.wait_s


class Soak:
    """One chunk: a fresh workspace under ``root``, the workload started, faults injected and checked."""

    def __init__(self, root: Path, seed: int, *, tmpfs: bool) -> None:
        self.root, self.seed = root, seed
        self.ws = root / "ws"
        self.ws.mkdir(parents=True, exist_ok=True)
        self.disk: str | None = None
        if tmpfs:
            mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(self.ws)],
                                     capture_output=True, text=True)
            self.disk = None if mounted.returncode == 0 else mounted.stderr.strip() or "mount failed"
        else:
            self.disk = "not asked for"
        self.backend = LocalBackend.at(self.ws)
        self.rng = random.Random(f"workload:{seed}")
        self.code = root / "code"
        self.code.mkdir(exist_ok=True)
        (self.code / "train.py").write_text(TRAIN)
        (self.code / "curve.py").write_text(CURVE)
        self.tasks: dict[str, str] = {}  # base -> "job" or "sweep", the ones the workload still runs
        self.canceled: dict[str, int] = {}  # base -> how many attempts it had when canceled
        self.completed: dict[str, tuple[str | None, int]] = {}  # job -> (model digest, metric count)
        self.counter = 0
        self.orphans: dict[int, float] = {}  # pid -> first seen without an owner
        self.traffic = Traffic(self.backend)
        self.rollouts = Rollouts(self.backend, root, seed)

    # -- the workload -----------------------------------------------------------------------------
    def start(self) -> None:
        self.rollouts.start()
        self.traffic.start()

    def keep_busy(self) -> None:
        """What the DAG's tasks do: submit, retry what a fault killed, now and then cancel; keep two jobs and a
        sweep going."""
        jobs = self.backend.jobs
        for base, kind in list(self.tasks.items()):
            attempts = [j for j in jobs.list(base) if base_name(j.name) == base]
            latest = max(attempts, key=lambda j: j.created or 0, default=None)
            if latest is None:
                continue
            if not latest.status.is_terminal() and self.rng.random() < 0.005:  # once in 40 s a task
                self.canceled[base] = len(attempts)
                jobs.cancel(latest.name, "canceled by the soak")
                del self.tasks[base]
            elif latest.status is JobStatus.COMPLETED:
                if kind == "job":
                    self.completed[latest.name] = (digest(Path(latest.outputs or "") / "model.bin"),
                                                   len(jobs.metric_history(latest.name, "loss")))
                del self.tasks[base]
            elif latest.status in (JobStatus.FAILED, JobStatus.CANCELED):
                if len(attempts) >= MAX_ATTEMPTS or not self._retryable(latest):
                    del self.tasks[base]
                else:
                    submit_or_reattach(jobs, base, lambda name, k=kind: self._submit(name, k))
        while sum(1 for k in self.tasks.values() if k == "job") < 2:
            self._new("job")
        if "sweep" not in self.tasks.values():
            self._new("sweep")

    @staticmethod
    def _retryable(info: Any) -> bool:
        """Airflow retries a task whose job failed; the soak retries only what a fault did (killed, or the disk)."""
        return bool(info.error) and any(w in info.error for w in ("killed", "SIG", "died", "No space", "ENOSPC",
                                                                    "controller"))

    def _new(self, kind: str) -> None:
        self.counter += 1
        base = f"{kind}-{self.counter}"
        self.tasks[base] = kind
        submit_or_reattach(self.backend.jobs, base, lambda name: self._submit(name, kind))

    def _submit(self, name: str, kind: str) -> Any:
        if kind == "job":
            epochs = self.rng.randint(4, 16)
            return self.backend.jobs.submit(name, CommandJobSpec(code=str(self.code), command=f"python train.py {epochs}"))
        trial = CommandJobSpec(code=str(self.code), command="python curve.py --curve ${{inputs.curve}}",
                               inputs={"curve": "0"})
        return self.backend.jobs.submit_sweep(name, SweepSpec(
            trial=trial, search_space={"curve": Choice(values=list(CURVES))}, sampling_algorithm="grid",
            objective=Objective(primary_metric="best_val_acc"),
            early_termination=BanditPolicy(slack_factor=0.2, evaluation_interval=1, delay_evaluation=2),
            limits=SweepLimits(max_total_trials=3, max_concurrent_trials=2)), poll_s=0.3)

    # -- faults -----------------------------------------------------------------------------------
    def processes(self, kind: str) -> list[psutil.Process]:
        """This workspace's live processes of one kind."""
        endpoints = self._endpoints()
        endpoint_tokens, masters = {s.token for s in endpoints}, {s.pid for s in endpoints}
        found = []
        for token, procs in marked_processes().items():
            for proc in procs:
                try:
                    cmd = " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                if token in endpoint_tokens:
                    what = "master" if proc.pid in masters else "worker"
                elif str(self.ws) not in cmd and not self._ours(proc):
                    continue
                elif "mlrunway.local.supervisor" in cmd:
                    what = "supervisor"
                elif "mlrunway.local.sweep_controller" in cmd:
                    what = "controller"
                else:
                    what = "script"
                if what == kind:
                    found.append(proc)
        return found

    def _ours(self, proc: psutil.Process) -> bool:
        try:
            return proc.cwd().startswith(str(self.ws))
        except psutil.Error:
            return False

    def _endpoints(self) -> list[Any]:
        try:
            return [self.backend.endpoints.state(e.name) for e in self.backend.endpoints.list()]
        except (MlrunwayError, OSError, ValueError):
            return []

    def inject(self, fault: Fault) -> None:
        """Inject ``fault`` and return when it has ended (a kill delivered, a process thawed, the disk freed, the
        machine booted and recovered)."""
        action, _, kind = fault.kind.partition(":")
        if action in ("kill", "stop"):
            procs = self.processes(kind)
            if not procs:
                fault.skipped = f"no {kind} process ran"
                return
            proc = random.Random(f"target:{self.seed}:{fault.index}").choice(procs)
            fault.target = f"pid {proc.pid}: {' '.join(proc.cmdline())[-120:]}"
            if action == "kill":
                proc.send_signal(signal.SIGKILL)
                with contextlib.suppress(psutil.Error):
                    proc.wait(5)
            else:
                proc.send_signal(signal.SIGSTOP)
                time.sleep(fault.duration_s)
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGCONT)
            if kind == "master":  # nothing restarts a dead master but recover (at boot) or the next rollout
                recover_workspace(self.backend)
        elif fault.kind == "enospc":
            if self.disk is not None:
                fault.skipped = f"the workspace is not on a tmpfs ({self.disk}): no full disk can be made"
                return
            with self.full_disk():
                time.sleep(fault.duration_s)
        else:  # reboot: the power goes, everything at once; at boot, recover
            procs = [p for token, ps in marked_processes().items() for p in ps if self._is_ours(token, p)]
            fault.target = f"{len(procs)} processes"
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGKILL)
            wait_gone(procs, 10.0)
            recover_workspace(LocalBackend.at(self.ws))

    def _is_ours(self, token: str, proc: psutil.Process) -> bool:
        if token in {s.token for s in self._endpoints()}:
            return True
        try:
            return str(self.ws) in " ".join(proc.cmdline()) or self._ours(proc)
        except psutil.Error:
            return False

    @contextlib.contextmanager
    def full_disk(self) -> Iterator[None]:
        filler = self.ws / ".filler"
        try:
            with open(filler, "wb", buffering=0) as out:
                block = b"x" * (1 << 20)
                with contextlib.suppress(OSError):
                    while True:
                        out.write(block)
                with contextlib.suppress(OSError):  # the last megabyte's crumbs
                    while True:
                        out.write(b"x" * 4096)
            yield
        finally:
            filler.unlink(missing_ok=True)

    # -- invariants -------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """What was written before the fault, to find lost afterwards."""
        jobs = self.backend.jobs
        running = {}
        for info in jobs.list():
            if info.kind == "command" and not info.status.is_terminal():
                with contextlib.suppress(MlrunwayError, OSError, ValueError):
                    running[info.name] = len(jobs.metric_history(info.name, "loss" if info.name.startswith("job")
                                                                 else "best_val_acc"))
        versions = {v.version: digest(Path(v.path) / "quality.json") for v in self.backend.models.list(MODEL)} \
            if (self.ws / "models").exists() else {}
        end = time.time() - 3
        served = {}
        with contextlib.suppress(MlrunwayError, OSError, ValueError):
            for slot in ("blue", "green"):
                served[slot] = (end, self.backend.endpoints.deployment_metrics(ENDPOINT, slot, end - 600, end).requests)
        return {"running": running, "versions": versions, "served": served}

    def check(self, before: dict[str, Any]) -> list[str]:
        broken: list[str] = []
        jobs = self.backend.jobs
        time.sleep(SETTLE_S)
        infos = jobs.list()
        owners = {s.token for s in self._endpoints()}
        live_attempts: dict[str, list[str]] = {}
        for info in infos:
            state = JobState(self.ws / "jobs" / info.name)
            try:
                status, token = state.status(), state.job()["token"]
            except (OSError, ValueError, KeyError):
                continue
            supervisor = Identity.recorded(status.get("supervisor_pid"), status.get("supervisor_started"))
            if not info.status.is_terminal():
                owners.add(token)
                live_attempts.setdefault(base_name(info.name), []).append(info.name)
                if supervisor is not None and not supervisor.alive() and not jobs.get(info.name).status.is_terminal():
                    broken.append(f"truth: {info.name} reads {info.status.value}, its supervisor is dead")
                if supervisor is None and time.time() - (info.created or time.time()) > 30:
                    broken.append(f"truth: {info.name} reads {info.status.value} for 30 s with no supervisor")
        for base, names in live_attempts.items():
            if len(names) > 1:
                broken.append(f"attempts: {base} has {len(names)} live attempts: {names}")
        for base, count in self.canceled.items():
            attempts = [j for j in infos if base_name(j.name) == base]
            if len(attempts) > count or any(not j.status.is_terminal() for j in attempts):
                broken.append(f"attempts: {base} was canceled, and runs again: "
                              f"{[(j.name, j.status.value) for j in attempts]}")
        now = time.monotonic()
        seen = set()
        for token, procs in marked_processes().items():
            for proc in procs:
                if token in owners or not self._is_ours(token, proc):
                    continue
                seen.add(proc.pid)
                first = self.orphans.setdefault(proc.pid, now)
                if now - first > ORPHAN_GRACE_S:
                    with contextlib.suppress(psutil.Error):
                        broken.append(f"orphans: pid {proc.pid} ({' '.join(proc.cmdline())[-100:]}) owned by nothing "
                                      f"for {now - first:.0f} s")
        self.orphans = {pid: t for pid, t in self.orphans.items() if pid in seen}
        broken += self._kept(before)
        broken += self._production()
        return broken

    def _kept(self, before: dict[str, Any]) -> list[str]:
        broken = []
        jobs = self.backend.jobs
        for name, count in before["running"].items():
            metric = "loss" if name.startswith("job") else "best_val_acc"
            with contextlib.suppress(MlrunwayError, OSError, ValueError):
                if (now := len(jobs.metric_history(name, metric))) < count:
                    broken.append(f"kept: {name} had {count} values of {metric} in MLflow, now {now}")
        sample = list(self.completed.items())[-10:]
        for name, (model, count) in sample:
            if digest(Path(jobs.get(name).outputs or "") / "model.bin") != model:
                broken.append(f"kept: {name}'s model.bin is not what it saved")
            if len(jobs.metric_history(name, "loss")) != count:
                broken.append(f"kept: {name}'s MLflow history of loss changed after it completed")
        if before["versions"]:
            now_versions = {v.version: digest(Path(v.path) / "quality.json") for v in self.backend.models.list(MODEL)}
            for version, files in before["versions"].items():
                if now_versions.get(version) != files:
                    broken.append(f"kept: model {MODEL}:{version} lost or changed")
        for slot, (end, requests) in before["served"].items():
            with contextlib.suppress(MlrunwayError, OSError, ValueError):
                now_served = self.backend.endpoints.deployment_metrics(ENDPOINT, slot, end - 600, end).requests
                if now_served < requests:
                    broken.append(f"kept: {slot}'s recorded requests fell from {requests} to {now_served}")
        return broken

    def _production(self) -> list[str]:
        """What the rollouts found at rest since the last fault (each rollout after its cleanup)."""
        broken, self._judged = self.rollouts.broken[self._judged:], len(self.rollouts.broken)
        return broken

    _judged = 0

    # -- the end ----------------------------------------------------------------------------------
    def close(self) -> list[str]:
        """Stop the workload, cancel every job, delete the endpoint; what is left afterwards is a broken line."""
        self.rollouts.stopping.set()
        self.rollouts.join(120)
        self.traffic.stopping.set()
        self.traffic.join(10)
        for info in self.backend.jobs.list():
            if not info.status.is_terminal():
                with contextlib.suppress(MlrunwayError, OSError):
                    self.backend.jobs.cancel(info.name, "the soak's chunk ended")
        for info in self.backend.endpoints.list():
            self.backend.endpoints.delete(info.name)
        deadline = time.monotonic() + ORPHAN_GRACE_S
        while (left := [p for t, ps in marked_processes().items() for p in ps if self._is_ours(t, p)]):
            if time.monotonic() > deadline:
                for proc in left:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
                return [f"orphans: {len(left)} processes left after the chunk's cleanup"]
            time.sleep(0.2)
        if self.disk is None:
            subprocess.run(["umount", "-l", str(self.ws)], check=False)
        return []


def run(results: Path, *, faults: int, seed: int, chunk_s: float, tmpfs: bool = True,
        gap_s: tuple[float, float] = (0.3, 1.0), log: Any = print) -> dict[str, Any]:
    """Run faults from where ``results`` stops (or the first) until ``faults`` are done or ``chunk_s`` has passed;
    save ``results`` after each fault. Returns the results so far."""
    record: dict[str, Any] = json.loads(results.read_text()) if results.exists() else {
        "seed": seed, "faults": faults, "done": 0, "records": [], "chunks": [], "broken": []}
    if record["seed"] != seed or record["faults"] != faults:
        raise SystemExit(f"{results} is a run of seed {record['seed']} and {record['faults']} faults; give those, "
                         "or another --results")
    begun, first = time.monotonic(), record["done"]
    chunk: dict[str, Any] = {"from": first, "commit": _commit(), "machine": f"{platform.node()}, {os.cpu_count()} cores",
                             "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="mlrunway-soak-") as scratch:
        soak = Soak(Path(scratch), seed, tmpfs=tmpfs)
        chunk["enospc"] = "on a tmpfs" if soak.disk is None else f"skipped: {soak.disk}"
        gaps = random.Random(f"gaps:{seed}:{first}")
        try:
            soak.start()
            soak.keep_busy()
            while record["done"] < faults and time.monotonic() - begun < chunk_s:
                fault = draw(seed, record["done"])
                deadline = time.monotonic() + gaps.uniform(*gap_s)
                while time.monotonic() < deadline:
                    soak.keep_busy()
                    time.sleep(0.2)
                before = soak.snapshot()
                start = time.monotonic()
                soak.inject(fault)
                if fault.skipped is None:
                    fault.broken = soak.check(before)
                soak.keep_busy()
                fault.took_s = round(time.monotonic() - start, 2)
                record["records"].append(asdict(fault))
                record["broken"] += [f"fault {fault.index} ({fault.kind}): {line}" for line in fault.broken]
                record["done"] += 1
                log(f"fault {fault.index:>4} {fault.kind:<16} {fault.skipped or fault.target[:70]:<72} "
                    f"{'BROKEN: ' + '; '.join(fault.broken) if fault.broken else 'ok'}")
                _save(results, record)
        finally:
            workload = _tally(f"{j.kind} {j.status.value}" for j in soak.backend.jobs.list())
            ended = soak.close()
            record["broken"] += [f"end of chunk: {line}" for line in ended]
            results_ = soak.rollouts.results
            chunk.update(to=record["done"], seconds=round(time.monotonic() - begun), jobs=workload,
                         rollouts=_tally(d["decision"] for d in results_), answers=soak.traffic.answers,
                         failed_answers=soak.traffic.failures,
                         rollout_errors=sorted({d["reason"][:160] for d in results_ if d["decision"] == "error"}))
            record["chunks"].append(chunk)
            _save(results, record)
    return record


def _tally(values: Iterator[str] | Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _save(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(temporary, path)


def _commit() -> str:
    out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                         cwd=Path(__file__).parent)
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--chunk-s", type=float, default=3000.0, help="stop after this many seconds (< 1 hour)")
    parser.add_argument("--results", type=Path, default=Path("tests/chaos/results/soak.json"))
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the chunk still cleans up and saves
    record = run(args.results, faults=args.faults, seed=args.seed, chunk_s=args.chunk_s)
    print(f"{record['done']} of {record['faults']} faults (seed {record['seed']}); {len(record['broken'])} invariants "
          f"broken{': ' if record['broken'] else ''}" + "\n  ".join(record["broken"][:20]))
    if record["done"] < record["faults"]:
        print(f"not finished: run the same command again to go on from fault {record['done']}")
        return UNFINISHED
    return 1 if record["broken"] else 0


if __name__ == "__main__":
    sys.exit(main())
