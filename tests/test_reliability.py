"""Faults and bad input: each fails safely with a clear message, and nothing is lost or half-written."""

from __future__ import annotations

import threading
import tracemalloc
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxintro import checkpoint, claims
from jaxintro.cli import main
from jaxintro.config import TrainConfig
from jaxintro.data import load_dataset
from jaxintro.idx import parse_idx
from jaxintro.errors import DataError
from jaxintro.claims import claim_run_dir
from jaxintro.train import Trainer

# ---------------------------------------------------------------- data files (each fault's message: test_data.py)


@pytest.mark.parametrize("dims", [
    (0, 3484, 3484, 3690, 25740507),   # found by the fuzzer: NumPy cannot even describe this empty shape
    (65536, 65536, 65536, 65536),      # 2**64 elements: an int64 product would wrap to 0 and match
])
def test_hostile_shapes_found_by_fuzzing(dims):
    raw = bytes([0, 0, 0x0E, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims)
    with pytest.raises(DataError):
        parse_idx(raw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(raw):
    try:
        out = parse_idx(raw)
    except DataError:
        return
    assert out.size * out.itemsize == len(raw) - 4 - 4 * raw[3]


@settings(max_examples=300, deadline=None)
@given(type_code=st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x07, 0xFF]),
       dims=st.lists(st.integers(0, 2**32 - 1), min_size=0, max_size=5),
       payload=st.binary(max_size=256))
