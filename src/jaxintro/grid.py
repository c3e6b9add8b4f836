"""A run's members and a sweep's settings as plain numbers: who they are, how a setting is summed up, which is best.

A member is a seed (and, in a sweep, a learning rate and a weight decay); member k of `--seeds N` is
the run `--seed k`. A setting is one point of a sweep's grid with its seeds. These rules need no JAX:
`train`, `runs`, `evaluate` and the page all read a run's rows through them, so a run is described the
same everywhere. One model is the grid of one member.
"""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple, Sequence

import numpy as np

from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError
from jaxintro.i18n import _


class Member(NamedTuple):
    """One model of a run: its seed and its hyper-parameters."""

    seed: int
    lr: float
    weight_decay: float


def member_grid(config: TrainConfig) -> list[Member]:
    """Every member, setting by setting (learning rate, then weight decay), `config.seeds` seeds each."""
    lrs = config.lr_grid or (config.lr,)
    decays = config.weight_decay_grid or (config.weight_decay,)
    return [Member(config.seed + k, lr, wd) for lr in lrs for wd in decays for k in range(config.seeds)]


def kind_of(config: TrainConfig) -> Literal["single", "seeds", "sweep"]:
    """What a run is: "single" (one model), "seeds" (several seeds of one setting) or "sweep" (several settings)."""
    return "sweep" if config.sweep else "seeds" if config.members > 1 else "single"


def seeds_compared(config: TrainConfig) -> bool:
    """Whether each setting has several seeds: a spread and an ensemble to report (one seed's std measures nothing)."""
    return config.seeds > 1


def describe_members(config: TrainConfig) -> str:
    """`seed 0`, `seeds 0..7`, or a sweep's grid in words."""
    if config.seeds == 1:
        seeds = _("seed {seed}").format(seed=config.seed)
    else:
        seeds = _("seeds {first}..{last}").format(first=config.seed, last=config.seed + config.seeds - 1)
    if not config.sweep:
        return seeds
    lrs = ", ".join(f"{v:g}" for v in config.lr_grid or (config.lr,))
    if not config.weight_decay_grid:
        return _("lr {lrs}; {seeds} each").format(lrs=lrs, seeds=seeds)
    return _("lr {lrs} x weight decay {decays}; {seeds} each").format(
        lrs=lrs, decays=", ".join(f"{v:g}" for v in config.weight_decay_grid), seeds=seeds)


