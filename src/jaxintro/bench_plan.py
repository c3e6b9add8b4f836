"""What every `bench` row shares: the plan (data, initial weights, batch order), a row's result, timed windows."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from jaxintro.config import LESSON_SIZES
from jaxintro.models.mlp import init_params
from jaxintro.parallel import host_device

SIZES = LESSON_SIZES  # the rows train the lesson's MLP, whatever --hidden a run used


@dataclasses.dataclass
class RowResult:
    """One benchmark row."""

    name: str
    compile_seconds: float = float("nan")
    ms_per_step: float = float("nan")
    samples_per_second: float = float("nan")
    fraction_of_peak: float = float("nan")
    peak_rss_mb: float = float("nan")
    losses: list[float] = dataclasses.field(default_factory=list)  # the first steps' losses
    models: int = 1  # models trained at once: samples/s and the fraction of peak count all of them
    devices: int = 1  # devices the row's program ran on
    skipped: str | None = None  # why the row could not run here (e.g. PyTorch not installed)
    error: str | None = None  # the row ran and crashed: a failure, reported as one


@dataclasses.dataclass
class Plan:
    """What every row shares: data, initial parameters, batch order and how long to measure."""

    x: np.ndarray  # (N, 784) uint8
    y: np.ndarray  # (N,) int32
    params: dict[str, np.ndarray]  # "layerK.w" (in, out), "layerK.b"
    perm: np.ndarray  # (steps, batch) indices of one epoch, from the seed's key
    seed: int
    repeats: int
    nojit_steps: int

    def save(self, path: Path, **extra: np.ndarray) -> None:
        np.savez(path, x=self.x, y=self.y, perm=self.perm, **extra, meta=np.array(json.dumps(
            {"seed": self.seed, "repeats": self.repeats, "nojit_steps": self.nojit_steps})),
            **{f"param:{k}": v for k, v in self.params.items()})

    @classmethod
    def load(cls, path: Path) -> "Plan":
        z = np.load(path)
        meta = json.loads(str(z["meta"]))
        params = {k.removeprefix("param:"): z[k] for k in z.files if k.startswith("param:")}
        return cls(z["x"], z["y"], params, z["perm"], **meta)

    @property
    def batch(self) -> int:
        return int(self.perm.shape[1])


def make_plan(x: np.ndarray, y: np.ndarray, *, batch: int = 128, seed: int = 0, repeats: int = 3,
              nojit_steps: int = 100) -> Plan:
    """The shared plan: the lesson's init from `seed` and the first epoch's permutation."""
    import jax

    from jaxintro.lesson import plan_epoch

    with jax.default_device(host_device()):  # where `Trainer.init_state` draws the weights: the same bits
        init_key, key = jax.random.split(jax.random.key(seed))
        params = init_params(init_key, (x.shape[1], *SIZES[1:]))
        _next_key, perm, _dropout_key = plan_epoch(key, len(x), batch)
    flat = {f"{name}.{leaf}": np.asarray(v) for name, layer in params.items() for leaf, v in layer.items()}
    return Plan(x, y, flat, np.asarray(perm), seed, repeats, nojit_steps)


def plan_layers(plan: Plan) -> list[tuple[np.ndarray, np.ndarray]]:
    """The plan's initial (w (in, out), b) per layer, in layer order ("layer10" after "layer2")."""
    names = sorted({k.split(".")[0] for k in plan.params}, key=lambda n: int(n.removeprefix("layer")))
    return [(plan.params[f"{name}.w"], plan.params[f"{name}.b"]) for name in names]



def timed_windows(run_window: Callable[[], Any], repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `run_window`."""
    times = []
    for _repeat in range(repeats):
        start = time.perf_counter()
        run_window()
        times.append(time.perf_counter() - start)
    return times
