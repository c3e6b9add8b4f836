"""Orbax checkpoints in the run folder: saved at an epoch's end (by `train`'s save policy), the last 3 kept, restored
exactly.

Layout: `RUN_DIR/checkpoints/<epoch>/{state,meta}`. `state` is a plain pytree
(`params`, `opt_state`, `key` as raw uint32 key data) saved with `StandardSave`, readable with
Orbax alone; `meta` is JSON (epoch, config, metrics so far, jaxintro version, and the key's PRNG
implementation, which its raw data alone does not tell: a run goes on with the generator it started
with, whatever `JAX_DEFAULT_PRNG_IMPL` says when it is resumed). Orbax writes each
step into a temporary folder and renames it only once complete, so a crash while saving leaves the
previous checkpoints intact and the half-written one invisible.

Saves are asynchronous: `save` returns once the state has been copied off the device, and the files
are written by Orbax's background thread while the next epoch trains. A save first waits for the
previous one, and `close` for the last, so at most one is in flight; what is on disk is always a
sequence of complete steps, as with a blocking save.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxintro import __version__
from jaxintro.config import TrainConfig
from jaxintro.data import DatasetInfo
from jaxintro.errors import CheckpointError, ConfigError
from jaxintro.faults import (WriteFault, capture_library_logs, check_folder, collect_abandoned, fault_from,
                             run_write)
from jaxintro.i18n import _, ngettext
from jaxintro.members import abstract_carry
from jaxintro.optim import wrap_inner_state
from jaxintro.parallel import make_mesh, replicated_sharding
from jaxintro.runs import CHECKPOINT_DIR, PinnedFolder, check_checkpoint_tree, row_problem
from jaxintro.runtime import release_free_memory
from jaxintro.train import TrainState

KEEP = 3
PRNG_IMPL = "prng_impl"  # the meta's name for the key's PRNG implementation (`threefry2x32`, `rbg`, ...)

# Orbax logs its failures with a traceback per thread: kept for the run's errors.log, never printed.
capture_library_logs()
TMP_SUFFIX = ".orbax-checkpoint-tmp"  # a step Orbax has not finished writing (renamed once complete)


def _manager(folder: Path, *, create: bool, background: bool = False) -> ocp.CheckpointManager:
    """A manager for the checkpoints in `folder`; `background`: saves are written by Orbax's thread."""
    options = ocp.CheckpointManagerOptions(max_to_keep=KEEP, create=create, enable_async_checkpointing=background)
    return ocp.CheckpointManager(folder.absolute(), options=options)


def _as_tree(state: TrainState, *, sweep: bool) -> dict[str, Any]:
    """The tree saved. A run's optimizer state is its optimizer's own, as it has always been saved (the
    hyperparameters `optim.build_optimizer` injects come from the config); a sweep's keeps the wrapper, whose
    hyperparameters differ member by member."""
    opt_state = state.opt_state if sweep else state.opt_state.inner_state
    return {"params": state.params, "opt_state": opt_state, "key": jax.random.key_data(state.key)}


