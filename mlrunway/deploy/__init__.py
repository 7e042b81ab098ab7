"""How a model reaches an endpoint, behind one seam: a :class:`~mlrunway.deploy.base.DeploymentStrategy` is a state
machine in the core whose every wait (a provisioning, a rollout window, a person's answer) is handed to its host,
the deploy task, as a step with the state to resume from (:mod:`mlrunway.deploy.base`). The task turns waits into
triggers and knows no strategy's insides.

- ``blue`` (:mod:`.blue`): the run's own endpoint, `blue` at 100% after a smoke test, deleted at cleanup;
- ``champion_challenger`` (:mod:`.champion_challenger`): a stable endpoint across runs: the gate, the staged
  rollout and the registry aliases of :mod:`mlrunway.production`.

A new strategy is one module and one line in :data:`STRATEGIES`.
"""

from __future__ import annotations

from mlrunway import check
from mlrunway.deploy.base import DeploymentStrategy, DeployRequest
from mlrunway.deploy.blue import PerRunBlue
from mlrunway.deploy.champion_challenger import ChampionChallenger

__all__ = ["STRATEGIES", "DeployRequest", "DeploymentStrategy", "strategy"]

STRATEGIES: dict[str, type[DeploymentStrategy]] = {PerRunBlue.name: PerRunBlue,
                                                    ChampionChallenger.name: ChampionChallenger}


def strategy(name: str) -> DeploymentStrategy:
    """The strategy registered as ``name``; a SpecError naming the field and the ones there are."""
    return STRATEGIES[check.one_of("strategy", name, tuple(STRATEGIES))]()
