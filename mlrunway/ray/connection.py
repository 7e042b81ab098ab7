"""An ``mlrunway_ray`` connection: where the cluster's Jobs API is, the folder every node shares, the MLflow
server, and what a job's ``compute`` and ``environment`` name, declared once (:mod:`mlrunway.settings`).

As ``AIRFLOW_CONN_...`` JSON::

    {"conn_type": "mlrunway_ray", "password": "<the cluster's token>",
     "extra": {"address": "http://10.0.0.5:8265", "storage": "/mnt/shared/mlrunway",
               "tracking_uri": "http://10.0.0.5:5000", "namespace": "team-a",
               "profiles": {"cpu": {"num_cpus": 2}, "gpu1": {"num_cpus": 4, "num_gpus": 1}},
               "environments": {"torch": {"pip": ["torch==2.13.0"], "env_vars": {"OMP_NUM_THREADS": "4"}}},
               "rates": {"currency": "USD", "per_hour": {"gpu1": 2.5}}}}

**Security.** Ray's Jobs API runs any command it is sent, and unauthenticated Ray dashboards have been attacked in
the wild (remote code execution on clusters left open). An address that is not loopback is refused unless the
connection holds a token (the cluster started with ``RAY_AUTH_MODE=token``) or says, in
``accept_unauthenticated_cluster``, that the team accepts a cluster anyone who reaches it can run code on. The token
goes only into the ``Authorization`` header, never into a job's runtime environment or metadata (the Jobs API
returns both to any reader).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, Strict, TypeAdapter, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.backend.rates import RateCard
from mlrunway.settings import NOT_A_FLAG, SettingsError, parse, setting

__all__ = ["Environment", "Profile", "RayConnection", "is_loopback"]

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class Profile:
    """The resources a job's entrypoint asks Ray for (``entrypoint_num_cpus`` and the rest): a job runs on a node
    that has them, never on the head by accident."""

    num_cpus: Annotated[float, NOT_A_FLAG] = setting(
        1.0, ge=0, le=4096, allow_inf_nan=False, description="CPUs the job's entrypoint reserves.",
        problem="{value!r} is not a number of CPUs", fix="give a number from 0 to 4096, e.g. 2")
    num_gpus: Annotated[float, NOT_A_FLAG] = setting(
        0.0, ge=0, le=64, allow_inf_nan=False, description="GPUs the job's entrypoint reserves.",
        problem="{value!r} is not a number of GPUs", fix="give a number from 0 to 64, e.g. 1")
    memory: Annotated[int | None, NOT_A_FLAG] = setting(
        None, ge=1, description="Bytes of memory the job's entrypoint reserves (Ray's logical memory); empty: none.",
        problem="{value!r} is not a number of bytes", fix="give a whole number of bytes, e.g. 8000000000")
    resources: dict[str, Annotated[float, NOT_A_FLAG]] = setting(
        {}, description="Custom resources the entrypoint reserves ({\"accelerator_type:A100\": 1}).",
        problem="{value!r} is not a map of custom resources", fix='give {"<resource>": <amount>, ...}')

    def entrypoint(self) -> dict[str, Any]:
        """The Jobs API's ``entrypoint_*`` fields of this profile."""
        asked: dict[str, Any] = {"entrypoint_num_cpus": self.num_cpus, "entrypoint_num_gpus": self.num_gpus}
        if self.memory is not None:
            asked["entrypoint_memory"] = self.memory
        if self.resources:
            asked["entrypoint_resources"] = dict(self.resources)
        return asked


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class Environment:
    """A runtime environment a job's ``environment`` names: what Ray installs or starts for it on the node."""

    pip: list[str] | None = setting(
        None, description="Packages pip installs for the job (Ray's runtime_env pip).",
        problem="{value!r} is not a list of requirements", fix='give e.g. ["torch==2.13.0"]')
    uv: list[str] | None = setting(
        None, description="Packages uv installs for the job (Ray's runtime_env uv).",
        problem="{value!r} is not a list of requirements", fix='give e.g. ["torch==2.13.0"]')
    conda: str | dict[str, Any] | None = setting(
        None, description="A conda environment's name, or its environment.yml as an object.",
        problem="{value!r} is not a conda environment", fix="give its name or its environment.yml as an object")
    image_uri: str | None = setting(
        None, description="A container image the job runs in (Ray's runtime_env image_uri).",
        problem="{value!r} is not an image", fix="give an image reference, e.g. rayproject/ray:2.60.0-py311")
    env_vars: dict[str, str] = setting(
        {}, description="Environment variables of the job's processes (never a secret: readers of the job see them).",
        problem="{value!r} is not a map of variables", fix='give {"NAME": "value", ...}')

    def runtime_env(self) -> dict[str, Any]:
        """Ray's ``runtime_env`` fields of this environment (those set)."""
        fields = {"pip": self.pip, "uv": self.uv, "conda": self.conda, "image_uri": self.image_uri}
        return {key: value for key, value in fields.items() if value is not None}


