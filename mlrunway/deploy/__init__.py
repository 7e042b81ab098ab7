"""How a model reaches an endpoint, behind one seam: a :class:`~mlrunway.deploy.base.DeploymentStrategy` is a state
machine in the core whose every wait (a provisioning, a rollout window, a person's answer) is handed to its host,
the deploy task, as a step with the state to resume from (:mod:`mlrunway.deploy.base`). The task turns waits into
triggers and knows no strategy's insides.

- ``blue`` (:mod:`.blue`): the run's own endpoint, `blue` at 100% after a smoke test, deleted at cleanup;
- ``champion_challenger`` (:mod:`.champion_challenger`): a stable endpoint across runs: the gate, the staged
  rollout and the registry aliases: :mod:`.stable` (the stable endpoint), :mod:`.gate`, :mod:`.rollout`,
  :mod:`.shadow`, and the model card each version that reaches an endpoint gets (:mod:`.card`); its settings
  (the deploy task's ``production`` object) are one group, :class:`~.production.ProductionSettings`.

A new strategy is one module and one line in :data:`STRATEGIES`.
"""

from __future__ import annotations

from typing import Any

from mlrunway import check
from mlrunway.deploy.base import Approval, DeploymentStrategy, DeployRequest, Done, Provisioning, Resumed, Step, Window
from mlrunway.deploy.blue import PerRunBlue
from mlrunway.deploy.card import card_page, record_deployment
from mlrunway.deploy.champion_challenger import ChampionChallenger, WindowWatch
from mlrunway.deploy.gate import Evaluation, Promotion, accuracy
from mlrunway.deploy.production import APPROVAL_TIMEOUT_S, ProductionSettings
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.deploy.smoke import SmokeTest
from mlrunway.deploy.stable import APPROVAL_BY_TAG, APPROVAL_TAG, evaluation_set, not_newest, serving

# The public face: what a deploy task, the Airflow adapter (its Params, triggers, pages and the batch example) and
# any host of a strategy import; a strategy's insides stay behind it.
__all__ = ["APPROVAL_BY_TAG", "APPROVAL_TAG", "APPROVAL_TIMEOUT_S", "STRATEGIES", "Approval", "DeployRequest",
           "DeploymentStrategy", "Done", "Evaluation", "ProductionSettings", "Promotion", "Provisioning", "Resumed",
           "RolloutPolicy", "SmokeTest", "Step", "Window", "WindowWatch", "accuracy", "card_page", "evaluation_set",
           "not_newest", "record_deployment", "serving", "strategy", "strategy_for", "window_watch"]

STRATEGIES: dict[str, type[DeploymentStrategy]] = {PerRunBlue.name: PerRunBlue,
                                                    ChampionChallenger.name: ChampionChallenger}


def strategy(name: str) -> DeploymentStrategy:
    """The strategy registered as ``name``; a SpecError naming the field and the ones there are."""
    return STRATEGIES[check.one_of("strategy", name, tuple(STRATEGIES))]()


def strategy_for(name: str | None, endpoint_name: str | None) -> DeploymentStrategy:
    """The strategy a deployment runs: the one it names, else ``champion_challenger`` with a stable endpoint, else
    ``blue`` (the deploy task, the builder's checks and the cleanup task choose alike)."""
    return strategy(name or (ChampionChallenger.name if endpoint_name else PerRunBlue.name))


def window_watch(carry: dict[str, Any]) -> WindowWatch | None:
    """The watch of a staged rollout's window, read from the state its :class:`Window` carries (the host keeps it
    as an opaque value); None: the window is only waited out."""
    return WindowWatch.of(carry)
