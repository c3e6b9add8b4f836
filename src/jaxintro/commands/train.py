"""`jaxintro train`: resolve the run (new, resumed, or one process of many), train it, report.

The order matters: every flag and the run folder are checked before JAX starts or data loads, so a
mistake costs a second, not a compile; JAX learns the device count before anything imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from jaxintro import report, runs
from jaxintro.claims import claim_run_dir, discard_run_dir
from jaxintro.config import TrainConfig, config_from_flags
from jaxintro.data import DatasetInfo, load_dataset
from jaxintro.errors import ConfigError, JaxintroError, TrainingDivergedError
from jaxintro.faults import WriteFault, run_write, watch
from jaxintro.grid import diverged_in
from jaxintro.i18n import _, ngettext
from jaxintro.jsonio import json_safe, json_text
from jaxintro.memory import held_copy_fits
from jaxintro.runs import CONFIG_FILE, RESOLVED_DATASET, committed_epochs, read_json
from jaxintro.signals import GracefulStop


@dataclasses.dataclass(frozen=True)
class Cluster:
    """This process's place in a multi-process run (one process: coordinator None)."""

    coordinator: str | None = None
    num_processes: int = 1
    process_id: int = 0


def resolve_cluster(args: argparse.Namespace) -> Cluster:
    """`--coordinator/--num-processes/--process-id` checked together, before anything starts."""
    if args.coordinator is None:
        if args.num_processes not in (None, 1) or args.process_id not in (None, 0):
            raise ConfigError(_("--num-processes and --process-id need --coordinator HOST:PORT"))
        return Cluster()
    from jaxintro.parallel import check_coordinator, detect_cluster, distributed_timeout

    distributed_timeout()  # a bad JAXINTRO_DISTRIBUTED_TIMEOUT is refused before anything starts
    if args.coordinator == "auto":
        if args.num_processes is not None or args.process_id is not None:
            raise ConfigError(_("--coordinator auto takes the process count and id from the scheduler; "
                                "drop --num-processes and --process-id"))
        cluster = Cluster(*detect_cluster())
    else:
        cluster = Cluster(args.coordinator, args.num_processes or 1, args.process_id or 0)
    check_coordinator(cluster.coordinator, cluster.num_processes, cluster.process_id)
    return cluster


def resume_config(args: argparse.Namespace, cluster: Cluster) -> tuple[TrainConfig, Path]:
    """`--resume RUN`: its saved config (with `--epochs` and `--data-dir` applied) and its folder.

    JAX is configured here, before anything starts it.
    """
    from jaxintro.checkpoint import config_from_meta, dataset_from_meta, read_meta
    from jaxintro.members import cpu_devices_wanted
    from jaxintro.runtime import configure_jax, set_matmul_precision

    run_dir = Path(args.resume)
    # JAX must learn the device count before Orbax starts it: read it from the plain config file.
    saved = run_dir / CONFIG_FILE
    try:
        saved_json = read_json(saved)
        saved_json.pop(RESOLVED_DATASET, None)  # what the run resolved, written beside its config
        known = TrainConfig.from_json(saved_json).validate()
    except (OSError, ValueError, TypeError, AttributeError, ConfigError):  # the checkpoint's config speaks below
        known = TrainConfig()
    check_processes(known, cluster)  # before joining: the others must not wait for a refused process
    configure_jax(devices=known.devices, cpu_devices=cpu_devices_wanted(known), compile_cache=not args.no_compile_cache,
                  matmul_precision=known.matmul_precision)
    _join(cluster, run_dir, "--resume")
    meta = read_meta(run_dir)
    config = config_from_meta(run_dir, meta)
    # config.json unreadable (or edited): the checkpoint's config decides the precision, set before anything traces.
    set_matmul_precision(config.matmul_precision)
    check_resume_flags(args, config, run_dir)
    changes: dict[str, Any] = {"epochs": args.epochs} if args.epochs is not None else {}
    if config.dataset == "auto":  # resume on the data the run used, even if `auto` would now pick another
        info = dataset_from_meta(run_dir, meta)
        changes["dataset"] = info.name if info else "auto"
    if args.data_dir is not None:
        changes["data_dir"] = args.data_dir
    return dataclasses.replace(config, **changes).validate(), run_dir


