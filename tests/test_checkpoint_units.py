"""Checkpoints saved and restored in the test's own process, without training: a state is saved, damaged,
restored, and each answer is checked whole (the state, its meta, the step chosen, the error's exact words).

Seconds each, so `make mutation` tries them before test_checkpoint.py's trainings (tests/conftest.py).
"""

from __future__ import annotations

import errno
import json
import re
import shutil
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxintro import __version__, checkpoint
from jaxintro.config import TrainConfig
from jaxintro.errors import CheckpointError
from jaxintro.faults import WriteFault
from jaxintro.train import Trainer, TrainState
from conftest import synthetic_dataset

ENOSPC = "No space left on device [ENOSPC]"


class Saved(NamedTuple):
    """A run folder with checkpoints 1, 2, 3 of one state (its parameters times the epoch: each step differs)."""

    run: Path
    trainer: Trainer
    states: dict[int, TrainState]
    rows: list[dict]


def state_at(state: TrainState, epoch: int) -> TrainState:
    """`state` as saved at `epoch`: parameters scaled by the epoch, so a restore of the wrong step is seen."""
    return state._replace(params=jax.tree.map(lambda leaf: leaf * epoch, state.params), epoch=epoch)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Saved:
    """Saved once for the module; a test that damages it works on its own copy (`copy_of`)."""
    config = TrainConfig(dataset="digits", epochs=3)
    trainer = Trainer.create(config, synthetic_dataset())
    run = tmp_path_factory.mktemp("saved") / "run"
    states, rows = {}, []
    saver = checkpoint.Checkpointer(run)
    for epoch in (1, 2, 3):
        states[epoch] = state_at(trainer.init_state(), epoch)
        rows.append({"epoch": epoch, "loss": 1.0 / epoch})
        saver.save(states[epoch], config, rows, {"name": "digits"})
    saver.close()
    return Saved(run, trainer, states, rows)


def copy_of(saved: Saved, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(saved.run, run)
    return run


def template(saved: Saved) -> TrainState:
    return checkpoint.abstract_state(saved.trainer.model, saved.trainer.tx)


def assert_same_state(restored: TrainState, expected: TrainState) -> None:
    assert restored.epoch == expected.epoch
    assert jax.tree.structure(restored.params) == jax.tree.structure(expected.params)
    assert jax.tree.structure(restored.opt_state) == jax.tree.structure(expected.opt_state)
    for got, want in zip(jax.tree.leaves((restored.params, restored.opt_state)),
                         jax.tree.leaves((expected.params, expected.opt_state)), strict=True):
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        np.testing.assert_array_equal(got, want)
    assert str(jax.random.key_impl(restored.key)) == str(jax.random.key_impl(expected.key))
    np.testing.assert_array_equal(jax.random.key_data(restored.key), jax.random.key_data(expected.key))


def expected_meta(saved: Saved, epoch: int) -> dict:
    return {"epoch": epoch, "config": saved.trainer.config.to_json(), "metrics": saved.rows[:epoch],
            "dataset": {"name": "digits"}, "jaxintro_version": __version__,
            "prng_impl": str(jax.random.key_impl(saved.states[epoch].key))}


def damage(run: Path, step: int) -> None:
    """Make `step`'s arrays unreadable (its state's files emptied), as a crash of the disk would."""
    for path in (run / "checkpoints" / str(step) / "state").rglob("*"):
        if path.is_file() and path.name != "_METADATA":
            path.write_bytes(b"")


def write_meta(run: Path, step: int, **changes) -> None:
    path = run / "checkpoints" / str(step) / "meta" / "metadata"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.backend
def test_the_newest_step_restores_whole_onto_one_device(saved):
    state, meta = checkpoint.restore(saved.run, template(saved))
    assert_same_state(state, saved.states[3])
    assert meta == expected_meta(saved, 3)
    leaf = jax.tree.leaves(state.params)[0]
    assert leaf.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])


def test_read_meta_is_the_newest_step_s_meta(saved):
    assert checkpoint.read_meta(saved.run) == expected_meta(saved, 3)
    assert checkpoint.config_from_meta(saved.run, checkpoint.read_meta(saved.run)) == saved.trainer.config