ProfileName = Annotated[str, Field(pattern=_NAME, json_schema_extra={
    "problem": "is not a profile name", "fix": "use letters, digits, '_', '.', '-' (up to 64)"})]


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class RayConnection:
    """Where the Ray backend's work goes (the ``mlrunway_ray`` connection's fields)."""

    address: str = setting(
        ..., description="The cluster's Jobs API (the head's dashboard), e.g. http://10.0.0.5:8265.",
        problem="{value!r} is not the address of Ray's Jobs API", fix="give http(s)://<head>:<dashboard port>")
    storage: str = setting(
        ..., description="A folder every Ray node and every Airflow component sees at the same path (an NFS or "
                         "a CSI volume): inputs, outputs, job records, sweep records.",
        problem="{value!r} is not an absolute folder", fix="give the shared folder's absolute path, e.g. /mnt/shared")
    tracking_uri: str = setting(
        ..., description="The MLflow tracking server the jobs log to and whose Model Registry holds the models.",
        problem="{value!r} is not an MLflow server's address", fix="give http(s)://<host>:<port>")
    namespace: str = setting(
        "mlrunway", pattern=r"^[a-z0-9][a-z0-9-]{0,29}$",
        description="Prefixes every job this Airflow submits: Ray's job ids are cluster-wide, so each Airflow "
                    "sharing a cluster sets its own.",
        problem="{value!r} is not a namespace", fix="use up to 30 lower-case letters, digits and '-', e.g. team-a")
    profiles: dict[ProfileName, Profile] = setting(
        {"cpu": Profile()}, description="Resources by name, named by a job's compute.",
        problem="{value!r} is not a map of profiles", fix='give {"cpu": {"num_cpus": 2}, "gpu1": {"num_gpus": 1}}')
    default_profile: str = setting(
        "cpu", description="The profile of a job that names no compute.",
        problem="{value!r} is not a profile name", fix="name one of the profiles")
    environments: dict[ProfileName, Environment] = setting(
        {}, description="Runtime environments by name, named by a job's environment; a job that names none runs "
                        "in the cluster's own Python.",
        problem="{value!r} is not a map of environments", fix='give {"torch": {"pip": ["torch==2.13.0"]}}')
    accept_unauthenticated_cluster: Annotated[bool, Strict()] = setting(
        False, description="Accept a cluster on another machine that has no token auth: anyone who reaches its "
                           "Jobs API can run any command on it. Prefer RAY_AUTH_MODE=token and the token.",
        problem="{value!r} is not true or false", fix="pass true or false")
    autoscaling: Annotated[bool, Strict()] = setting(
        False, description="The cluster adds nodes on demand (Ray's or KubeRay's autoscaler): a distributed job its "
                            "nodes now up could never place waits for new ones instead of being refused.",
        problem="{value!r} is not true or false", fix="pass true or false")
    rates: RateCard = setting(
        RateCard(), description="What an hour of each profile costs: per_hour by profile name.",
        problem="{value!r} is not a rate card", fix='give {"currency": "USD", "per_hour": {"gpu1": 2.5}}')
    token: str | None = setting(None, description="The cluster's token (the connection's password).",
                                problem="is not a token", fix="give the token as text")

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError("not an address")
        return value.rstrip("/")

    @field_validator("tracking_uri")
    @classmethod
    def _tracking(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not a server")
        return value.rstrip("/")

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value:
            raise ValueError("not absolute")
        return value.rstrip("/") or "/"

    @model_validator(mode="after")
    def _rules(self) -> RayConnection:
        if not self.profiles:
            raise SettingsError("profiles", "is empty", 'give at least one, e.g. {"cpu": {"num_cpus": 1}}')
        if self.default_profile not in self.profiles:
            raise SettingsError("default_profile", f"{self.default_profile!r} is not one of the profiles "
                                f"({', '.join(sorted(self.profiles))})", "name one of them, or add it to profiles")
        if self.rates.local_rate is not None:
            raise SettingsError("rates.local_rate", "prices this machine's core-hours, which no Ray job runs on",
                                'price the profiles instead: {"per_hour": {"<profile>": <price>}}')
        unknown = sorted(set(self.rates.per_hour) - {name.lower() for name in self.profiles})
        if unknown:
            raise SettingsError("rates.per_hour", f"prices {', '.join(unknown)}, which no profile is named",
                                f"key the rates by profile name ({', '.join(sorted(self.profiles))})")
        if not self.token and not self.accept_unauthenticated_cluster and not is_loopback(self.address):
            raise SettingsError(
                "address", f"{self.address} is another machine and the connection has no token: Ray's Jobs API runs "
                "any command it is sent, and open Ray dashboards have been attacked",
                "start the cluster with RAY_AUTH_MODE=token and put its token in the connection's password, or set "
                "accept_unauthenticated_cluster to true if the cluster is reachable only by those you trust")
        return self

    def profile(self, compute: str | None, field: str = "command_job.compute") -> tuple[str, Profile]:
        """The profile a job's ``compute`` names (the default for none); SpecError naming the connection's."""
        name = compute or self.default_profile
        if name not in self.profiles:
            raise check.fail(field, f"{name!r} is not a resource profile of the Ray connection",
                             f"name one of {', '.join(sorted(self.profiles))}, or add it to the connection's profiles")
        return name, self.profiles[name]

    def environment(self, name: str | None, field: str = "command_job.environment") -> Environment | None:
        """The runtime environment a job's ``environment`` names (None for none); SpecError naming the connection's."""
        if name is None:
            return None
        if name not in self.environments:
            known = ", ".join(sorted(self.environments)) or "none"
            raise check.fail(field, f"{name!r} is not a runtime environment of the Ray connection (it has {known})",
                             "name one of them, leave it empty for the cluster's own Python, or add it to the "
                             "connection's environments")
        return self.environments[name]

    def fields(self) -> dict[str, Any]:
        """The connection's fields as :meth:`parse` takes them, without the token (a controller on the cluster reads
        them from the sweep's record; the token it reads from its own file)."""
        data = TypeAdapter(RayConnection).dump_python(self, mode="json")
        data.pop("token", None)
        data["rates"] = {key: value for key, value in data["rates"].items() if value is not None}
        return dict(data)

    @classmethod
    def parse(cls, fields: Mapping[str, Any], secret: str | None = None) -> RayConnection:
        """The connection from its extra fields (JSON text where the form gives text) and its password (the token);
        every mistake a SpecError naming ``mlrunway_ray connection.<field>`` and the fix."""
        raw: dict[str, Any] = {}
        for key, value in fields.items():
            if key in ("profiles", "environments", "rates") and isinstance(value, str):
                try:
                    value = json.loads(value) if value.strip() else None
                except ValueError as exc:
                    raise check.fail(f"mlrunway_ray connection.{key}", f"is not JSON ({exc})",
                                     "write it as a JSON object") from None
            if key in ("accept_unauthenticated_cluster", "autoscaling") and isinstance(value, str):
                value = {"true": True, "false": False}.get(value.strip().lower(), value)
            if key == "budget":  # the hook's, not the backend's
                continue
            if value is not None:
                raw[key] = value
        if "rates" in raw:
            raw["rates"] = RateCard.parse(raw["rates"], "mlrunway_ray connection.rates")
        if secret:
            raw["token"] = secret
        return parse(cls, raw, "mlrunway_ray connection", noun="Ray connection")


def is_loopback(address: str) -> bool:
    """Whether ``address`` names this machine (127.0.0.0/8, ::1, localhost)."""
    host = urlsplit(address).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