# What `--resume` can honour: how far to go, where the data and the peers are, and how to report (`--lang` too).
RESUME_FLAGS = frozenset({"resume", "epochs", "data_dir", "json", "no_compile_cache", "save_every", "coordinator",
                          "num_processes", "process_id", "lang"})


def check_resume_flags(args: argparse.Namespace, config: TrainConfig, run_dir: Path) -> None:
    """Refuse flags that would silently be ignored by `--resume`, and extending a scheduled run."""
    refused = sorted(getattr(args, "given", frozenset()) - RESUME_FLAGS)
    if refused:
        flags = ", ".join("--" + name.replace("_", "-") for name in refused)
        raise ConfigError(ngettext(
            "--resume continues {run_dir} with its own config, so it cannot honour {flags}; drop it, "
            "or start a new run with it (--resume takes --epochs, --data-dir, --json, --no-compile-cache, --save-every)",
            "--resume continues {run_dir} with its own config, so it cannot honour {flags}; drop them, "
            "or start a new run with them (--resume takes --epochs, --data-dir, --json, --no-compile-cache, --save-every)",
            len(refused),
        ).format(run_dir=run_dir, flags=flags))
    if args.epochs is not None and args.epochs != config.epochs and config.schedule != "constant":
        # The schedule's shape depends on the total: resumed with another total, the learning rate would jump
        # and the run would be neither the planned one nor the longer one.
        raise ConfigError(ngettext(
            "{run_dir} follows a {schedule} schedule planned for {epochs} epoch; --resume can finish it "
            "(--epochs {epochs}) but not change its length: start a new run with --epochs {wanted} instead",
            "{run_dir} follows a {schedule} schedule planned for {epochs} epochs; --resume can finish it "
            "(--epochs {epochs}) but not change its length: start a new run with --epochs {wanted} instead",
            config.epochs,
        ).format(run_dir=run_dir, schedule=config.schedule, epochs=config.epochs, wanted=args.epochs))


def check_processes(config: TrainConfig, cluster: Cluster) -> None:
    """Refuse, before joining (the others must not wait for a refused process), what several processes cannot run.

    Several members train in one process: its devices hold them all. The lesson's `--loop python` has no mesh:
    every process would train the whole batch alone, and the first checkpoint could not be written.
    """
    from jaxintro.members import refuse_processes

    refuse_processes(config, cluster.num_processes)
    if config.loop == "python" and cluster.num_processes > 1:
        raise ConfigError(_("--loop python is the lesson's single-device loop; a multi-process run splits each batch "
                            "over the processes' devices in the compiled epoch: drop --loop python (or --coordinator)"))


def _join(cluster: Cluster, run_dir: Path, flag: str, on_give_up=lambda: None) -> None:
    """Join the other processes, then check that they agree on their count and all see `run_dir`.

    `on_give_up` runs when a peer never arrives, just before the process exits (a new run frees its folder).
    """
    if cluster.coordinator is not None:
        from jaxintro.parallel import check_cluster, initialize_distributed

        initialize_distributed(cluster.coordinator, cluster.num_processes, cluster.process_id, on_give_up)
        check_cluster(run_dir, flag, cluster.num_processes)


def run(args: argparse.Namespace) -> int:
    """Train a new run or resume one; a new run that fails before its first checkpoint leaves nothing behind."""
    from jaxintro.members import cpu_devices_wanted
    from jaxintro.runtime import configure_jax

    cluster = resolve_cluster(args)
    if args.resume:
        config, run_dir = resume_config(args, cluster)
        return train_run(args, config, run_dir, resuming=True)
    config = config_from_flags(args)
    check_processes(config, cluster)
    if cluster.coordinator is not None and args.run_dir is None:
        raise ConfigError(_("multi-process training needs --run-dir DIR, the same folder for every process"))
    # The run folder is claimed before JAX starts or data loads (process 0 claims, before joining: a refusal
    # must not leave the others waiting); from here on, a failure frees it, so the same command works again.
    created = args.run_dir is None or not Path(args.run_dir).exists()
    primary = cluster.process_id == 0
    run_dir = claim_run_dir(args.run_dir) if primary else Path(args.run_dir)
    try:
        configure_jax(devices=config.devices, cpu_devices=cpu_devices_wanted(config),
                      compile_cache=not args.no_compile_cache, matmul_precision=config.matmul_precision)
        _join(cluster, run_dir, "--run-dir",
              on_give_up=lambda: discard_run_dir(run_dir, created=created) if primary else None)
        return train_run(args, config, run_dir, resuming=False)
    except BaseException:
        if primary:
            discard_run_dir(run_dir, created=created)
        raise