def test_the_abstract_state_has_the_shapes_of_a_real_one_and_no_values(saved):
    real = saved.trainer.init_state()
    for count in (1, 3):
        abstract = checkpoint.abstract_state(saved.trainer.model, saved.trainer.tx, count)
        lead = () if count == 1 else (count,)
        for got, want in zip(jax.tree.leaves((abstract.params, abstract.opt_state)),
                             jax.tree.leaves((real.params, real.opt_state)), strict=True):
            assert isinstance(got, jax.ShapeDtypeStruct)
            assert (got.shape, got.dtype) == ((*lead, *want.shape), want.dtype)
        assert abstract.key.shape == lead and abstract.epoch == 0


def test_a_damaged_newest_step_is_passed_over_with_a_warning_that_names_it(saved, tmp_path):
    run = copy_of(saved, tmp_path)
    damage(run, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state, meta = checkpoint.restore(run, template(saved))
    assert_same_state(state, saved.states[2])
    assert meta == expected_meta(saved, 2)
    [warning] = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    text = str(warning.message)
    assert text.startswith(f"{run}: checkpoint(s) 3 could not be read (")
    assert text.endswith(f"); using checkpoint 2, the newest intact one. To get rid of the damaged one(s): "
                         f"rm -r {run / 'checkpoints' / '3'}")


@pytest.mark.parametrize("language", ["en", "es"])
def test_two_damaged_steps_are_named_together_in_the_plural(saved, language, tmp_path):
    from jaxintro.i18n import set_language

    run = copy_of(saved, tmp_path)
    damage(run, 3)
    damage(run, 2)
    set_language(language)
    with pytest.warns(RuntimeWarning) as caught:
        assert checkpoint.restore(run, template(saved))[1] == expected_meta(saved, 1)
    text = str(caught[0].message)
    paths = f"rm -r {run / 'checkpoints' / '3'} {run / 'checkpoints' / '2'}"
    if language == "en":
        assert text.startswith(f"{run}: checkpoint(s) 3, 2 could not be read (")
        assert text.endswith(f"); using checkpoint 1, the newest intact one. To get rid of the damaged one(s): {paths}")
    else:
        assert text.startswith(f"{run}: no se pudieron leer los checkpoints 3, 2 (")
        assert f"; se usa el checkpoint 1, " in text and text.endswith(paths)
    one = copy_of(saved, tmp_path / "one")
    damage(one, 3)
    with pytest.warns(RuntimeWarning) as caught:
        checkpoint.restore(one, template(saved))
    said = "checkpoint(s) 3 could not be read (" if language == "en" else "no se pudo leer el checkpoint 3 ("
    assert str(caught[0].message).startswith(f"{one}: {said}")  # one step: the singular


def test_every_step_damaged_is_one_error_naming_the_steps_tried_and_the_newest_ones_reason(saved, tmp_path):
    run = copy_of(saved, tmp_path)
    damage(run, 3)
    with pytest.warns(RuntimeWarning) as caught:  # the newest step's reason, as the warning names it
        checkpoint.restore(run, template(saved))
    newest = str(caught[0].message).split(" could not be read (", 1)[1].split("); using checkpoint", 1)[0]
    for step in (1, 2):  # the older steps damaged otherwise: their reason is another one
        shutil.rmtree(run / "checkpoints" / str(step) / "state")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointError) as raised:
            checkpoint.restore(run, template(saved))
    text = str(raised.value)
    start = f"{run}: no checkpoint could be restored (tried 3, 2, 1; newest: "
    end = "); it belongs to another architecture, or its files are damaged"
    assert text.startswith(start) and text.endswith(end)
    assert same_failure(text[len(start):-len(end)], newest)
    assert newest.split(":")[0].isidentifier() and newest.split(":")[0] != "None"  # `ErrorType: first line`


def same_failure(reason: str, other: str) -> bool:
    """The same failure of one step: TensorStore reads a step's arrays together, and the first to fail (the one a
    reason names, its line cut at 200 characters) can differ from one restore to the next."""
    reason, other = (re.sub(r'"[^"/]*/\.zarray"', '"ARRAY"', r) for r in (reason, other))
    n = min(len(reason), len(other))  # names of other lengths move the cut
    return '"ARRAY"' in reason[:n] and reason[:n] == other[:n]


@pytest.mark.parametrize("field, value, said", [
    ("jaxintro_version", "0.0.1", f"checkpoint 3 written by jaxintro 0.0.1, this is {__version__}; use jaxintro==0.0.1 "
                                  "or retrain"),
    ("prng_impl", "philox", "checkpoint 3 records the PRNG implementation 'philox', which this JAX does not know; "
                            "retrain, or resume with the JAX that wrote it"),
])
def test_a_checkpoint_this_jaxintro_cannot_read_is_refused_before_an_older_step_is_tried(saved, field, value, said,
                                                                                          tmp_path):
    run = copy_of(saved, tmp_path)
    write_meta(run, 3, **{field: value})
    with pytest.raises(CheckpointError) as raised:
        checkpoint.restore(run, template(saved))
    assert str(raised.value) == f"{run}: {said}"
    if field == "jaxintro_version":  # read before anything else, by every reader
        with pytest.raises(CheckpointError) as again:
            checkpoint.read_meta(run)
        assert str(again.value) == str(raised.value)