class Checkpointer:
    """Saves a run's state at the epoch ends it is asked to, in the background (one Orbax `CheckpointManager` per run).

    `on_saved(metrics)` is called once a step is complete on disk, with the metrics that step holds
    (at the next save, or at `close`), so files that describe the run (metrics.jsonl) never get
    ahead of its state. Orbax's own post-finalization callback runs before the step's folder is
    renamed to its final name, too early for that. A save that fails, in the foreground or in
    Orbax's thread, raises a `WriteFault` and its metrics are never reported.

    Orbax is handed `checkpoints/` by a descriptor (`PinnedFolder`): whoever can write the run folder may put a link
    to another folder in its place while the run trains, and Orbax's writes and pruning never follow it; at each
    save the name is looked at again, and a folder replaced ends the run (`WriteFault(swapped=True)`).
    """

    def __init__(self, run_dir: Path, on_saved: Callable[[Sequence[dict[str, Any]]], None] | None = None) -> None:
        self.run_dir = run_dir
        self.on_saved = on_saved
        self._in_flight: Sequence[dict[str, Any]] | None = None  # the metrics of the step being written
        check_checkpoint_tree(run_dir)  # Orbax writes and deletes through what it finds: no link, ever
        (run_dir / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
        self.folder = PinnedFolder(run_dir / CHECKPOINT_DIR)
        self.manager = _manager(self.folder.path, create=False, background=True)

    def _check_in_place(self, what: str) -> None:
        """A `WriteFault` if `checkpoints/` is no longer the folder this run holds (a link or another folder there)."""
        replaced = self.folder.replaced()
        if replaced is not None:
            check_folder(what, self.run_dir)  # the run folder itself gone with it: that is the fault to name
            self._in_flight = None  # the step being written is no longer in the run's folder: never reported saved
            raise WriteFault(what, self.run_dir, _(
                "{folder}/ changed while the run trained ({how}); nothing was written through it").format(
                folder=CHECKPOINT_DIR, how=replaced), swapped=True)

    def save(self, state: TrainState, config: TrainConfig, metrics: list[dict[str, Any]],
             dataset: dict[str, Any] | None = None) -> None:
        """Start saving `state` as the checkpoint of `state.epoch`, with config, metrics and the dataset's description."""
        what = _("checkpoint {epoch}").format(epoch=state.epoch)
        self._check_in_place(what)  # before Orbax writes this step and prunes the oldest
        self._finish()
        meta = {"epoch": state.epoch, "config": config.to_json(), "metrics": list(metrics), "dataset": dataset or {},
                "jaxintro_version": __version__, PRNG_IMPL: str(jax.random.key_impl(state.key))}
        with run_write(what, self.run_dir):
            try:
                self.manager.save(state.epoch, args=ocp.args.Composite(
                    state=ocp.args.StandardSave(_as_tree(state, sweep=config.sweep)), meta=ocp.args.JsonSave(meta)))
            except Exception as exc:  # Orbax and TensorStore wrap the OS's refusal in their own errors
                raise fault_from(exc, what, self.run_dir) from None
        self._in_flight = (state.epoch, tuple(metrics))

    def _finish(self) -> None:
        """Wait for the step being written, then report it saved (a failed step is forgotten, never reported)."""
        in_flight, self._in_flight = self._in_flight, None
        try:
            self.manager.wait_until_finished()  # re-raises the background thread's failure, once
        except Exception as exc:
            what = _("checkpoint {epoch}").format(epoch=in_flight[0] if in_flight else "?")
            raise fault_from(exc, what, self.run_dir) from None
        # Orbax's threads take their host copies from their own malloc arenas, which glibc keeps mapped
        # once freed: trimmed after every save, or the process would grow by a state's size per epoch.
        release_free_memory()
        if in_flight is None:
            return
        self._check_in_place(_("checkpoint {epoch}").format(epoch=in_flight[0]))  # its metrics follow only if kept
        self._remove_unfinished()
        if self.on_saved is not None:
            self.on_saved(in_flight[1])

    def _remove_unfinished(self) -> None:
        """Delete the half-written steps of an earlier failed save (a restore passes over them; a save succeeded)."""
        self.folder.remove_steps(lambda name: TMP_SUFFIX in name)

    def discard_after(self, epoch: int) -> list[int]:
        """Delete checkpoints newer than `epoch` (damaged ones a resume passed over), so the run can save them anew."""
        self._check_in_place(_("the checkpoints"))
        newer = [step for step in self.manager.all_steps() if step > epoch]
        for step in newer:
            self.manager.delete(step)
        return newer

    def close(self) -> None:
        """Wait for the save in flight to be on disk (and report it), then release the manager."""
        try:
            self._finish()
        except BaseException:
            with contextlib.suppress(Exception):  # the first failure is the one to report
                self.manager.close()
            self.folder.close()
            raise
        try:
            self.manager.close()
        except Exception as exc:  # it waits for Orbax's threads, which may hold a failure of their own
            raise fault_from(exc, _("the checkpoints"), self.run_dir) from None
        finally:
            self.folder.close()


def abstract_state(model, tx, count: int = 1) -> TrainState:
    """The shapes of a model's training state, to restore into: nothing is initialised just to be overwritten.

    Several members are one checkpoint: every leaf carries a leading member axis.
    """
    params = jax.eval_shape(model.init, jax.random.key(0))
    return TrainState(*abstract_carry(count, params, jax.eval_shape(tx.init, params)), 0)


def read_meta(run_dir: Path) -> dict[str, Any]:
    """The JSON metadata of the newest intact checkpoint of `run_dir`."""
    manager = _open(run_dir)
    steps = _steps_newest_first(manager, run_dir)
    return _newest_intact(run_dir, steps, lambda step: _restore_meta(manager, run_dir, step))[1]


def restore(run_dir: Path, template: TrainState, *, params_only: bool = False) -> tuple[TrainState, dict[str, Any]]:
    """Restore the newest intact checkpoint into `template`'s structure; return it and its meta.

    Each step's meta is read first: its version, its key's PRNG implementation, the shapes Orbax
    recorded and the chunks each array is stored in are checked before any array is read. A damaged
    newest step (a crash of the disk, not of jaxintro: Orbax writes steps atomically) is passed over with a
    warning naming it, and the run goes on from the newest step that restores. `params_only`: the optimizer's
    state is not read (None in the state returned), for a command that only uses the model.
    """
    manager = _open(run_dir)
    steps = _steps_newest_first(manager, run_dir)
    # Restore onto this process's devices, whatever topology saved it (one process or several).
    if jax.process_count() == 1:
        sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    else:  # replicated over the trainer's own mesh (its axis name and types), which `place` then keeps
        sharding = replicated_sharding(make_mesh(jax.device_count()))

    def restore_step(step: int) -> tuple[Any, dict[str, Any], str]:
        meta = _restore_meta(manager, run_dir, step)
        saved = _saved_shapes(manager, step)
        impl = _key_impl(meta, run_dir, step, saved.get(("key",), ()), str(jax.random.key_impl(template.key)))
        config = config_from_meta(run_dir, meta)
        tree = {**_as_tree(template, sweep=config.sweep), "key": _abstract_key_data(template.key.shape, impl)}
        abstract = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding), tree)
        _check_shapes(run_dir, abstract, saved)
        if params_only:  # Adam's two moments are never read
            del abstract["opt_state"]
        _check_chunks(manager.directory / str(step) / "state", abstract)
        if params_only:
            return _restore_part(manager.directory / str(step) / "state", abstract), meta, impl
        restored = dict(manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract))).state)
        if not config.sweep:  # the hyperparameters the optimizer state carries, set again from the config
            restored["opt_state"] = wrap_inner_state(config, template.opt_state, restored["opt_state"])
        return restored, meta, impl

    step, (tree, meta, impl) = _newest_intact(run_dir, steps, restore_step)
    key = jax.random.wrap_key_data(np.asarray(tree["key"]), impl=impl)
    return TrainState(tree["params"], None if params_only else tree["opt_state"], key, step), meta