def train_run(args: argparse.Namespace, config: TrainConfig, run_dir: Path, *, resuming: bool) -> int:
    """Train the resolved run, checkpoint it by the save policy, plot its curves, and print (and save) its summary."""
    import jax

    from jaxintro.runtime import import_in_background
    from jaxintro.train import Trainer, hold_out

    clock = {"start": time.perf_counter()}
    # Orbax's import (checkpoints) and matplotlib's (the plot) take seconds on a TPU's host: each overlaps work
    # that waits on something else, Orbax's the opening of the devices and the data's reading.
    import_in_background("jaxintro.checkpoint")
    jax.devices()  # opens the devices now, where the time breakdown names it (a TPU's runtime takes seconds)
    clock["data"] = time.perf_counter()
    # `--validation N`: the last N training images are held out to choose with; the model trains on the rest.
    dataset = load_dataset(config.dataset, config.data_dir)
    config = dataclasses.replace(config, validation=config.validation_images(len(dataset.x_train)))
    dataset, validation = hold_out(dataset, config.validation, config.batch_size)
    if jax.process_index() == 0:  # the one that plots, once the data is there (a refused folder waits for no import)
        import_in_background("jaxintro.plots")  # overlaps the init and the compile
    clock["data_done"] = time.perf_counter()
    trainer = Trainer.create(config, dataset)  # a model too big for memory is refused here, before any header
    state, rows = resumed_state(trainer, run_dir) if resuming else (None, [])
    # With several processes, process 0 writes the run folder; every process takes part in checkpoints.
    primary = jax.process_index() == 0
    if primary:
        watch(run_dir)  # every later write checks that the folder is still this one
        with run_write(runs.CONFIG_FILE, run_dir):
            runs.write_json(run_dir / runs.CONFIG_FILE, {**config.to_json(), runs.RESOLVED_DATASET: dataset.name})
    # Every epoch is saved where a held copy of the state would not fit beside training (then the last finite epoch is
    # on disk without one), and with several processes (each would read its own clock, and a save is collective).
    every = args.save_every if args.save_every and jax.process_count() == 1 and held_copy_fits(
        config, trainer.model.sizes, len(dataset.x_train), devices=trainer.mesh.size, copies=trainer.layout.copies
    ) else 0.0
    saver = EpochSaver(config, dataset, run_dir, rows, primary=primary, resumed_epoch=None if state is None else state.epoch,
                       every=every)
    spread = report.print_header(config, dataset, run_dir)
    with GracefulStop(distributed=jax.process_count() > 1) as stop:
        result = train_and_save(trainer, dataset, state, saver, run_dir, should_stop=stop.should_stop,
                                validation=validation)
    clock["plot"] = time.perf_counter()
    if primary:
        report.plot_curves(config, dataset, rows, run_dir)
    summary = report.summarize(config, dataset, result, rows, run_dir, spread=spread, primary=primary, clock=clock)
    clock["plot_done"] = time.perf_counter()
    summary["time_breakdown"] = report.time_breakdown(getattr(args, "started", clock["start"]), clock, result,
                                                      saver.seconds)
    summary["written_at"] = runs.written_now()  # which run is the newest (`serve`): a file's time travels in a zip
    summary = json_safe(summary)  # a resume that only writes a finished run's files trains no sample: no rate
    if primary:
        with run_write(runs.RESULT_FILE, run_dir):
            runs.write_json(run_dir / runs.RESULT_FILE, summary)
    report.print_table(config, summary)  # several models: each member, a sweep's settings (one model: nothing)
    if result.stopped_early:
        print(_("Stopped after epoch {epoch}; continue with: jaxintro train --resume {run_dir}").format(
            epoch=summary["epochs"], run_dir=run_dir))
    else:
        report.print_done(config, summary, result, run_dir)
    if args.json:
        print(json_text(summary))
    return stop.exit_code() if result.stopped_early else 0


