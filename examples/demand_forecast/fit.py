"""Fit a small MLP that forecasts tomorrow's demand from eight features of today, with DDP.

A team's own script, sharing nothing with the digits example: its own flags, its own data (made here from a
seed: no download, no input folder), a regression loss minimized (``val_rmse``, logged once per epoch with
MLflow), and its model saved to the folder it is told (``--model-dir``, a named output of the job):
``model.pt2`` (torch.export), ``signature.json`` and ``sample_inputs.npy`` (the parity gate's inputs). It runs
under torchrun (WORLD_SIZE, RANK, LOCAL_RANK from the environment) on any number of processes.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import mlflow
import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FEATURES = 8


def make_data(rows: int, seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """Demand as a noisy nonlinear function of weekday, price, promotion, temperature and lags."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    y = (2.0 * np.sin(x[:, 0]) + 1.5 * x[:, 1] * x[:, 2] - x[:, 3] ** 2 + 0.5 * x[:, 4:].sum(axis=1)
         + 0.1 * rng.standard_normal(rows)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y[:, None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--hidden-units", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--model-dir", required=True)
    args = parser.parse_args()

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    x, y = make_data(args.rows)
    split = int(0.8 * len(x))
    train = TensorDataset(x[:split], y[:split])
    sampler = DistributedSampler(train, seed=0) if world > 1 else None
    loader = DataLoader(train, batch_size=64, shuffle=sampler is None, sampler=sampler)
    net = nn.Sequential(nn.Linear(FEATURES, args.hidden_units), nn.ReLU(), nn.Linear(args.hidden_units, args.hidden_units),
                        nn.ReLU(), nn.Linear(args.hidden_units, 1))
    model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    if rank == 0:
        mlflow.log_params({**vars(args), "world_size": world})
    best = float("inf")
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            rmse = float(torch.sqrt(nn.functional.mse_loss(net(x[split:]), y[split:])))
        if rank == 0:
            mlflow.log_metric("val_rmse", rmse, step=epoch)
            print(f"epoch {epoch + 1}/{args.epochs} val_rmse {rmse:.4f} (world {world})", flush=True)
            if rmse < best:  # keep the best model so far: an early-terminated trial still leaves one
                best = rmse
                save(net, Path(args.model_dir), x[split:split + 64], rmse)
    if world > 1:
        dist.destroy_process_group()


def save(net: nn.Module, out: Path, sample: torch.Tensor, rmse: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    batch = torch.export.Dim("batch", min=1, max=4096)
    torch.export.save(torch.export.export(net.eval(), (sample[:2],), dynamic_shapes=({0: batch},)), out / "model.pt2")
    np.save(out / "sample_inputs.npy", sample.numpy())
    (out / "signature.json").write_text(json.dumps({
        "format": "torch.export", "file": "model.pt2", "task": "regression", "target": "demand",
        "inputs": [{"name": "features", "dtype": "float32", "shape": [None, FEATURES]}], "val_rmse": rmse}))


if __name__ == "__main__":
    main()