def _key_impl(meta: dict[str, Any], run_dir: Path, step: int, saved_key: tuple[int, ...], current: str) -> str:
    """The PRNG implementation the checkpoint's key was drawn with. A checkpoint older than the record tells it by
    its key's width: 2 words a key is threefry (JAX's default), 4 the rbg family (`current` if it is one of them)."""
    if PRNG_IMPL not in meta:
        return current if saved_key[-1:] == _abstract_key_data((), current).shape else (
            "threefry2x32" if saved_key[-1:] == (2,) else "rbg")
    try:
        _abstract_key_data((), meta[PRNG_IMPL])
    except (ValueError, TypeError, KeyError):
        raise CheckpointError(_(
            "{run_dir}: checkpoint {step} records the PRNG implementation {impl}, which this JAX does not know; "
            "retrain, or resume with the JAX that wrote it"
        ).format(run_dir=run_dir, step=step, impl=repr(meta[PRNG_IMPL]))) from None
    return meta[PRNG_IMPL]


def _abstract_key_data(shape: tuple[int, ...], impl: str) -> jax.ShapeDtypeStruct:
    """The raw data of `shape` keys of `impl` (threefry: 2 uint32 words a key, rbg: 4), as a shape to restore into."""
    one = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0, impl=impl)))
    return jax.ShapeDtypeStruct((*shape, *one.shape), one.dtype)