def mean_std(values: Sequence[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; 0 for one value) over the finite values (NaN if none)."""
    finite = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
    if finite.size == 0:
        return math.nan, math.nan
    return float(finite.mean()), float(finite.std(ddof=1)) if finite.size > 1 else 0.0


def spread_shown(values: Sequence[float | None]) -> bool:
    """Whether `values` have a spread to print: two finite values or more (one model's "± 0" measures nothing)."""
    return sum(v is not None and math.isfinite(v) for v in values) > 1


class Setting(NamedTuple):
    """One point of a sweep's grid, summarised over its seeds."""

    lr: float
    weight_decay: float
    accuracies: list[float]  # per seed; NaN for a member that diverged
    mean: float
    std: float

    @property
    def diverged(self) -> int:
        """How many of its members diverged."""
        return sum(not math.isfinite(a) for a in self.accuracies)


def summarize_settings(members: Sequence[Member], accuracies: Sequence[float | None]) -> list[Setting]:
    """Group the members' accuracies (test or held-out; None or NaN: diverged) by (learning rate, weight decay), in grid
    order."""
    groups: dict[tuple[float, float], list[float]] = {}
    for member, acc in zip(members, accuracies):
        groups.setdefault((member.lr, member.weight_decay), []).append(math.nan if acc is None else float(acc))
    return [Setting(lr, wd, accs, *mean_std(accs)) for (lr, wd), accs in groups.items()]


def best_setting(settings: Sequence[Setting]) -> Setting:
    """The setting with the highest mean accuracy (the one `settings` were summarised by) among those none of whose
    seeds diverged (a mean over the survivors of a setting that diverged would reward it); only when every setting
    lost a seed, the highest mean over survivors. Ties go to the setting listed first (the grid's order: --lr, then
    --weight-decay)."""
    return max(settings, key=lambda s: (s.diverged == 0, s.mean if math.isfinite(s.mean) else -math.inf))


def judged_by(members: dict[str, Any]) -> str:
    """The accuracy a run chooses with, among a row's per-member numbers: the held-out training images' (a run
    trained with `--validation N`), else the test set's (runs before it, and `train` as the lesson runs it)."""
    return "val_accuracy" if "val_accuracy" in members else "test_accuracy"


def settings_of(config: TrainConfig, row: dict[str, Any], accuracy: str | None = None) -> list[Setting]:
    """A sweep's settings, each summarised over its seeds, from a `metrics.jsonl` row: by the accuracy the run
    chooses with (`judged_by`), or by `accuracy` ("test_accuracy": what a chosen setting reports)."""
    return summarize_settings(member_grid(config), member_values(row, accuracy or judged_by(row["members"])))


def member_values(row: dict[str, Any], name: str) -> list[float | None]:
    """A `metrics.jsonl` row's `name` (test_accuracy, train_accuracy, loss, ...) per member: one model's row is a row
    of one member; None for each where the epoch did not score it (the test set of a run with held-out images, before
    the epoch it ends at)."""
    if "members" not in row:
        return [row.get(name)]
    return row["members"].get(name) or [None] * len(row["members"]["loss"])


def chosen_setting(config: TrainConfig, row: dict[str, Any]) -> Setting:
    """The best setting as the run chooses it (`judged_by`), summarised by its seeds' test accuracies (NaN in an epoch
    that did not score the test set)."""
    best = best_setting(settings_of(config, row))
    return next(s for s in settings_of(config, row, "test_accuracy") if (s.lr, s.weight_decay) == (best.lr,
                                                                                                  best.weight_decay))


def diverged_in(row: dict[str, Any]) -> list[int]:
    """The members a row reports as diverged: their loss, which every epoch has, is null in `metrics.jsonl` and NaN in
    a row still in memory; none for a single run's row."""
    losses = row.get("members", {}).get("loss", [])
    return [k for k, loss in enumerate(losses) if loss is None or not math.isfinite(loss)]


def headline_accuracy(config: TrainConfig, row: dict[str, Any]) -> float | None:
    """A run's one test accuracy, from a `metrics.jsonl` row, as `train`, `runs` and the page show it.

    One model: its accuracy. Several seeds: their mean (diverged members left out). A sweep: the mean
    of its best setting's seeds, the setting it is used through.
    """
    if not config.sweep or "members" not in row:
        return row.get("test_accuracy")
    best = chosen_setting(config, row)
    return best.mean if math.isfinite(best.mean) else None


def setting_name(config: TrainConfig, setting: Setting) -> str:
    """`lr=0.001` (and `,wd=0.0001` when the optimizer decays weights): how `--setting` names it."""
    name = f"lr={setting.lr:g}"
    return name + f",wd={setting.weight_decay:g}" if config.decays_weights else name


def parse_setting(text: str) -> tuple[float, float | None]:
    """`--setting lr=3e-4` or `lr=3e-4,wd=1e-4`: the learning rate and (None: any) the weight decay."""
    values: dict[str, float] = {}
    for part in text.split(","):
        name, _equals, value = part.strip().partition("=")
        try:
            if name not in ("lr", "wd") or name in values:
                raise ValueError(name)
            values[name] = float(value)
        except ValueError:
            raise ConfigError(_("--setting must read lr=VALUE or lr=VALUE,wd=VALUE (e.g. lr=3e-4); got {text}")
                              .format(text=repr(text))) from None
    if "lr" not in values:
        raise ConfigError(_("--setting names no learning rate; e.g. --setting lr=3e-4"))
    return values["lr"], values.get("wd")


def refuse_setting_of_no_sweep(config: TrainConfig, setting: str | None) -> None:
    """`--setting` chooses one setting of a sweep: given for any other run, it is an error that says so."""
    if setting is not None and not config.sweep:
        raise ConfigError(_("--setting chooses one setting of a sweep; this run is not a sweep: drop --setting"))


def find_setting(config: TrainConfig, settings: Sequence[Setting], text: str) -> Setting:
    """The setting `--setting text` names, or an error listing the sweep's settings."""
    lr, wd = parse_setting(text)
    matches = [s for s in settings if math.isclose(s.lr, lr, rel_tol=1e-6)
               and (wd is None or math.isclose(s.weight_decay, wd, rel_tol=1e-6, abs_tol=1e-12))]
    if len(matches) > 1:  # a learning rate the sweep tried with several weight decays: which one
        names = ", ".join(setting_name(config, s) for s in matches)
        raise ConfigError(_("--setting {setting} names {count} settings of this sweep ({names}): add the weight decay, "
                            "e.g. --setting {first}").format(setting=text, count=len(matches), names=names,
                                                             first=setting_name(config, matches[0])))
    if not matches:
        grid = ", ".join(setting_name(config, s) for s in settings)
        raise ConfigError(_("--setting {setting} is not one of this sweep's settings: {grid}").format(
            setting=text, grid=grid))
    return matches[0]


class Choice(NamedTuple):
    """Which members a run is used through: their indices, and the sweep's setting they share (or None)."""

    used: list[int]
    setting: Setting | None
    diverged: list[int]  # every member that diverged
    left_out: int  # how many of them belong with `used` (in a sweep, to its setting), yet cannot be used


def choose_members(config: TrainConfig, accuracies: Sequence[float | None], diverged: Sequence[int],
                   setting: str | None = None) -> Choice:
    """The members a run predicts with: every member that trained, or in a sweep one setting's (default the best).

    Averaging models trained with different hyper-parameters is no ensemble anyone wants: a sweep picks
    a setting, and its seeds are averaged. A diverged member is never used.
    """
    members = member_grid(config)
    refuse_setting_of_no_sweep(config, setting)
    chosen = None
    if config.sweep:
        settings = summarize_settings(members, accuracies)
        chosen = best_setting(settings) if setting is None else find_setting(config, settings, setting)

    def in_chosen(k: int) -> bool:
        return chosen is None or (members[k].lr, members[k].weight_decay) == (chosen.lr, chosen.weight_decay)

    used = [k for k in range(len(members)) if k not in diverged and in_chosen(k)]
    if not used and chosen is not None:
        raise ConfigError(_("every model of the setting {setting} diverged, so there is nothing to predict with; "
                            "choose another with --setting").format(setting=setting_name(config, chosen)))
    if not used:
        raise ConfigError(_("every member of this run diverged, so there is nothing to predict with; retrain it "
                            "with a lower --lr"))
    return Choice(used, chosen, list(diverged), sum(in_chosen(k) for k in diverged))