def test_a_meta_that_is_not_an_object_is_damage_and_an_older_step_is_used(saved, tmp_path):
    run = copy_of(saved, tmp_path)
    (run / "checkpoints" / "3" / "meta" / "metadata").write_text("[1, 2]")
    with pytest.warns(RuntimeWarning, match=r"checkpoint\(s\) 3 could not be read \(ValueError: checkpoint 3's meta "
                                             r"is not a JSON object\); using checkpoint 2"):
        assert checkpoint.read_meta(run) == expected_meta(saved, 2)


def test_a_model_of_other_shapes_is_refused_by_its_first_differing_leaf(saved, tiny):
    wider = Trainer.create(TrainConfig(dataset="digits", hidden=(32, 16)), tiny)
    with pytest.raises(CheckpointError) as raised:
        checkpoint.restore(saved.run, checkpoint.abstract_state(wider.model, wider.tx))
    assert str(raised.value) == (f"{saved.run}: opt_state/0/mu/layer1/b has shape (256,) in the checkpoint, (32,) "
                                 "in this model; it belongs to another architecture")


@pytest.mark.parametrize("saved_leaves, problem", [
    ({("a",): (2,), ("c",): (1,)}, "b/0 is missing from the checkpoint"),
    ({("a",): (2,), ("b", "0"): (3,), ("b", "1"): (4,), ("z",): (1,)},
     "the checkpoint holds z, which this model lacks"),
    ({("a",): (2,), ("b", "0"): (3,), ("b", "1"): (5,)}, "b/1 has shape (5,) in the checkpoint, (4,) in this model"),
])
def test_the_shape_check_names_the_first_leaf_in_name_order(saved_leaves, problem, tmp_path):
    expected = {"b": [jnp.zeros(3), jnp.zeros(4)], "a": jnp.zeros(2)}
    with pytest.raises(CheckpointError) as raised:
        checkpoint._check_shapes(tmp_path, expected, saved_leaves)
    assert str(raised.value) == f"{tmp_path}: {problem}; it belongs to another architecture"
    checkpoint._check_shapes(tmp_path, expected, {("a",): (2,), ("b", "0"): (3,), ("b", "1"): (4,)})  # all agree


def test_a_leaf_s_path_is_said_by_names_whatever_kind_of_node_holds_it():
    tree = {"params": {"w": 0}, "opt": (TrainState(1, 2, 3, 4),), "list": [5, 6]}
    names = sorted(checkpoint._path_names(path) for path, _leaf in jax.tree_util.tree_leaves_with_path(tree))
    assert names == [("list", "0"), ("list", "1"), ("opt", "0", "epoch"), ("opt", "0", "key"),
                     ("opt", "0", "opt_state"), ("opt", "0", "params"), ("params", "w")]


@pytest.mark.parametrize("recorded, width, current, impl", [
    (None, 2, "threefry2x32", "threefry2x32"), (None, 4, "threefry2x32", "rbg"), (None, 4, "unsafe_rbg", "unsafe_rbg"),
    (None, 2, "rbg", "threefry2x32"), ("rbg", 4, "threefry2x32", "rbg"), ("unsafe_rbg", 4, "rbg", "unsafe_rbg"),
])
@pytest.mark.parametrize("members", [(), (3,)])  # one model's key, or one per member
def test_the_key_s_generator_is_the_recorded_one_or_told_by_the_key_s_width(recorded, width, current, impl, members,
                                                                           tmp_path):
    meta = {} if recorded is None else {"prng_impl": recorded}
    assert checkpoint._key_impl(meta, tmp_path, 3, (*members, width), current) == impl