def resumed_state(trainer: Any, run_dir: Path) -> tuple[Any, list[dict[str, Any]]]:
    """A resumed run's state (its newest intact checkpoint) and the metric rows that checkpoint holds."""
    from jaxintro.checkpoint import abstract_state, restore

    config = trainer.config
    state, meta = restore(run_dir, abstract_state(trainer.model, trainer.tx, config.members))
    # A run trained to its end but stopped by a failed write before its summary: --resume writes it.
    if state.epoch >= config.epochs and (run_dir / runs.RESULT_FILE).exists():
        raise ConfigError(ngettext("{run_dir} already has {epochs} epoch; pass --epochs N with N > {epochs}",
                                   "{run_dir} already has {epochs} epochs; pass --epochs N with N > {epochs}",
                                   state.epoch).format(run_dir=run_dir, epochs=state.epoch))
    print(_("Resuming {run_dir} from epoch {epoch} to {epochs}").format(
        run_dir=run_dir, epoch=state.epoch, epochs=config.epochs), flush=True)
    return state, list(meta["metrics"])


class EpochSaver:
    """`fit`'s per-epoch hook: the epoch's row, then, when the save policy says so, its checkpoint (in the background).

    The policy: at most one save every `every` seconds of training, and always the run's last epoch, the epoch a
    signal stops it after, and the last finite epoch before a divergence. An epoch not saved is held as a copy on
    the device (the next epoch donates its buffers), saved only if the next one diverges (`save_held`); a save
    writes Orbax's files in a thread that competes with training, so fewer saves keep the epochs fast (`every` 0:
    every epoch is saved).
    First the state, then the metrics that describe it: `metrics.jsonl` is rewritten once a step is on disk.
    `seconds` is what saving blocked training: the copy off the device, and the last save's wait.
    """

    def __init__(self, config: TrainConfig, dataset: Any, run_dir: Path, rows: list[dict[str, Any]], *,
                 primary: bool, resumed_epoch: int | None, every: float = 0.0) -> None:
        from jaxintro.checkpoint import Checkpointer

        self.config, self.rows, self.seconds = config, rows, 0.0
        self.every = every
        self.dataset = DatasetInfo.of(dataset).to_json()
        self.checkpointer = Checkpointer(run_dir, on_saved=functools.partial(runs.write_metrics, run_dir)
                                         if primary else None)
        self._saved_at = time.monotonic()  # training started: the first save is due `every` seconds from now
        self._held: tuple[Any, int] | None = None  # the newest epoch not saved, and its row count
        if resumed_epoch is not None:  # every process: Orbax's delete ends in a barrier of all of them
            self.checkpointer.discard_after(resumed_epoch)
            if primary:  # the metrics of the checkpoint resumed from: a failed write may have left them behind it
                runs.write_metrics(run_dir, rows)

    def __call__(self, state: Any, row: Any, *, final: bool = False) -> None:
        start = time.perf_counter()
        self.rows.append(row.as_row())
        if final or time.monotonic() - self._saved_at >= self.every:
            self._save(state, len(self.rows))
        else:
            self._held = (held_copy(state), len(self.rows))
        self.seconds += time.perf_counter() - start

    def _save(self, state: Any, rows: int) -> None:
        self.checkpointer.save(state, self.config, self.rows[:rows], self.dataset)
        self._saved_at, self._held = time.monotonic(), None

    def save_held(self) -> None:
        """Save the newest epoch not yet saved (a later one diverged), if there is one."""
        if self._held is not None:
            start = time.perf_counter()
            self._save(*self._held)
            self.seconds += time.perf_counter() - start

    def close(self) -> None:
        """Wait for the last saved epoch's step, still being written."""
        start = time.perf_counter()
        self.checkpointer.close()
        self.seconds += time.perf_counter() - start