def config_from_meta(run_dir: Path, meta: dict[str, Any]) -> TrainConfig:
    """The run's config as its checkpoint saved it."""
    try:
        return TrainConfig.from_json(meta["config"]).validate()
    except (ConfigError, TypeError, KeyError) as exc:
        raise CheckpointError(_("{run_dir}: its saved config is not usable by jaxintro {version}: {error}").format(
            run_dir=run_dir, version=__version__, error=exc)) from None


def dataset_from_meta(run_dir: Path, meta: dict[str, Any]) -> DatasetInfo | None:
    """The run's dataset record as its checkpoint saved it (None: a checkpoint older than the record)."""
    try:
        return DatasetInfo.from_json(meta.get("dataset"))
    except ValueError as exc:
        raise CheckpointError(_("{run_dir}: its checkpoint's dataset record is damaged ({error}); retrain it").format(
            run_dir=run_dir, error=exc)) from None


def _restore_meta(manager: ocp.CheckpointManager, run_dir: Path, step: int) -> dict[str, Any]:
    meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
    if not isinstance(meta, dict):  # this step's damage: an older step may be intact
        raise ValueError(f"checkpoint {step}'s meta is not a JSON object")
    rows = meta.get("metrics", [])  # a resume goes on from these rows, evaluate chooses members by them
    if not isinstance(rows, list) or any(row_problem(row) for row in rows):
        raise ValueError(f"checkpoint {step}'s metrics are not epoch records")
    _check_version(meta, run_dir, step)
    return meta


def _saved_shapes(manager: ocp.CheckpointManager, step: int) -> dict[tuple[str, ...], tuple[int, ...]]:
    """The shape of every array of a step's state, as Orbax recorded it when saving (no array is read)."""
    # `CheckpointManager` names a step's folder by its number (its default, used by `_manager`).
    with contextlib.closing(ocp.StandardCheckpointHandler()) as handler:
        metadata = handler.metadata(manager.directory / str(step) / "state")
    return {_path_names(path): tuple(leaf.shape) for path, leaf in jax.tree_util.tree_leaves_with_path(metadata)}


def _restore_part(state_dir: Path, abstract: dict[str, Any]) -> dict[str, Any]:
    """The arrays of a step's state that `abstract` names, and no other (Orbax's partial restore)."""
    with contextlib.closing(ocp.PyTreeCheckpointHandler()) as handler:
        return handler.restore(state_dir, args=ocp.args.PyTreeRestore(
            item=abstract, restore_args=ocp.checkpoint_utils.construct_restore_args(abstract), partial_restore=True))


def _check_chunks(state_dir: Path, abstract: Any) -> None:
    """Each array to be read is stored as this model's shape in chunks no larger than the array (its zarr metadata,
    read alone): a crafted chunk grid would have TensorStore allocate a chunk's size, whatever the array's."""
    import tensorstore as ts

    ocdbt = (state_dir / "manifest.ocdbt").is_file()  # Orbax's default; older steps hold one folder per array
    store = ts.KvStore.open({"driver": "ocdbt" if ocdbt else "file", **(
        {"base": f"file://{state_dir.absolute()}/"} if ocdbt else {"path": f"{state_dir.absolute()}/"})}).result()
    for path, leaf in jax.tree_util.tree_leaves_with_path(abstract):
        name = ".".join(_path_names(path))
        found = store.read(f"{name}/.zarray").result()
        zarray = json.loads(found.value) if found.state == "value" else None
        shape, chunks = (zarray.get("shape"), zarray.get("chunks")) if isinstance(zarray, dict) else (None, None)
        if not (shape == list(leaf.shape) and isinstance(chunks, list) and len(chunks) == len(shape)
                and all(type(c) is int and 1 <= c <= max(n, 1) for c, n in zip(chunks, shape))):
            raise ValueError(f"{name} is stored as {shape} in chunks of {chunks}, not as this model's "
                             f"{list(leaf.shape)} in chunks no larger than it")


def _path_names(path: tuple) -> tuple[str, ...]:
    """A leaf's path as names: Orbax records a named tuple's fields as a dict's keys, a list's items as `0`, `1`."""
    return tuple(str(getattr(part, "key", getattr(part, "name", getattr(part, "idx", part)))) for part in path)