@pytest.mark.parametrize("recorded", [True, False])  # False: a checkpoint older than the record (told by its width)
@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_a_key_restores_with_the_generator_it_was_drawn_with(saved, impl, recorded, tmp_path):
    state = saved.states[1]._replace(key=jax.random.key(7, impl=impl))
    saver = checkpoint.Checkpointer(tmp_path / "run")
    saver.save(state, saved.trainer.config, saved.rows[:1])
    saver.close()
    if not recorded:
        path = tmp_path / "run" / "checkpoints" / "1" / "meta" / "metadata"
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "prng_impl"}))
    restored, meta = checkpoint.restore(tmp_path / "run", template(saved))  # the template's key is threefry's
    assert_same_state(restored, state)
    assert meta.get("prng_impl") == (impl if recorded else None)


def test_a_key_s_raw_data_has_its_generator_s_width():
    assert checkpoint._abstract_key_data((), "threefry2x32") == jax.ShapeDtypeStruct((2,), jnp.uint32)
    assert checkpoint._abstract_key_data((5,), "rbg") == jax.ShapeDtypeStruct((5, 4), jnp.uint32)


def test_a_folder_without_checkpoints_or_with_none_finished_is_one_clear_error(tmp_path):
    with pytest.raises(CheckpointError) as raised:
        checkpoint.read_meta(tmp_path)
    assert str(raised.value) == f"{tmp_path}: no checkpoints/ folder; pass the folder of a `jaxintro train` run"
    (tmp_path / "checkpoints" / "1.orbax-checkpoint-tmp-7").mkdir(parents=True)
    for read in (checkpoint.read_meta, lambda run: checkpoint.restore(run, None)):
        with pytest.raises(CheckpointError) as raised:
            read(tmp_path)
        assert str(raised.value) == (f"{tmp_path}: holds no finished checkpoint (training stopped before the first "
                                     "epoch ended)")


def test_a_saved_config_or_dataset_record_that_is_unusable_is_refused_with_the_folder(tmp_path):
    with pytest.raises(CheckpointError) as raised:
        checkpoint.config_from_meta(tmp_path, {"config": {"epochs": -1}})
    assert str(raised.value).startswith(f"{tmp_path}: its saved config is not usable by jaxintro {__version__}: ")
    with pytest.raises(CheckpointError) as raised:
        checkpoint.config_from_meta(tmp_path, {})
    assert str(raised.value) == f"{tmp_path}: its saved config is not usable by jaxintro {__version__}: 'config'"
    assert checkpoint.dataset_from_meta(tmp_path, {}) is None
    with pytest.raises(CheckpointError) as raised:
        checkpoint.dataset_from_meta(tmp_path, {"dataset": {"name": "x", "image_shape": [8, 9], "features": 72,
                                                            "classes": ["0"]}})
    assert str(raised.value) == (f"{tmp_path}: its checkpoint's dataset record is damaged (image_shape [8, 9] with "
                                 "72 features is not a small square image); retrain it")


@pytest.mark.parametrize("message, line", [
    ("\n  \nthe first line said\nand more", "the first line said"),
    ("", "no message"),
    ("  \n\t", "no message"),
    ("x" * 300, "x" * 200),
], ids=["blank-lines-first", "empty", "blank", "long"])
def test_a_passed_over_checkpoint_is_named_by_its_errors_first_line_at_most_200_characters(message, line):
    """What the warning quotes of a library's error (Orbax's and TensorStore's run to many lines)."""
    assert checkpoint._first_line(ValueError(message)) == line


# ---------------------------------------------------------------- the Checkpointer: saving, in the background


def test_the_checkpointer_keeps_the_last_three_and_reports_each_step_once(saved, tmp_path):
    reported = []
    saver = checkpoint.Checkpointer(tmp_path, on_saved=reported.append)
    assert (tmp_path / "checkpoints").is_dir()  # made at once: a run folder shows where its checkpoints go
    state = saved.states[1]
    for epoch in range(1, 6):
        saver.save(state._replace(epoch=epoch), saved.trainer.config, [{"epoch": e} for e in range(1, epoch + 1)])
    saver.close()
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [3, 4, 5]
    assert [len(rows) for rows in reported] == [1, 2, 3, 4, 5]


def test_discard_after_deletes_only_the_newer_steps(saved, tmp_path):
    run = copy_of(saved, tmp_path)
    saver = checkpoint.Checkpointer(run)
    assert saver.discard_after(1) == [2, 3]
    saver.close()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["1"]
    assert_same_state(checkpoint.restore(run, template(saved))[0], saved.states[1])


def test_debris_of_a_failed_save_is_removed_after_the_next_save(saved, tmp_path):
    """A leftover `N.orbax-checkpoint-tmp...` is removed once a save has succeeded."""
    partial = tmp_path / "run" / "checkpoints" / "7.orbax-checkpoint-tmp-1"
    (partial / "state").mkdir(parents=True)
    saver = checkpoint.Checkpointer(tmp_path / "run")
    saver.save(saved.states[1], saved.trainer.config, saved.rows[:1])
    saver.close()
    assert not partial.exists() and (tmp_path / "run" / "checkpoints" / "1").is_dir()