def test_fuzz_headers_never_allocate_beyond_the_file(type_code, dims, payload):
    raw = bytes([0, 0, type_code, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims) + payload
    tracemalloc.start()
    try:
        out = parse_idx(raw)
        assert int(np.prod(out.shape, dtype=np.int64)) * out.itemsize == len(payload)
    except DataError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    # Huge declared shapes (up to 2^160 bytes) must be refused before any allocation of that size.
    assert peak < 10 * len(raw) + 64 * 1024


# ---------------------------------------------------------------- command line


@pytest.mark.parametrize("argv, message", [
    (["train", "--run-dir", "{file}/run"], "--run-dir"),
    (["bench", "--out", "{file}/x"], "--out"),
    (["grads", "--out", "{file}/x"], "--out"),
    (["experiment", "dropout", "--out", "{file}/x"], "--out"),
    (["experiment", "dropout", "--rate", "1.5"], "--rate"),
    (["experiment", "clipping", "--clip", "nan"], "--clip"),
    (["grads", "--dataset", "digits", "--n", "100000", "--out", "{tmp}/g"], "more than the 360 test images"),
    (["train", "--dataset", "digits", "--hidden", "100000"], "--hidden"),
    (["evaluate", "{tmp}/none"], "none does not exist"),
])
def test_unusable_paths_and_values_are_refused(argv, message, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a folder")
    argv = [a.format(file=blocker, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def run_concurrently(fn, n: int) -> list:
    """Call `fn` from `n` threads at once; return each result or the exception it raised."""
    results: list = []
    barrier = threading.Barrier(n)

    def call():
        barrier.wait()
        try:
            results.append(fn())
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_two_runs_started_at_once_never_share_a_folder(tmp_path):
    claimed = run_concurrently(lambda: claim_run_dir(None, root=tmp_path), 24)
    assert all(isinstance(c, Path) for c in claimed) and len(set(claimed)) == 24


def test_the_same_explicit_run_dir_is_claimed_once(tmp_path):
    results = run_concurrently(lambda: claim_run_dir(tmp_path / "run"), 8)
    assert sum(isinstance(r, Path) for r in results) == 1


def test_a_claim_waits_while_another_holds_the_folders_lock(tmp_path):
    # The race above is caught only now and then without the lock; this is the lock itself, every time.
    folder = tmp_path / "run"
    folder.mkdir()
    claimed = threading.Event()
    claimer = threading.Thread(target=lambda: (claim_run_dir(folder), claimed.set()))
    with claims.locked(folder):  # what claim_run_dir takes: flock on the folder
        claimer.start()
        assert not claimed.wait(0.5), "the claim went ahead while another process held the folder's lock"
    assert claimed.wait(10)
    claimer.join(timeout=10)


# ---------------------------------------------------------------- training faults


def test_a_diverging_loss_stops_naming_epoch_and_step_and_leaves_a_reusable_folder(tmp_path, capsys):
    # A fresh run that diverges in its first epoch: SGD at lr 1e6, its loss past 1e6 at the second step (a NaN
    # comes later, and the run stops at the first step that diverged: an injected inf is tested below).
    run = tmp_path / "nan"
    code = main(["train", "--dataset", "digits", "--epochs", "3", "--optimizer", "sgd", "--lr", "1e6",
                 "--run-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 1
    assert "training diverged: loss reached" in err and "(finite, but exploded) at epoch 1, step 2 of 11" in err
    assert "lower --lr" in err
    assert "no epoch finished" in err
    # No epoch finished, so nothing of the run is kept: the corrected command uses the same folder.
    assert not run.exists()
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run)]) == 0


def poison_from(monkeypatch, first: int) -> None:
    """From epoch `first` on, the training loss becomes inf at step 2 (what `check_finite` sees)."""
    import jaxintro.layout as layout

    real = layout.check_finite

    def poisoned(metrics, unseen_loss, epoch, steps, **kwargs):
        if epoch >= first:
            metrics = {**metrics, "loss": np.array([1.0, np.inf, np.nan])}
        return real(metrics, unseen_loss, epoch, steps, **kwargs)

    monkeypatch.setattr(layout, "check_finite", poisoned)


def test_divergence_after_good_epochs_keeps_them(tmp_path, capsys, monkeypatch):
    """Resume a good run with a learning rate that blows up: the old epochs stay restorable."""
    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits", "--epochs", "2", "--save-every", "0", "--run-dir", str(run)]) == 0
    poison_from(monkeypatch, 3)
    capsys.readouterr()
    before = (run / "metrics.jsonl").read_text()
    assert main(["train", "--resume", str(run), "--epochs", "4"]) == 1
    err = capsys.readouterr().err
    assert "loss became inf at epoch 3, step 2" in err and "last good checkpoint is epoch 2" in err
    # The run at risk is the resumed one: its checkpoints and metrics are as they were after epoch 2.
    assert checkpoint.read_meta(run)["epoch"] == 2
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [1, 2]
    assert (run / "metrics.jsonl").read_text() == before


def test_the_save_policy_saves_the_last_epoch_and_the_last_finite_one_before_a_divergence(tmp_path, capsys,
                                                                                          monkeypatch):
    """`--save-every`: no save while training is young; the end is saved, and so is the epoch before a divergence."""
    def saved(run):
        return sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())

    whole = tmp_path / "whole"  # no save is due in 1,000 seconds: only the last epoch
    assert main(["train", "--dataset", "digits", "--epochs", "3", "--save-every", "1000", "--run-dir", str(whole)]) == 0
    assert saved(whole) == [3] and len((whole / "metrics.jsonl").read_text().splitlines()) == 3
    poison_from(monkeypatch, 4)
    run = tmp_path / "diverged"
    assert main(["train", "--dataset", "digits", "--epochs", "6", "--save-every", "1000", "--run-dir", str(run)]) == 1
    assert "loss became inf at epoch 4, step 2" in capsys.readouterr().err
    # Epoch 3 was held on the device while epoch 4 trained (which donates the state): saved as it was.
    assert saved(run) == [3] and checkpoint.read_meta(run)["epoch"] == 3
    trainer = Trainer.create(checkpoint.config_from_meta(run, checkpoint.read_meta(run)), load_dataset("digits"))
    template = checkpoint.abstract_state(trainer.model, trainer.tx)
    (held, _meta), (straight, _meta) = checkpoint.restore(run, template), checkpoint.restore(whole, template)
    pairs = zip(jax.tree.leaves((held.params, held.opt_state)), jax.tree.leaves((straight.params, straight.opt_state)))
    assert all(np.array_equal(a, b) for a, b in pairs)  # the same seed's epoch 3, bit for bit


def test_without_room_for_a_held_copy_every_epoch_is_saved(tmp_path, monkeypatch):
    """The held copy is memory the estimate does not plan: where it would not fit beside training, the saver saves
    every epoch instead, so the last finite epoch is on disk without one."""
    from jaxintro import memory

    config = TrainConfig(dataset="digits", epochs=3)
    sizes, images = (64, 256, 128, 10), 1437
    need = memory.estimate_memory_bytes(config, sizes, images)
    tight = int(need / memory.MEMORY_SHARE) + 1  # training fits; a copy of its parameters and moments does not
    assert not memory.held_copy_fits(config, sizes, images, available=tight)
    assert memory.held_copy_fits(config, sizes, images, available=4 * tight)
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: tight)
    run = tmp_path / "tight"
    assert main(["train", "--dataset", "digits", "--epochs", "3", "--save-every", "1000", "--run-dir", str(run)]) == 0
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [1, 2, 3]


def test_a_finite_explosion_is_a_divergence_as_a_nan_is(tmp_path, capsys):
    """A loss past 1e6 (or a test loss that overflows) is a divergence even while finite: the weights mean nothing."""
    run = tmp_path / "r"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--lr", "1e6", "--run-dir", str(run)]) == 1
    err = capsys.readouterr().err
    assert "training diverged: loss reached" in err and "(finite, but exploded) at epoch 1, step" in err
    assert "lower --lr" in err and len(err.strip().splitlines()) == 1 and not run.exists()


def test_missing_checkpoint_files_are_a_clear_error(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--run-dir", str(run)]) == 0
    import shutil

    shutil.rmtree(run / "checkpoints" / "1" / "state")
    capsys.readouterr()
    for argv in (["evaluate", str(run)], ["train", "--resume", str(run), "--epochs", "2"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "no checkpoint could be restored (tried 1" in err, err


def test_one_rule_of_divergence_for_one_model_and_for_members():
    """NaN, infinite, or finite past 1e6: the first such step is where a model diverged; a test loss that overflows
    is a divergence too. One model ends the run; a member is left out, and all of them is the one model's error."""
    from jaxintro.errors import TrainingDivergedError
    from jaxintro.record import EXPLODED_LOSS, check_finite, check_members_finite, first_divergence

    assert first_divergence(np.array([2.3, 1.0, EXPLODED_LOSS])) is None  # at the bound: still training
    assert first_divergence(np.array([2.3, 2 * EXPLODED_LOSS, np.nan])) == 1
    assert first_divergence(np.array([2.3, np.nan])) == 1 and first_divergence(np.array([-np.inf])) == 0
    with pytest.raises(TrainingDivergedError, match=r"loss reached 2e\+06 \(finite, but exploded\) at epoch 4, step 2 "
                                                    r"of 9; lower --lr"):
        check_finite({"loss": np.array([1.0, 2e6])}, 10.0, 4, 9)
    with pytest.raises(TrainingDivergedError, match="the test loss became inf after epoch 4"):
        check_finite({"loss": np.array([1.0, 0.5])}, np.inf, 4, 9)
    diverged: set[int] = set()
    losses = np.array([[1.0, 0.9], [1.0, 3e7], [1.0, 0.8]])
    with pytest.warns(RuntimeWarning) as said:
        check_members_finite({"loss": losses}, np.array([5.0, 6.0, np.inf, 7.0]), 2, 2, diverged)
    assert diverged == {1, 2}  # member 1 exploded, member 2's test loss overflowed; the last row is the ensemble
    assert [str(w.message).split(";")[0] for w in said] == [
        "member 1 diverged: loss reached 3e+07 (finite, but exploded) at epoch 2, step 2 of 2",
        "member 2 diverged: the test loss became inf after epoch 2"]
    with pytest.raises(TrainingDivergedError, match="loss reached"):
        check_members_finite({"loss": np.full((2, 2), 1e9)}, np.ones(3), 1, 2, set())