def held_copy(state: Any) -> Any:
    """A copy of `state`'s parameters and optimizer state on their devices, in one small program: the next epoch
    donates (and so frees) the originals. The key is not donated, so it is kept as it is."""
    params, opt_state = _copy_program()((state.params, state.opt_state))
    return state._replace(params=params, opt_state=opt_state)


@functools.cache
def _copy_program() -> Any:
    import jax
    import jax.numpy as jnp

    # `jnp.copy`: a new buffer (jit hands an input returned unchanged back as the same one, which the epoch donates).
    return jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))


def train_and_save(trainer: Any, dataset: Any, state: Any, saver: EpochSaver, run_dir: Path, *,
                   should_stop: Any, validation: Any = None) -> Any:
    """`fit` with its epochs checkpointed by the saver's policy; a divergence or a lost peer ends the run with the
    epoch it can resume."""
    import jax

    from jaxintro.train import fit

    rows = saver.rows  # appended as each epoch ends, before its checkpoint is committed
    stops: set[int] = set()  # the epoch a signal stops the run after: always saved

    def asked_to_stop(epoch: int) -> bool:
        if stop := should_stop(epoch):
            stops.add(epoch)
        return stop

    def on_epoch(state: Any, row: Any) -> None:
        saver(state, row, final=row.epoch in stops or row.epoch == trainer.config.epochs)

    def last_trained() -> int:
        return rows[-1]["epoch"] if rows else 0

    try:
        return fit(trainer.config, dataset, trainer=trainer, state=state, on_epoch=on_epoch,
                   progress=sys.stderr.isatty(), should_stop=asked_to_stop,
                   diverged_before=diverged_in(rows[-1]) if rows else (), validation=validation)
    except TrainingDivergedError as exc:
        saver.save_held()  # the last finite epoch, kept on the device for this
        if rows:
            message = _("{error}; the last good checkpoint is epoch {epoch} in {run_dir}").format(
                error=exc, epoch=rows[-1]["epoch"], run_dir=run_dir)
        else:
            message = _("{error}; no epoch finished").format(error=exc)
        raise TrainingDivergedError(message) from None
    except Exception as exc:
        if jax.process_count() == 1 or (isinstance(exc, JaxintroError) and not peer_lost_in_save(exc)):
            raise
        # In a multi-process run a collective (a gradient all-reduce, or Orbax's barrier) failing
        # means a peer died.
        leave_for_lost_peers(exc, run_dir, trained=last_trained())
    finally:
        try:
            saver.close()  # the last epoch's save: its barrier too can meet a peer that died
        except JaxintroError as exc:
            if jax.process_count() > 1 and peer_lost_in_save(exc):
                leave_for_lost_peers(exc, run_dir, trained=last_trained())
            raise


def peer_lost_in_save(exc: BaseException) -> bool:
    """Whether a checkpoint's save failed in Orbax's barrier between the processes (a peer died), not on the disk."""
    return isinstance(exc, WriteFault) and exc.between_processes()


def leave_for_lost_peers(exc: BaseException, run_dir: Path, trained: int = 0) -> NoReturn:
    """One line that names the lost peers and the newest checkpoint on disk (or, with none, that the run's `trained`
    epochs have no checkpoint), then exit at once: JAX's shutdown barrier would wait for the dead peer, then abort."""
    import jax

    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    facts = dict(process=jax.process_index(), error=f"{type(exc).__name__}: {first}")
    epochs = committed_epochs(run_dir)  # an epoch whose save the failure interrupted is not one to resume from
    if epochs:
        message = _("jaxintro train: error: process {process} lost its peers ({error}); resume from epoch {epoch} "
                    "with --resume {run_dir}").format(epoch=epochs[-1], run_dir=run_dir, **facts)
    elif trained:
        message = ngettext(
            "jaxintro train: error: process {process} lost its peers ({error}); {count} epoch trained, but its "
            "checkpoint was never committed: nothing to resume, start the run again",
            "jaxintro train: error: process {process} lost its peers ({error}); {count} epochs trained, but no "
            "checkpoint was committed: nothing to resume, start the run again", trained).format(count=trained, **facts)
    else:
        message = _("jaxintro train: error: process {process} lost its peers ({error}); no epoch finished").format(
            **facts)
    print(message, file=sys.stderr, flush=True)
    os._exit(1)