def test_a_link_in_the_checkpoints_folder_is_refused_before_orbax_writes(tmp_path):
    """Orbax would write and delete through it (another run's steps, say): the checkpointer refuses to start."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "kept").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    link = tmp_path / "run" / "checkpoints" / "8.orbax-checkpoint-tmp-2"
    link.symlink_to(elsewhere)
    with pytest.raises(CheckpointError, match="is a symbolic link; jaxintro reads no link"):
        checkpoint.Checkpointer(tmp_path / "run")
    assert link.is_symlink() and (elsewhere / "kept").is_dir()


def refusing(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def failing_after(release: Callable[[], None], error: Exception) -> Callable[[], None]:
    """A manager's `close` that fails with `error` once it has released the manager (no Orbax thread outlives a test)."""
    def close() -> None:
        release()
        raise error

    return close


def test_a_save_the_disk_refuses_is_a_write_fault_naming_the_checkpoint(saved, tmp_path, monkeypatch):
    saver = checkpoint.Checkpointer(tmp_path)
    monkeypatch.setattr(saver.manager, "save", refusing)
    with pytest.raises(WriteFault) as raised:
        saver.save(saved.states[2], saved.trainer.config, saved.rows[:2])
    assert (raised.value.what, raised.value.run_dir, str(raised.value)) == (
        "checkpoint 2", tmp_path, f"checkpoint 2: {ENOSPC}")
    monkeypatch.undo()
    saver.close()


def test_a_save_into_a_run_folder_removed_meanwhile_is_a_write_fault_naming_the_checkpoint(saved, tmp_path):
    run = tmp_path / "run"
    saver = checkpoint.Checkpointer(run)
    shutil.rmtree(run)
    try:
        with pytest.raises(WriteFault) as raised:
            saver.save(saved.states[2], saved.trainer.config, saved.rows[:2])
        assert not run.exists()  # refused before Orbax could make the folder again
    finally:
        saver.close()
    assert (raised.value.what, raised.value.run_dir, raised.value.vanished) == ("checkpoint 2", run, True)


def test_a_background_write_that_failed_is_a_write_fault_of_its_step_and_never_reported(saved, tmp_path,
                                                                                         monkeypatch):
    reported = []
    saver = checkpoint.Checkpointer(tmp_path, on_saved=reported.append)
    saver.save(saved.states[2], saved.trainer.config, saved.rows[:2])
    saver.manager.wait_until_finished()
    monkeypatch.setattr(saver.manager, "wait_until_finished", refusing)
    with pytest.raises(WriteFault) as raised:
        saver.save(saved.states[3], saved.trainer.config, saved.rows)
    assert (raised.value.what, raised.value.run_dir, str(raised.value)) == (
        "checkpoint 2", tmp_path, f"checkpoint 2: {ENOSPC}")
    assert reported == []
    with pytest.raises(WriteFault) as unknown:  # nothing in flight any more: the step is not known
        saver.close()
    assert str(unknown.value) == f"checkpoint ?: {ENOSPC}"


def test_close_reports_the_first_failure_even_when_releasing_the_manager_fails_too(saved, tmp_path, monkeypatch):
    saver = checkpoint.Checkpointer(tmp_path)
    saver.save(saved.states[1], saved.trainer.config, saved.rows[:1])
    saver.manager.wait_until_finished()
    monkeypatch.setattr(saver.manager, "wait_until_finished", refusing)
    monkeypatch.setattr(saver.manager, "close", failing_after(saver.manager.close, RuntimeError("close failed")))
    with pytest.raises(WriteFault) as raised:
        saver.close()
    assert str(raised.value) == f"checkpoint 1: {ENOSPC}"


def test_a_manager_that_fails_to_close_is_a_write_fault_of_the_checkpoints(saved, tmp_path, monkeypatch):
    saver = checkpoint.Checkpointer(tmp_path)
    saver.save(saved.states[1], saved.trainer.config, saved.rows[:1])
    monkeypatch.setattr(saver.manager, "close", failing_after(saver.manager.close,
                                                              OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(WriteFault) as raised:
        saver.close()
    assert (raised.value.what, str(raised.value)) == ("the checkpoints", f"the checkpoints: {ENOSPC}")
