"""Fit a small text classifier that routes support tickets to a team: billing, delivery or technical.

A team's own script, sharing nothing with the other examples: its data made here from a seed (tickets written
from phrase lists, some mislabelled, as real tickets are), its tokenizer in ``vocab.py`` (which score.py imports
too), int64 token ids of any length into an embedding bag, ``val_f1`` (macro F1) maximized, logged once per epoch
with MLflow, and its model saved to the folder it is told (``--model-dir``): ``model.pt2`` (torch.export, with a
dynamic batch and a dynamic text length), ``signature.json`` and ``sample_inputs.npy`` (the parity gate's inputs,
int64 token ids: there are no safe random ones).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import mlflow
import numpy as np
import torch
import vocab
from torch import nn

CLASSES = ["billing", "delivery", "technical"]
TOPIC_WORDS = [
    ["invoice", "refund", "charged", "twice", "payment", "card", "bill", "price", "subscription", "receipt"],
    ["parcel", "delivery", "courier", "arrived", "late", "tracking", "shipped", "address", "package", "lost"],
    ["app", "crashes", "login", "password", "error", "update", "screen", "bug", "sync", "freezes"],
]
FILLER = ["hello", "my", "the", "is", "and", "please", "help", "since", "yesterday", "i", "still", "it", "not",
          "your", "order", "account", "thanks", "again", "why", "can", "you", "check", "this", "week"]


def make_tickets(rows: int, seed: int = 11, noise: float = 0.08) -> tuple[list[str], np.ndarray]:
    """Tickets of 3 to 20 words: filler, one to three words of their topic, sometimes one of another's."""
    rng = np.random.default_rng(seed)
    texts, labels = [], rng.integers(0, len(CLASSES), rows)
    for label in labels:
        words = list(rng.choice(FILLER, rng.integers(2, 16)))
        words += list(rng.choice(TOPIC_WORDS[label], rng.integers(1, 4)))
        if rng.random() < 0.4:
            words.append(rng.choice(TOPIC_WORDS[rng.integers(0, len(CLASSES))]))
        rng.shuffle(words)
        texts.append(" ".join(words))
    flipped = rng.random(rows) < noise
    labels[flipped] = rng.integers(0, len(CLASSES), int(flipped.sum()))
    return texts, labels


class TicketClassifier(nn.Module):
    """Mean of the words' embeddings (padding left out), then a linear layer: logits over CLASSES."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab.SIZE, dim, padding_idx=vocab.PAD)
        self.out = nn.Linear(dim, len(CLASSES))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != vocab.PAD).unsqueeze(-1).to(torch.float32)
        pooled = (self.embed(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.out(pooled)


def macro_f1(predicted: np.ndarray, truth: np.ndarray) -> float:
    scores = []
    for k in range(len(CLASSES)):
        tp = np.sum((predicted == k) & (truth == k))
        fp, fn = np.sum((predicted == k) & (truth != k)), np.sum((predicted != k) & (truth == k))
        scores.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=1200)
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--model-dir", required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    texts, labels = make_tickets(args.tickets)
    split = int(0.8 * len(texts))
    x_val, y_val = torch.from_numpy(vocab.batch(texts[split:])), labels[split:]
    net = TicketClassifier(args.embedding_dim)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    mlflow.log_params(vars(args))
    best, order = -1.0, np.arange(split)
    rng = np.random.default_rng(0)
    for epoch in range(args.epochs):
        net.train()
        rng.shuffle(order)
        for start in range(0, split, 32):  # each batch padded to its own longest ticket
            rows = order[start:start + 32]
            tokens = torch.from_numpy(vocab.batch([texts[i] for i in rows]))
            optimizer.zero_grad()
            nn.functional.cross_entropy(net(tokens), torch.from_numpy(labels[rows])).backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            f1 = macro_f1(net(x_val).argmax(1).numpy(), y_val)
        mlflow.log_metric("val_f1", f1, step=epoch)
        print(f"epoch {epoch + 1}/{args.epochs} val_f1 {f1:.4f}", flush=True)
        if f1 > best:  # keep the best model so far: an early-terminated trial still leaves one
            best = f1
            save(net, Path(args.model_dir), x_val[:64], f1)


def save(net: nn.Module, out: Path, sample: torch.Tensor, f1: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    dims = {0: torch.export.Dim("batch", min=1, max=4096), 1: torch.export.Dim("words", min=1, max=vocab.MAX_WORDS)}
    program = torch.export.export(net.eval(), (sample[:2],), dynamic_shapes=(dims,))
    torch.export.save(program, out / "model.pt2")
    np.save(out / "sample_inputs.npy", sample.numpy())  # int64 token ids, as the model takes them
    (out / "signature.json").write_text(json.dumps({
        "format": "torch.export", "file": "model.pt2", "task": "classification", "classes": CLASSES,
        "inputs": [{"name": "tokens", "dtype": "int64", "shape": [None, None]}],
        "outputs": [{"name": "logits", "dtype": "float32", "shape": [None, len(CLASSES)]}], "val_f1": f1}))


if __name__ == "__main__":
    main()
