"""Sweeps without a backend: seeded sampling, the controller that applies the early-termination policy, the
leaderboard and best-trial choice, and the carry-over of a retried sweep's trials."""

from __future__ import annotations

__all__ = ["attempts", "controller", "leaderboard", "sampling"]
