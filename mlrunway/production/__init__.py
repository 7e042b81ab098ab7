"""A production endpoint that scheduled runs improve: a stable endpoint outlives runs, each run's model is a
challenger that must beat the champion serving on data no sweep saw (:mod:`gate`), and goes live through a
staged rollout that rolls back by itself (:mod:`rollout`); registry aliases say what is production and what was
(:mod:`stable`). No Airflow here: the deploy operator drives these steps and waits deferred between them."""

__all__ = ["gate", "rollout", "stable"]