def _check_version(meta: dict[str, Any], run_dir: Path, step: int) -> None:
    if meta.get("jaxintro_version") != __version__:
        raise CheckpointError(_(
            "{run_dir}: checkpoint {step} written by jaxintro {written}, this is {version}; "
            "use jaxintro=={written} or retrain"
        ).format(run_dir=run_dir, step=step, written=meta.get("jaxintro_version"), version=__version__))


def _newest_intact(run_dir: Path, steps: list[int], restore_step: Callable[[int], Any]) -> tuple[int, Any]:
    """`restore_step(step)` of the first of `steps` (newest first) that works; warn about the ones passed over."""
    failures: list[tuple[int, str]] = []
    for step in steps:
        try:
            value = restore_step(step)
            break
        except CheckpointError:  # a version, key or shape mismatch, which names the checkpoint: older steps share it
            raise
        except Exception as exc:  # Orbax and TensorStore raise assorted errors for damaged or foreign files
            failures.append((step, f"{type(exc).__name__}: {_first_line(exc)}"))
        collect_abandoned()  # the error dropped: the reads it abandoned are kept with the library's records
    else:
        raise CheckpointError(_(
            "{run_dir}: no checkpoint could be restored (tried {tried}; newest: {reason}); it belongs to another "
            "architecture, or its files are damaged"
        ).format(run_dir=run_dir, tried=", ".join(str(s) for s, _why in failures), reason=failures[0][1]))
    if failures:
        warnings.warn(ngettext(
            "{run_dir}: checkpoint(s) {failed} could not be read ({reason}); using checkpoint {step}, the "
            "newest intact one. To get rid of the damaged one(s): rm -r {paths}",
            "{run_dir}: checkpoint(s) {failed} could not be read ({reason}); using checkpoint {step}, the "
            "newest intact one. To get rid of the damaged one(s): rm -r {paths}",
            len(failures),
        ).format(run_dir=run_dir, failed=", ".join(str(s) for s, _why in failures), reason=failures[0][1],
                 step=step, paths=" ".join(str(run_dir / CHECKPOINT_DIR / str(s)) for s, _why in failures)),
            RuntimeWarning, stacklevel=3)
    return step, value


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else _("no message"))[:200]


def _open(run_dir: Path) -> ocp.CheckpointManager:
    if not os.path.lexists(run_dir):
        raise CheckpointError(_("{run_dir} does not exist; pass the folder of a `jaxintro train` run (`jaxintro runs` "
                                "lists them)").format(run_dir=run_dir))
    check_checkpoint_tree(run_dir)  # before Orbax reads a byte: no link, no special file, nothing oversized
    if not (run_dir / CHECKPOINT_DIR).is_dir():
        raise CheckpointError(_("{run_dir}: no {folder}/ folder; pass the folder of a `jaxintro train` run").format(
            run_dir=run_dir, folder=CHECKPOINT_DIR))
    return _manager(run_dir / CHECKPOINT_DIR, create=False)


def _steps_newest_first(manager: ocp.CheckpointManager, run_dir: Path) -> list[int]:
    """The finished steps, newest first (the order in which a restore tries them)."""
    steps = manager.all_steps()
    if not steps:
        raise CheckpointError(_(
            "{run_dir}: holds no finished checkpoint (training stopped before the first epoch ended)"
        ).format(run_dir=run_dir))
    return sorted(steps, reverse=True)


def _check_shapes(run_dir: Path, expected, saved: dict[tuple[str, ...], tuple[int, ...]]) -> None:
    """Every array of this model is in the checkpoint with its shape, and nothing else is: else, one clear error."""
    wanted = {_path_names(path): tuple(leaf.shape) for path, leaf in jax.tree_util.tree_leaves_with_path(expected)}
    for names in sorted(wanted.keys() | saved.keys()):
        leaf = "/".join(names)
        if names not in saved:
            problem = _("{leaf} is missing from the checkpoint").format(leaf=leaf)
        elif names not in wanted:
            problem = _("the checkpoint holds {leaf}, which this model lacks").format(leaf=leaf)
        elif wanted[names] != saved[names]:
            problem = _("{leaf} has shape {saved} in the checkpoint, {expected} in this model").format(
                leaf=leaf, saved=saved[names], expected=wanted[names])
        else:
            continue
        raise CheckpointError(_("{run_dir}: {problem}; it belongs to another architecture").format(
            run_dir=run_dir, problem=problem))
