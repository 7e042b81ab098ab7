"""Train an image classifier on an ImageFolder dataset: the Azure ML PyTorch tutorial's script, made to run here.

The contract this script keeps (and any script you bring must keep):

- arguments in: ``--num-epochs --learning-rate --momentum --data-dir --output-dir`` (plus optional ``--seed``);
- metrics out: ``mlflow.log_metric``, finding its run through MLflow's environment variables; the primary
  metric ``best_val_acc`` is logged exactly once per epoch, so one early-termination interval is one epoch;
- model out: ``<output-dir>/model/`` holds ``model.pt2`` (a ``torch.export`` program that loads without this
  code) and ``signature.json`` (input shape and dtype, class labels, preprocessing).

Runs as one process, or under torchrun/Azure ML's PyTorch distribution (DDP: DistributedSampler, rank 0
logs and saves). CUDA when present, else CPU. SIGTERM (early termination, cancel) stops between batches and
saves the best model so far.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import mlflow
import numpy as np
import torch
import torch.distributed as dist
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
MEAN, STD = 0.5, 0.5


class StopFlag:
    """Set by SIGTERM; checked between batches, so no library code is interrupted halfway (and under DDP the
    ranks agree to stop at the same batch, or the next collective would hang)."""

    def __init__(self) -> None:
        self.set = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, *_: object) -> None:
        self.set = True

    def agreed(self, world: int, device: torch.device) -> bool:
        if world == 1:
            return self.set
        flag = torch.tensor([1.0 if self.set else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="ImageFolder root with train/ and val/")
    parser.add_argument("--num-epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--output-dir", default="outputs")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def load_split(folder: Path, classes: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor, list[str], list[int]]:
    """Load every image of ``folder/<class>/`` as grayscale, scaled to [0, 1]; return x, y, classes, HxW."""
    classes = classes or sorted(p.name for p in folder.iterdir() if p.is_dir())
    images, labels = [], []
    for label, name in enumerate(classes):
        for path in sorted((folder / name).iterdir()):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                images.append(np.asarray(Image.open(path).convert("L"), dtype=np.float32) / 255.0)
                labels.append(label)
    x = torch.from_numpy(np.stack(images))[:, None]
    return (x - MEAN) / STD, torch.tensor(labels), classes, list(x.shape[2:])


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int, size: list[int]) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.classifier = nn.Linear(32 * 2 * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(x.to(device))
        loss = nn.functional.cross_entropy(logits, y.to(device)).item()
        acc = (logits.argmax(1).cpu() == y).float().mean().item()
    return acc, loss


def save_model(model: nn.Module, out: Path, classes: list[str], size: list[int], meta: dict) -> None:
    """Save a torch.export program with a dynamic batch axis, and its signature."""
    out.mkdir(parents=True, exist_ok=True)
    model = model.cpu().eval()
    example = torch.zeros(2, 1, *size)
    batch = torch.export.Dim("batch", min=1, max=4096)
    program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    _replace_whole(out / "model.pt2", lambda tmp: torch.export.save(program, tmp))
    signature = {
        "format": "torch.export", "file": "model.pt2",
        "inputs": [{"name": "input", "shape": [None, 1, *size], "dtype": "float32"}],
        "outputs": [{"name": "logits", "shape": [None, len(classes)], "dtype": "float32"}],
        "classes": classes,
        "preprocessing": {"color": "L", "size": size, "scale": 1 / 255, "mean": MEAN, "std": STD},
        **meta,
    }
    _replace_whole(out / "signature.json", lambda tmp: tmp.write_text(json.dumps(signature, indent=1)))


def _replace_whole(path: Path, write) -> None:
    """Write ``path`` through a temporary file renamed over it: a failed save (a full disk) leaves the model
    saved before it whole, never a truncated file, and no temporary file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(args.seed)
    stop = StopFlag()

    data = Path(args.data_dir)
    x_train, y_train, classes, size = load_split(data / "train")
    x_val, y_val, _, _ = load_split(data / "val", classes)
    train_set = TensorDataset(x_train, y_train)
    sampler = DistributedSampler(train_set, seed=args.seed) if world > 1 else None
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler)

    net = SmallCNN(len(classes), size).to(device)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[local_rank] if cuda else None) if world > 1 else net
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=args.momentum)
    # Cosine decay over the run: the tutorial's StepLR(7, 0.1) was written for fine-tuning a pretrained ResNet
    # and all but froze learning from scratch after epoch 14 (best 85% on digits; this reaches 98%).
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, args.num_epochs))
    leader = rank == 0
    if leader:
        mlflow.log_params({"learning_rate": args.learning_rate, "momentum": args.momentum, "num_epochs": args.num_epochs,
                           "world_size": world, "device": device.type})
        interval = os.environ.get("MLRUNWAY_DATA_INTERVAL_START"), os.environ.get("MLRUNWAY_DATA_INTERVAL_END")
        if interval[0]:  # the Airflow run's data interval: this script logs it; yours may pick its data with it
            mlflow.log_params({"data_interval_start": interval[0], "data_interval_end": interval[1]})
            print(f"data interval {interval[0]} .. {interval[1]}", flush=True)

    best_acc, best_state, started = -1.0, None, time.perf_counter()
    try:
        for epoch in range(args.num_epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            model.train()
            total, seen, stopping = 0.0, 0, False
            for xb, yb in loader:
                if stop.agreed(world, device):
                    stopping = True
                    break
                xb, yb = xb.to(device), yb.to(device)
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(xb), yb)
                loss.backward()
                optimizer.step()
                total, seen = total + loss.item() * len(yb), seen + len(yb)
            if stopping:
                print(f"SIGTERM: stopping in epoch {epoch + 1}; saving the best model so far "
                      f"(best_val_acc {best_acc:.4f})", flush=True)
                break
            scheduler.step()
            val_acc, val_loss = evaluate(net, x_val, y_val, device)
            if val_acc > best_acc:
                best_acc, best_state = val_acc, {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
            if leader:
                mlflow.log_metrics({"train_loss": total / seen, "val_loss": val_loss, "val_acc": val_acc}, step=epoch)
                mlflow.log_metric("best_val_acc", best_acc, step=epoch)
                print(f"epoch {epoch + 1}/{args.num_epochs} train_loss {total / seen:.4f} val_acc {val_acc:.4f} "
                      f"best_val_acc {best_acc:.4f}", flush=True)
    finally:
        if leader and best_state is not None:
            net.load_state_dict(best_state)
            meta = {"best_val_acc": best_acc, "train_seconds": round(time.perf_counter() - started, 3)}
            save_model(net, Path(args.output_dir) / "model", classes, size, meta)
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
