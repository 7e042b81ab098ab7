"""A team's store model, as Hugging Face-style models are written: ``forward(input_ids=, attention_mask=,
numeric=)`` with a bool mask, answering a dict ``{"logits": ..., "weekly_sales": ...}``; exported with keyword
inputs. Its data is made here from a seed: a store's product words (ids, of any length) and three numbers decide
its demand class (low, mid, high) and its weekly sales. Logs ``val_acc`` once per epoch; saves ``model.pt2``,
``signature.json`` (the outputs named) and ``sample_inputs.npz`` to ``--model-dir``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlflow
import numpy as np
import torch
from torch import nn

CLASSES = ["low", "mid", "high"]
VOCAB, MAX_WORDS = 40, 12


def make_rows(rows: int, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, MAX_WORDS + 1, rows)
    ids = np.zeros((rows, MAX_WORDS), np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(1, VOCAB, n)
    numeric = rng.standard_normal((rows, 3)).astype(np.float32)
    score = (ids % 3 == 0).sum(1) / lengths + numeric[:, 0] * 0.3
    label = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    sales = (100 + 40 * score + 5 * numeric[:, 1]).astype(np.float32)
    return {"input_ids": ids, "attention_mask": ids != 0, "numeric": numeric, "label": label, "sales": sales}


class StoreModel(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed, self.mix = nn.Embedding(VOCAB, width), nn.Linear(width + 3, width)
        self.classify, self.regress = nn.Linear(width, len(CLASSES)), nn.Linear(width, 1)

    def forward(self, input_ids, attention_mask, numeric):
        keep = attention_mask.unsqueeze(-1).to(torch.float32)
        pooled = (self.embed(input_ids) * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        hidden = torch.relu(self.mix(torch.cat([pooled, numeric], 1)))
        return {"logits": self.classify(hidden), "weekly_sales": self.regress(hidden) * 40 + 100}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--model-dir", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = {k: torch.from_numpy(v) for k, v in make_rows(800).items()}
    train = {k: v[:640] for k, v in data.items()}
    val = {k: v[640:] for k, v in data.items()}
    net, best = StoreModel(args.width), -1.0
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    mlflow.log_params(vars(args))
    for epoch in range(args.epochs):
        net.train()
        for start in range(0, 640, 32):
            batch = {k: v[start:start + 32] for k, v in train.items()}
            out = net(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], numeric=batch["numeric"])
            loss = nn.functional.cross_entropy(out["logits"], batch["label"]) + \
                nn.functional.mse_loss(out["weekly_sales"][:, 0], batch["sales"]) / 1000
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            out = net(input_ids=val["input_ids"], attention_mask=val["attention_mask"], numeric=val["numeric"])
        acc = float((out["logits"].argmax(1) == val["label"]).float().mean())
        mlflow.log_metric("val_acc", acc, step=epoch)
        print(f"epoch {epoch + 1}/{args.epochs} val_acc {acc:.4f}", flush=True)
        if acc > best:
            best = acc
            save(net, Path(args.model_dir), {k: val[k][:48] for k in ("input_ids", "attention_mask", "numeric")})


def save(net: nn.Module, out: Path, sample: dict[str, torch.Tensor]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    batch, words = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("words", min=1, max=64)
    program = torch.export.export(net.eval(), (), kwargs={k: v[:2] for k, v in sample.items()}, dynamic_shapes={
        "input_ids": {0: batch, 1: words}, "attention_mask": {0: batch, 1: words}, "numeric": {0: batch}})
    torch.export.save(program, out / "model.pt2")
    np.savez(out / "sample_inputs.npz", **{k: v.numpy() for k, v in sample.items()})
    (out / "signature.json").write_text(json.dumps({
        "format": "torch.export", "file": "model.pt2", "classes": CLASSES, "classifier_output": "logits",
        "inputs": [{"name": "numeric", "dtype": "float32", "shape": [None, 3]},  # keywords: in any order
                   {"name": "input_ids", "dtype": "int64", "shape": [None, None]},
                   {"name": "attention_mask", "dtype": "bool", "shape": [None, None]}],
        "outputs": ["logits", "weekly_sales"]}))


if __name__ == "__main__":
    main()
