"""The one config: a frozen dataclass whose fields map 1:1 to `jaxintro train` flags."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxintro.errors import ConfigError
from jaxintro.i18n import _

DATASETS = ("auto", "mnist", "fashion-mnist", "digits")
# What each choice can do, asked everywhere through `TrainConfig` (a new optimizer or style is a row here):
# the options each model style takes besides its sizes (`models.model_for` passes exactly these to the
# style's `build`; another style refuses them), and which optimizers decay the weights (the others have
# no weight decay: their tables show none, and a sweep cannot compare several).
MODEL_OPTIONS: dict[str, tuple[str, ...]] = {"jax": ("dropout",), "linen": ("dropout",), "nnx": ("dropout",),
                                             "equinox": ("dropout",)}
DECAYS_WEIGHTS = {"adam": False, "adamw": True, "sgd": False}
MODELS = tuple(MODEL_OPTIONS)
OPTIMIZERS = tuple(DECAYS_WEIGHTS)
# The optimizers that use `--weight-decay`, as help strings and errors name them ("adamw"; several as "adamw|lion",
# which reads the same in every language).
DECAYING_OPTIMIZERS = "|".join(name for name, decays in DECAYS_WEIGHTS.items() if decays)
SCHEDULES = ("constant", "warmup-cosine")
# `sweep`'s held-out images by default, to choose its setting with (the test set chooses nothing): the last twelfth of
# the training set, 5,000 of MNIST's 60,000.
VALIDATION_SHARE = 12
LOOPS = ("scan", "python")
PARALLEL = ("shard_map", "sharding")
# `jax.default_matmul_precision` for float32 products: a TPU's default is one bfloat16 pass, a CPU's full float32.
MATMUL_PRECISIONS = ("default", "high", "highest")
MAX_HIDDEN_LAYERS = 64  # far deeper than a plain MLP trains; a checkpoint's config may declare no more arrays
# The lesson's MLP: MNIST's 28x28 pixels, two hidden layers of 256 and 128, ten digits. Written here only.
LESSON_SIZES = (784, 256, 128, 10)
# Images per evaluation chunk: bounds the memory of a forward pass over a whole set.
EVAL_CHUNK = 2000
# Members vmapped together on a CPU device. One: each device runs its members in turn (a plain lax.map),
# each the exact program of its single run, so member k is `--seed k` bit for bit. The CPU step is
# compute-bound, so vmapping members gains nothing measurable there (docs/performance.md compares groups);
# what does gain is running members side by side on the cores (`members.member_devices`). An
# accelerator, which one small model leaves idle, vmaps them all.
CPU_MEMBER_GROUP = 1
# `train --save-every`: at most one checkpoint this often while training (the last epoch and a stop are always saved).
# Orbax writes a save in a thread that competes with training (on a TPU it slowed the next epochs 2-3x).
SAVE_EVERY_SECONDS = 30.0
# `jaxintro profile --steps`: a trace of every op of every step, bounded (as `sweep --seeds` is) before anything starts.
PROFILE_MAX_STEPS = 1000
# The rows of `jaxintro bench`, in the order it runs them (named here so `--help` needs no JAX).
BENCH_ROWS = ("nojit", "jit-step", "scan-epoch", "vmap-seeds-8", "spread-seeds-8", "matmul-only", "torch-eager",
              "torch-compile")


def held_out_count(train_images: int, asked: int | None) -> int:
    """How many of `train_images` are held out: as asked, or (None: the default) the last 1/VALIDATION_SHARE."""
    return train_images // VALIDATION_SHARE if asked is None else asked


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run; saved as `config.json` in every run folder."""

    dataset: str = "auto"
    data_dir: str | None = None
    model: str = "jax"
    hidden: tuple[int, ...] = LESSON_SIZES[1:-1]
    dropout: float = 0.0
    epochs: int = 10
    batch_size: int = 128
    optimizer: str = "adam"
    lr: float = 1e-3
    weight_decay: float = 1e-4
    schedule: str = "constant"
    warmup_steps: int = 0
    clip_norm: float | None = None
    # Every step's global gradient norm, before any clipping, kept: each epoch's largest is `max_grad_norm` in
    # metrics.jsonl. Off by default: one more pass over the gradients a step, which a clipping chain makes anyway.
    record_grad_norm: bool = False
    seed: int = 0
    seeds: int = 1  # members trained together in one program: seeds seed .. seed+seeds-1 (per setting, in a sweep)
    lr_grid: tuple[float, ...] = ()  # `jaxintro sweep`: learning rates compared (empty: just `lr`)
    weight_decay_grid: tuple[float, ...] = ()  # `jaxintro sweep`: weight decays compared (empty: `weight_decay`)
    member_group: int = 0  # members one `vmap` trains at a time (0: all on an accelerator, CPU_MEMBER_GROUP on a CPU)
    loop: str = "scan"
    devices: int = 1  # data-parallel devices; with several members, the devices they spread over (1: chosen)
    parallel: str = "shard_map"
    matmul_precision: str = "default"  # float32 matmuls: the backend's default, or JAX's "high" / "highest"
    # The last training images held out to choose with (0: train on all of them, as the lesson); None, `sweep`'s
    # default: the last 1/VALIDATION_SHARE of them, counted once the data is loaded (`validation_images`).
    validation: int | None = 0

    def __post_init__(self) -> None:
        # Checked on construction, so no copy (`dataclasses.replace`, `from_json`) escapes the rules.
        self.validate()

    def validate(self) -> "TrainConfig":
        """Raise ConfigError naming the first bad field and its allowed values; return self."""
        _choice("dataset", self.dataset, DATASETS)
        _choice("model", self.model, MODELS)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("schedule", self.schedule, SCHEDULES)
        _choice("loop", self.loop, LOOPS)
        _choice("parallel", self.parallel, PARALLEL)
        _choice("matmul-precision", self.matmul_precision, MATMUL_PRECISIONS)
        _int_range("epochs", self.epochs, 1, 100_000)
        _int_range("batch-size", self.batch_size, 1, 1 << 20)
        _int_range("warmup-steps", self.warmup_steps, 0, 1 << 40)
        _int_range("seed", self.seed, 0, 2**32 - 1)
        _int_range("seeds", self.seeds, 1, 100_000)
        _int_range("member-group", self.member_group, 0, 100_000)
        if self.seed + self.seeds - 1 > 2**32 - 1:
            raise ConfigError(_("--seed {seed} --seeds {seeds} goes past the largest seed, {largest}").format(
                seed=self.seed, seeds=self.seeds, largest=2**32 - 1))
        for value in self.lr_grid:
            _float_range("lr", value, 0.0, 1e12, low_open=True)
        for value in self.weight_decay_grid:
            _float_range("weight-decay", value, 0.0, 1e6)
        if len(self.weight_decay_grid) > 1 and not self.decays_weights:
            raise ConfigError(_("--weight-decay only acts with --optimizer {decaying}, not {optimizer}; "
                                "add --optimizer {decaying} or compare a single weight decay").format(
                decaying=DECAYING_OPTIMIZERS, optimizer=self.optimizer))
        _int_range("devices", self.devices, 1, 4096)
        if self.validation is not None:
            _int_range("validation", self.validation, 0, 10_000_000)
        if not isinstance(self.data_dir, (str, type(None))):  # a saved config is input: a path is text
            raise ConfigError(_("--data-dir must be a folder's path; got {value}").format(value=repr(self.data_dir)[:80]))
        if not self.hidden:
            raise ConfigError(_("--hidden needs at least one width, e.g. --hidden 256,128"))
        if len(self.hidden) > MAX_HIDDEN_LAYERS:  # a saved config is input too: its layer count bounds the arrays read
            raise ConfigError(_("--hidden takes at most {most} layers; got {count}").format(
                most=MAX_HIDDEN_LAYERS, count=len(self.hidden)))
        for width in self.hidden:
            _int_range("hidden", width, 1, 1 << 16)
        _float_range("lr", self.lr, 0.0, 1e12, low_open=True)
        _float_range("weight-decay", self.weight_decay, 0.0, 1e6)
        _float_range("dropout", self.dropout, 0.0, 1.0, high_open=True)
        if self.clip_norm is not None:
            _float_range("clip-norm", self.clip_norm, 0.0, 1e12, low_open=True)
        if not isinstance(self.record_grad_norm, bool):  # a saved config is input: "false" would read as true
            raise ConfigError(_("--record-grad-norm must be true or false (a JSON boolean); got {value}").format(
                value=repr(self.record_grad_norm)[:80]))
        for name in {option for options in MODEL_OPTIONS.values() for option in options} - set(self.model_options):
            if getattr(self, name) != getattr(TrainConfig, name):
                raise ConfigError(_("--{option} is not an option of --model {model}; drop it, or use a model that "
                                    "takes it").format(option=name.replace("_", "-"), model=self.model))
        self._check_members()
        if self.loop == "python" and self.devices > 1:
            raise ConfigError(_("--devices > 1 needs --loop scan (the data-parallel step is compiled per epoch)"))
        return self

    def _check_members(self) -> None:
        """The rules about how many models train: one model's devices split its batch, several members' the members."""
        if self.sweep and self.members < 2:
            # One setting and one seed is a plain run: `train` says so better than a table of one row.
            raise ConfigError(_("a sweep compares several models: give two values or more (--lr 1e-3,3e-3) or "
                                "--seeds 2; for one model use `jaxintro train`"))
        if self.members == 1:
            check_batch_split(self.batch_size, self.devices)
            return
        check_member_split(self.members, self.devices)
        if self.parallel != PARALLEL[0]:
            raise ConfigError(_("--parallel {parallel} splits one model's batch over devices; several members "
                                "(--seeds > 1, or a sweep) are spread over them whole: drop --parallel").format(
                parallel=self.parallel))
        if self.loop != "scan":
            raise ConfigError(_("several members (--seeds > 1, or a sweep) need --loop scan: they are one compiled "
                                "program per epoch"))

    @property
    def use_dropout(self) -> bool:
        """Whether training steps draw dropout masks (and so need a dropout key)."""
        return self.dropout > 0.0

    @property
    def decays_weights(self) -> bool:
        """Whether the optimizer decays the weights (only then does a weight decay mean anything)."""
        return DECAYS_WEIGHTS[self.optimizer]

    @property
    def model_options(self) -> dict[str, Any]:
        """The options of this run's model style, by name, as its `build` takes them."""
        return {name: getattr(self, name) for name in MODEL_OPTIONS[self.model]}

    def validation_images(self, train_images: int) -> int:
        """How many of `train_images` this run holds out (`held_out_count`)."""
        return held_out_count(train_images, self.validation)

    @property
    def sweep(self) -> bool:
        """Whether members differ in hyper-parameters (then the optimizer takes them as inputs)."""
        return bool(self.lr_grid or self.weight_decay_grid)

    @property
    def members(self) -> int:
        """How many models this run trains together."""
        return max(len(self.lr_grid), 1) * max(len(self.weight_decay_grid), 1) * self.seeds

    def to_json(self) -> dict[str, Any]:
        """The config as plain JSON values."""
        return {**dataclasses.asdict(self), "hidden": list(self.hidden), "lr_grid": list(self.lr_grid),
                "weight_decay_grid": list(self.weight_decay_grid)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TrainConfig":
        """Rebuild a config saved by `to_json`; unknown keys are an error that names them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(obj) - names)
        if unknown:
            raise ConfigError(_(
                "config has unknown fields {fields}: it was written by another jaxintro version; "
                "retrain with this version"
            ).format(fields=unknown))
        obj = dict(obj)
        # Written before the switch existed, when every step kept the norm: a resumed old run goes on keeping it.
        obj.setdefault("record_grad_norm", True)
        for name in ("hidden", "lr_grid", "weight_decay_grid"):
            if name in obj:
                obj[name] = tuple(obj[name])
        return cls(**obj)


def config_from_flags(flags: object) -> TrainConfig:
    """The validated config from parsed command-line flags, one attribute per field (`--epochs` may be None)."""
    values = {f.name: getattr(flags, f.name) for f in dataclasses.fields(TrainConfig) if hasattr(flags, f.name)}
    if values.get("epochs") is None:
        values["epochs"] = TrainConfig().epochs
    if "hidden" in values:
        hidden = values["hidden"]
        values["hidden"] = parse_hidden(hidden) if isinstance(hidden, str) else tuple(hidden)
    for name, flag in (("lr_grid", "lr"), ("weight_decay_grid", "weight-decay")):
        if isinstance(values.get(name), str):
            values[name] = parse_grid(values[name], flag)
        elif values.get(name) is None:
            values.pop(name, None)
    return TrainConfig(**values).validate()


def parse_grid(text: str, flag: str) -> tuple[float, ...]:
    """Parse a sweep's `--lr 1e-4,3e-4,1e-3`: numbers, at least one, no value twice."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise ConfigError(_("--{flag} needs at least one value, e.g. --{flag} 1e-4,3e-4,1e-3").format(flag=flag))
    try:
        values = tuple(float(part) for part in parts)
    except ValueError:
        bad = next(part for part in parts if not _is_number(part))
        raise ConfigError(_("--{flag} must be comma-separated numbers like 1e-4,3e-4,1e-3; {value} is not one").format(
            flag=flag, value=repr(bad))) from None
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ConfigError(_("--{flag} lists {values} twice; give each value once").format(
            flag=flag, values=", ".join(f"{v:g}" for v in repeated)))
    return values


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_member_split(count: int, devices: int) -> None:
    """Members spread over devices in equal shares: each device runs the same program on its own."""
    if count % devices:
        raise ConfigError(_("{members} members do not split evenly over --devices {devices}; give a number of "
                            "devices that divides {members}, or drop --devices").format(members=count,
                                                                                        devices=devices))


def check_batch_split(batch_size: int, devices: int) -> None:
    """The global batch must split evenly over the devices (checked from flags, and again on the real mesh)."""
    if batch_size % devices:
        raise ConfigError(_("--batch-size {batch_size} does not split over {devices} devices; "
                            "use a multiple of {devices}").format(batch_size=batch_size, devices=devices))


def parse_hidden(text: str) -> tuple[int, ...]:
    """Parse `--hidden 512,256,128` into a tuple of widths."""
    try:
        widths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(_("--hidden must be comma-separated integers like 256,128, got {value}").format(
            value=repr(text))) from None
    if not widths:
        raise ConfigError(_("--hidden needs at least one width, e.g. --hidden 256,128"))
    return widths


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(_("--{name} must be one of {choices}; got {value}").format(
            name=name, choices=", ".join(allowed), value=repr(value)))


def _int_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(_("--{name} must be an integer from {low} to {high}; got {value}").format(
            name=name, low=low, high=high, value=repr(value)))


def _float_range(
    name: str, value: float, low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> None:
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ConfigError(_("--{name} must be a finite number in {interval}; got {value}").format(
            name=name, interval=f"{lo}{low:g}, {high:g}{hi}", value=repr(value)))
