"""The pure core: loss and accuracy by hand, a step lowers the loss, loops agree, no recompilation."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import tqdm

from jaxintro.config import TrainConfig
from jaxintro.errors import ConfigError, TrainingDivergedError
from jaxintro.lesson import (accuracy, correct_count, cross_entropy, loss_and_logits, loss_fn, plan_epoch, scale_images,
                             step_key)
from jaxintro.members import ensemble_accuracy
from jaxintro.train import Trainer, fit


def log_rtol() -> float:
    """How close a float32 loss built from `exp` and `log` must be to the exact value: a CPU's are correctly rounded
    to about an ulp; a TPU's are fast approximations (0.4903905 for 0.4904146 on a TPU v5e, 5e-5 relative)."""
    return 1e-6 if jax.default_backend() == "cpu" else 2e-4


@pytest.mark.backend
def test_cross_entropy_by_hand():
    logits = jnp.array([[0.0, 0.0], [np.log(3.0), 0.0]])
    labels = jnp.array([0, 0])
    # -log(1/2) and -log(3/4)
    expected = (np.log(2.0) + np.log(4.0 / 3.0)) / 2
    assert float(cross_entropy(logits, labels)) == pytest.approx(expected, rel=log_rtol())


@pytest.mark.backend
def test_loss_fn_is_the_cross_entropy_of_the_models_logits_with_its_key():
    seen = []

    def apply(params, x, key):  # a linear "model" that records the dropout key it was given
        seen.append(key)
        return x @ params

    params = jnp.array([[np.log(3.0), 0.0], [0.0, 0.0]])
    x, y = jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([0, 0])
    key = jax.random.key(0)
    # Logits [log 3, 0] and [0, 0]: -log(3/4) and -log(1/2).
    assert float(loss_fn(params, apply, x, y, key)) == pytest.approx((np.log(4 / 3) + np.log(2)) / 2, rel=log_rtol())
    assert seen == [key]
    loss, logits = loss_and_logits(params, apply, x, y)
    np.testing.assert_allclose(logits, x @ params)
    assert seen[-1] is None  # no key: dropout off
    assert float(loss) == pytest.approx(float(loss_fn(params, apply, x, y)))


@pytest.mark.backend
def test_accuracy_by_hand():
    logits = jnp.array([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [0.0, 0.0, 5.0], [0.0, 1.0, 0.0]])
    assert float(accuracy(logits, jnp.array([1, 0, 0, 1]))) == 0.75


@pytest.mark.parametrize("x64", [False, True])
def test_scale_images(x64):
    with jax.enable_x64(x64):  # JAX_ENABLE_X64=1 makes float64 the default: the lesson still computes in float32
        out = scale_images(jnp.array([[0, 255, 51]], jnp.uint8))
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, [[0.0, 1.0, 0.2]], rtol=1e-6)


@pytest.mark.backend
def test_plan_epoch_drops_the_partial_batch_and_reshuffles():
    key = jax.random.key(0)
    key2, perm, dropout = plan_epoch(key, 1000, 128)
    assert perm.shape == (7, 128) and len(np.unique(perm)) == 7 * 128
    _, perm2, _ = plan_epoch(key2, 1000, 128)
    assert not np.array_equal(perm, perm2)
    # The key stream itself (a resume continues it): the epoch's key is split in three, the first carried on.
    carried, shuffle, drops = jax.random.split(key, 3)
    data = jax.random.key_data
    assert data(key2).tolist() == data(carried).tolist() != data(key).tolist()
    np.testing.assert_array_equal(perm.ravel(), jax.random.permutation(shuffle, 1000)[:7 * 128])
    assert data(dropout).tolist() == data(drops).tolist()


@pytest.mark.backend
def test_a_step_lowers_the_loss(tiny):
    config = TrainConfig(dataset="digits", batch_size=64, epochs=1)
    trainer = Trainer.create(config, tiny)
    state = trainer.init_state()
    step = jax.jit(trainer.step_fn())
    batch = (tiny.x_train[:64], tiny.y_train[:64])
    params, opt_state, first = step(state.params, state.opt_state, batch, None)
    for _ in range(5):
        params, opt_state, metrics = step(params, opt_state, batch, None)
    assert float(metrics["loss"]) < float(first["loss"])


def test_each_step_gets_its_own_dropout_key_and_none_without_dropout():
    key = jax.random.key(3)
    assert jax.random.key_data(step_key(key, 5, True)).tolist() == jax.random.key_data(jax.random.fold_in(key, 5)).tolist()
    assert step_key(key, 5, False) is None


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_a_step_reports_its_gradients_norm_and_uses_its_dropout_key(tiny, optimizer):
    trainer = Trainer.create(TrainConfig(dataset="digits", batch_size=64, dropout=0.5, optimizer=optimizer,
                                         record_grad_norm=True), tiny)
    state = trainer.init_state()
    x, y = tiny.x_train[:64], tiny.y_train[:64]
    step = jax.jit(trainer.step_fn())
    _, _, metrics = step(state.params, state.opt_state, (x, y), jax.random.key(1))
    grads = jax.grad(loss_fn)(state.params, trainer.model.apply, scale_images(x), y, jax.random.key(1))
    assert float(metrics["grad_norm"]) == pytest.approx(float(optax.tree.norm(grads)), rel=1e-5)
    _, _, other_mask = step(state.params, state.opt_state, (x, y), jax.random.key(2))
    _, _, no_dropout = step(state.params, state.opt_state, (x, y), None)
    assert len({float(m["loss"]) for m in (metrics, other_mask, no_dropout)}) == 3  # each key its own mask


def test_a_step_counts_the_correct_predictions_of_the_parameters_it_updates(tiny):
    trainer = Trainer.create(TrainConfig(dataset="digits", batch_size=64, epochs=1), tiny)
    state = trainer.init_state()
    x, y = tiny.x_train[:64], tiny.y_train[:64]
    before = np.argmax(trainer.model.apply(state.params, scale_images(x), None), axis=-1)
    params, _, metrics = jax.jit(trainer.step_fn())(state.params, state.opt_state, (x, y), None)
    after = np.argmax(trainer.model.apply(params, scale_images(x), None), axis=-1)
    assert int(metrics["correct"]) == int(np.sum(before == y))  # the loss's own logits, before the update
    assert np.sum(before == y) != np.sum(after == y)  # (the update does change the count)


def test_the_epochs_training_accuracy_is_its_running_accuracy(tiny):
    config = TrainConfig(dataset="digits", batch_size=32, epochs=2)
    result = fit(config, tiny, log=lambda _: None)
    steps = len(tiny.x_train) // 32
    for row, metrics in zip(result.history, result.step_metrics):
        assert metrics["correct"].shape == (steps,)
        assert row.train_accuracy == int(np.sum(metrics["correct"])) / (steps * 32)
    assert result.history[1].train_accuracy > result.history[0].train_accuracy


@pytest.mark.backend
def test_training_learns_the_synthetic_task(tiny):
    result = fit(TrainConfig(epochs=5, batch_size=32), tiny, log=lambda _: None)
    losses = [row.loss for row in result.history]
    assert losses[-1] < losses[0] / 3
    assert result.history[-1].test_accuracy > 0.9


def test_the_gradient_norm_is_kept_only_where_the_run_records_it(tiny):
    """A step keeps its loss and correct count; the gradient's norm, one more pass over every gradient, only with
    record_grad_norm, and then each epoch's row holds its largest."""
    config = TrainConfig(epochs=1, batch_size=64)
    plain = fit(config, tiny, log=lambda _: None)
    assert set(plain.step_metrics[0]) == {"loss", "correct"}
    assert "max_grad_norm" not in plain.history[0].as_row()
    recorded = fit(dataclasses.replace(config, record_grad_norm=True), tiny, log=lambda _: None)
    norms = recorded.step_metrics[0]["grad_norm"]
    assert norms.shape == plain.step_metrics[0]["loss"].shape and (norms > 0).all()
    assert recorded.history[0].as_row()["max_grad_norm"] == pytest.approx(float(np.max(norms)))
    # The same training: the norm is read off the gradients, never fed back (another program: to float32's rounding).
    assert [r.loss for r in recorded.history] == pytest.approx([r.loss for r in plain.history], rel=1e-6)


def test_the_default_step_makes_no_pass_for_the_norm_and_a_clipping_step_shares_it(tiny):
    """XLA's cost analysis of the compiled steps: the norm is one more read of the gradients (more bytes accessed), and
    none more in a chain that clips by it, where the two identical reductions are one."""
    from jaxintro.profile import cost_numbers

    def bytes_accessed(**changes) -> float:
        trainer = Trainer.create(TrainConfig(dataset="digits", batch_size=64, **changes), tiny)
        compiled = trainer.compile_step(trainer.init_state(), (tiny.x_train[:64], tiny.y_train[:64]))
        return cost_numbers(compiled.cost_analysis())["bytes accessed"]

    params = 64 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10
    plain, recorded = bytes_accessed(), bytes_accessed(record_grad_norm=True)
    assert recorded - plain >= 4 * params  # at least one float32 read of every gradient
    clipped, clipped_recorded = bytes_accessed(clip_norm=1.0), bytes_accessed(clip_norm=1.0, record_grad_norm=True)
    assert clipped_recorded - clipped < 4 * params


@pytest.mark.backend
def test_same_seed_same_metrics_to_the_last_digit(tiny):
    config = TrainConfig(epochs=2, batch_size=32, seed=7)
    a = fit(config, tiny, log=lambda _: None)
    b = fit(config, tiny, log=lambda _: None)
    assert [r.loss for r in a.history] == [r.loss for r in b.history]
    assert [r.test_accuracy for r in a.history] == [r.test_accuracy for r in b.history]
    for x, y in zip(jax.tree.leaves(a.state.params), jax.tree.leaves(b.state.params)):
        np.testing.assert_array_equal(x, y)
    c = fit(dataclasses.replace(config, seed=8), tiny, log=lambda _: None)
    assert c.history[0].loss != a.history[0].loss


@pytest.mark.backend
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_scan_and_python_loops_train_the_same_function(tiny, dropout):
    config = TrainConfig(epochs=2, batch_size=32, dropout=dropout)
    scan = fit(config, tiny, log=lambda _: None)
    loop = fit(dataclasses.replace(config, loop="python"), tiny, log=lambda _: None)
    assert scan.history[0].loss == pytest.approx(loop.history[0].loss, abs=5e-5)
    for x, y in zip(jax.tree.leaves(scan.state.params), jax.tree.leaves(loop.state.params)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


class CompileCounter:
    """Counts XLA compilations by listening to JAX's compile-time events."""

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._on)

    def _on(self, event: str, duration: float, **_) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.count += 1


_counter = None


def compile_counter() -> CompileCounter:
    global _counter
    _counter = _counter or CompileCounter()
    return _counter


@pytest.mark.parametrize("loop", ["scan", "python"])
def test_no_recompilation_after_the_first_epoch(tiny, loop):
    counter = compile_counter()
    compiles = []

    def on_epoch(state, row):
        compiles.append(counter.count)

    fit(TrainConfig(epochs=4, batch_size=30, loop=loop, seed=11), tiny, on_epoch=on_epoch, log=lambda _: None)
    # Epoch 1 compiles (step, eval) before its hook runs; epochs 2-4 must reuse exactly those programs,
    # epoch 2 included (the likeliest recompile: the first call on the outputs of a donated call).
    assert compiles[0] > 0, "the counter saw no compilation at all"
    assert compiles[0] == compiles[1] == compiles[2] == compiles[3], compiles


@pytest.mark.parametrize("batches", [1, 3])
def test_the_lessons_loop_reports_each_step_and_donates_the_state(tiny, batches):
    """`--loop python`: one progress tick per step (the bar counts steps), every step's metrics in order, and the
    jitted step consumes the parameters and optimizer state it is given (updated in place of them, as in scan)."""
    config = TrainConfig(epochs=1, batch_size=len(tiny.x_train) // batches, loop="python")
    trainer = Trainer.create(config, tiny)
    state, (x, y), _test = trainer.place(trainer.init_state(), tiny)
    epoch = trainer.compile_epoch(state, (x, y))
    ticks = []
    after, metrics = epoch.run(state, on_step=ticks.append)
    assert ticks == [1] * batches and after.epoch == 1
    assert {name: values.shape for name, values in metrics.items()} == {name: (batches,) for name in metrics}
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves((state.params, state.opt_state)))
    assert not state.key.is_deleted()  # the next epoch's shuffle comes from it


def test_the_compiled_epoch_donates_the_state_but_not_the_key_or_the_data(tiny):
    config = TrainConfig(epochs=1, batch_size=64)
    trainer = Trainer.create(config, tiny)
    state, train, _test = trainer.place(trainer.init_state(), tiny)
    trainer.compile_epoch(state, train).run(state)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves((state.params, state.opt_state)))
    assert not state.key.is_deleted() and not any(array.is_deleted() for array in train)


class FakeBar:
    """Stands in for tqdm in `fit`: records what the bar was asked to show."""

    made: list[FakeBar] = []

    def __init__(self, *, total: int, disable: bool, leave: bool, unit: str) -> None:
        self.total, self.disable, self.leave, self.unit = total, disable, leave, unit
        self.ticks: list[int] = []
        self.closed = False
        FakeBar.made.append(self)

    def update(self, n: int = 1) -> None:
        self.ticks.append(n)

    def close(self) -> None:
        self.closed = True

    external_write_mode = staticmethod(contextlib.nullcontext)


@pytest.mark.parametrize("loop", ["scan", "python"])
@pytest.mark.parametrize("progress", [False, True])
def test_fit_draws_its_bar_per_step_or_per_epoch(tiny, monkeypatch, loop, progress):
    """The bar counts the lesson loop's steps, or the compiled loop's epochs, and is shown only when asked."""
    monkeypatch.setattr(tqdm, "tqdm", FakeBar)
    FakeBar.made.clear()
    config = TrainConfig(epochs=2, batch_size=50, loop=loop)
    kwargs = {"progress": True} if progress else {}  # fit's default: no bar
    fit(config, tiny, log=lambda _: None, **kwargs)
    steps = len(tiny.x_train) // 50
    [bar] = FakeBar.made
    assert (bar.disable, bar.leave, bar.closed) == (not progress, False, True)
    if loop == "python":
        assert (bar.total, bar.unit, bar.ticks) == (2 * steps, "step", ([1] * steps + [0]) * 2)
    else:
        assert (bar.total, bar.unit, bar.ticks) == (2, "epoch", [1, 1])


@pytest.mark.parametrize("stop_after", [1, 3])
def test_fit_reports_its_seconds_and_whether_it_stopped_early(tiny, stop_after, monkeypatch):
    """Each phase's seconds lie within the call's own time; a run asked to stop before its last epoch says so."""
    config = TrainConfig(epochs=3, batch_size=50)
    evaluations = []  # the seconds of each evaluation, every epoch's: the eval seconds hold them all

    jit_eval = Trainer.jit_eval

    def timed_eval(self):
        score = jit_eval(self)

        def timed(*args):
            start = time.perf_counter()
            out = jax.block_until_ready(score(*args))
            evaluations.append(time.perf_counter() - start)
            return out
        return timed

    monkeypatch.setattr(Trainer, "jit_eval", timed_eval)
    start = time.perf_counter()
    result = fit(config, tiny, log=lambda _: None, should_stop=lambda epoch: epoch == stop_after)
    elapsed = time.perf_counter() - start
    assert len(evaluations) == stop_after and result.eval_seconds >= sum(evaluations)
    assert len(result.history) == stop_after and result.stopped_early == (stop_after < 3)
    assert result.stopped_early is (stop_after < 3)
    assert result.train_seconds == sum(row.seconds for row in result.history)
    phases = (result.init_seconds, result.compile_seconds, result.train_seconds, result.eval_seconds)
    assert all(seconds > 0 for seconds in phases) and sum(phases) < elapsed
    samples = stop_after * (len(tiny.x_train) // 50) * 50
    assert result.samples_per_second == samples / result.train_seconds


def test_a_member_that_diverges_leaves_the_ensemble_in_the_epoch_it_diverges_and_after(tiny):
    # SGD at lr 3: on the tiny set some members explode within 4 epochs and others train on (here: member 2, in
    # epoch 3). Which ones, and when, is read from the run: the rows say who trained, the warnings when each stopped.
    config = TrainConfig(dataset="digits", optimizer="sgd", lr=3.0, seeds=4, epochs=4)
    trainer = Trainer.create(config, tiny)
    seen = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = fit(config, tiny, log=lambda line: None, trainer=trainer,
                     on_epoch=lambda state, row: seen.append((row, jax.device_get(state.params))))
    assert [row for row, _ in seen] == result.history
    trained = [[k for k, acc in enumerate(row.members["test_accuracy"]) if not np.isnan(acc)] for row, _ in seen]
    first = {k: next(i + 1 for i, members in enumerate(trained) if k not in members)
             for k in range(4) if k not in trained[-1]}
    assert first and trained[-1] and max(first.values()) > 1, "the case: a member diverges after epoch 1"
    assert all(set(later) <= set(earlier) for earlier, later in zip(trained, trained[1:]))  # diverged stays out
    told = sorted(str(w.message) for w in said if "diverged" in str(w.message))
    assert len(told) == len(first)  # each member warned about once, in the epoch it diverged
    for (k, epoch), text in zip(sorted(first.items()), told):
        assert text.startswith(f"member {k} diverged: loss reached ") and f" at epoch {epoch}, step " in text
        assert 1 <= int(text.split(f" at epoch {epoch}, step ")[1].split()[0]) <= trainer.steps_per_epoch
    for (row, params), members in zip(seen, trained):  # the ensemble of those that trained, scored on its own
        assert row.ensemble_test_accuracy == ensemble_accuracy(trainer.model, params, members, tiny.x_test, tiny.y_test)


def test_one_model_that_diverges_ends_the_run_naming_its_epoch_and_step(tiny):
    config = TrainConfig(dataset="digits", optimizer="sgd", lr=30.0, epochs=2)  # explodes within these epochs
    trainer = Trainer.create(config, tiny)
    with pytest.raises(TrainingDivergedError) as raised:
        fit(config, tiny, log=lambda line: None, trainer=trainer)
    text = str(raised.value)
    assert text.startswith("loss reached ") and " (finite, but exploded) at epoch " in text
    epoch, place = text.split(" at epoch ")[1].split(";")[0].split(", step ")
    step, of = place.split(" of ")
    assert int(epoch) in (1, 2) and 1 <= int(step) <= trainer.steps_per_epoch == int(of)
    assert text.endswith("; lower --lr, add --clip-norm 1.0, or use --optimizer adam")


def test_each_epoch_s_line_is_logged_with_the_rate_at_its_last_step(tiny):
    """A row's learning rate is the schedule's at the epoch's last step (warm-up, then cosine decay, from optax)."""
    config = TrainConfig(schedule="warmup-cosine", warmup_steps=3, epochs=3, batch_size=128)
    steps = len(tiny.x_train) // 128
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.lr, warmup_steps=3, decay_steps=3 * steps)
    logged = []
    result = fit(config, tiny, log=logged.append)
    assert [row.learning_rate for row in result.history] == [float(schedule(e * steps - 1)) for e in (1, 2, 3)]
    assert logged == [row.line(3) for row in result.history]


def test_a_members_run_counts_one_model_s_parameters_and_every_member_s_samples(tiny):
    config = TrainConfig(dataset="digits", seeds=2, epochs=1, batch_size=128)
    result = fit(config, tiny, log=lambda _: None)
    sizes = (tiny.x_train.shape[1], *config.hidden, 10)  # one model's layers: weights and biases
    assert type(result.param_count) is int
    assert result.param_count == sum(n * m + m for n, m in zip(sizes, sizes[1:]))
    assert result.samples_per_second == (len(tiny.x_train) // 128) * 128 * 2 / result.train_seconds


def test_a_run_already_at_its_last_epoch_trains_nothing_and_has_no_rate(tiny):
    config = TrainConfig(dataset="digits", epochs=2)
    trainer = Trainer.create(config, tiny)
    result = fit(config, tiny, state=trainer.init_state()._replace(epoch=2), log=lambda _: None, trainer=trainer)
    assert result.history == [] and result.train_seconds == 0.0 and math.isnan(result.samples_per_second)


@pytest.mark.parametrize("loop", ["scan", "python"])
def test_a_compiled_epoch_counts_the_epoch_and_names_the_programs_it_runs(loop, tiny):
    config = TrainConfig(dataset="digits", epochs=2, loop=loop)
    trainer = Trainer.create(config, tiny)
    state, train, _test = trainer.place(trainer.init_state(), tiny)
    epoch = trainer.compile_epoch(state, train)
    assert all(isinstance(program, jax.stages.Compiled) for program in epoch.programs)
    # The shuffle, its own small program in both loops, then the epoch or the lesson's step.
    names = [program.as_text().split(",")[0].removeprefix("HloModule ") for program in epoch.programs]
    assert names == ["jit_plan_epoch", "jit_train_epoch" if loop == "scan" else "jit_train_step"]
    assert "sort" in epoch.programs[0].as_text() and "sort" not in epoch.programs[1].as_text()
    after = epoch.run(state)[0]  # (the scan epoch donates the state it is given)
    assert after.epoch == 1 and epoch.run(after._replace(epoch=4))[0].epoch == 5  # what a checkpoint is numbered by


def test_the_shuffle_is_one_program_another_model_or_rate_finds_in_the_cache(tiny, tmp_path):
    """Another model, width, optimizer or rate compiles another epoch, never the shuffle again (on a TPU its sort is
    most of the epoch's compile): the shuffle is its own program, which depends on the data's size and the batch."""
    from jax.experimental.compilation_cache import compilation_cache

    from jaxintro.layout import compile_plan
    from jaxintro.runtime import compile_cache_counts, enable_compile_cache

    compilation_cache.reset_cache()
    jax.config.update("jax_enable_compilation_cache", True)
    enable_compile_cache(tmp_path / "xla")
    misses = []
    for config in (TrainConfig(dataset="digits"), TrainConfig(dataset="digits", hidden=(16,), lr=0.01),
                   TrainConfig(dataset="digits", model="linen", optimizer="sgd")):
        trainer = Trainer.create(config, tiny)
        state, train, _test = trainer.place(trainer.init_state(), tiny)
        before = compile_cache_counts()
        compile_plan(trainer.layout.plan_fn(len(train[0])), state.key)
        after = compile_cache_counts()
        misses.append((after["misses"] - before["misses"], after["hits"] - before["hits"]))
    assert misses == [(1, 0), (0, 1), (0, 1)]


@pytest.mark.parametrize("seeds", [1, 3])
def test_a_new_rate_weight_decay_or_clip_norm_draws_the_initial_weights_with_the_cached_program(seeds, tiny, tmp_path):
    """The initial weights' program takes a seed, not the optimizer: hyperparameters baked into it made every new
    --lr compile it again (0.8 s on the CPU), where the epoch's own program already came from the cache. The
    optimizer's state is a program of its own whose inputs are the hyperparameters' values (`optim.init_with_inputs`):
    new values compile nothing there either. (Clipping turned on where it was off is another optimizer: it compiles
    anew, as the epoch does.)"""
    from jax.experimental.compilation_cache import compilation_cache

    from jaxintro.layout import _draw_program
    from jaxintro.runtime import compile_cache_counts, enable_compile_cache

    compilation_cache.reset_cache()
    jax.config.update("jax_enable_compilation_cache", True)
    enable_compile_cache(tmp_path / "xla")
    # Traced afresh, so that the first run's draw reaches the persistent cache (a miss there); the second run's model
    # is the same `Model` (`model_for`), whose draw this process then holds: what a new rate must not change is that
    # nothing of its init is compiled or looked up anew, and its optimizer state is built outside the draw.
    _draw_program.cache_clear()
    misses = []
    for config in (TrainConfig(dataset="digits", optimizer="adamw", seeds=seeds, clip_norm=0.5),
                   TrainConfig(dataset="digits", optimizer="adamw", seeds=seeds, lr=0.01, weight_decay=0.1,
                               clip_norm=1.0)):
        trainer = Trainer.create(config, tiny)
        before = compile_cache_counts()
        trainer.init_state()
        misses.append(compile_cache_counts()["misses"] - before["misses"])
    assert misses[0] >= 1 and misses[1] == 0, misses


def test_a_batch_larger_than_the_training_set_is_refused_with_both_sizes(tiny):
    count = len(tiny.x_train)
    with pytest.raises(ConfigError) as raised:
        Trainer.create(TrainConfig(dataset="digits", batch_size=count + 1), tiny)
    assert str(raised.value) == (f"--batch-size {count + 1} is larger than the {count} training images of "
                                 f"{tiny.name}; use at most {count}")


def test_correct_counts_are_per_leading_row_of_logits():
    # Two members' logits for three images: each row is counted on its own (the members' layout scores so).
    logits = jnp.array([[[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]], [[0.1, 0.9], [0.3, 0.7], [0.8, 0.2]]])
    labels = jnp.array([0, 1, 1])
    np.testing.assert_array_equal(correct_count(logits, labels), [2, 1])
    assert correct_count(logits[0], labels) == 2


def test_the_optimizer_s_schedule_spans_every_step_of_the_run(tiny):
    # Warm-up then cosine decay over epochs x steps: the rate Trainer.create's optimizer applies, step by step.
    config = TrainConfig(dataset="digits", optimizer="sgd", schedule="warmup-cosine", warmup_steps=2, epochs=3)
    trainer = Trainer.create(config, tiny)
    total = trainer.steps_per_epoch * 3
    params = {"w": jnp.zeros(2)}
    state = trainer.tx.init(params)
    for count in range(total):
        updates, state = trainer.tx.update({"w": jnp.ones(2)}, state, params)
        rate = optax.warmup_cosine_decay_schedule(0.0, config.lr, warmup_steps=2, decay_steps=total)(count)
        np.testing.assert_allclose(updates["w"], -rate * jnp.ones(2), rtol=1e-6, atol=1e-9)


def test_held_out_images_are_the_last_of_the_training_set_and_leave_at_least_a_batch():
    from jaxintro.data import Dataset
    from jaxintro.train import hold_out

    x = np.arange(50, dtype=np.uint8).reshape(50, 1)
    dataset = Dataset("toy", x, np.arange(50, dtype=np.int32), x[:5], np.arange(5, dtype=np.int32), ("0",), (1, 1), "t")
    trained, (x_val, y_val) = hold_out(dataset, 10, batch_size=8)
    assert trained.x_train.tolist() == x[:40].tolist() and x_val.tolist() == x[40:].tolist()
    assert y_val.tolist() == list(range(40, 50)) and trained.x_test is dataset.x_test
    assert hold_out(dataset, 0, batch_size=8) == (dataset, None)
    with pytest.raises(ConfigError, match=r"--validation 45 leaves 5 of the 50 training images of toy, fewer than a "
                                          r"batch \(8\); hold out at most 42"):
        hold_out(dataset, 45, batch_size=8)


@pytest.mark.parametrize("optimizer,schedule,clip_norm,lr_grid", [
    ("adam", "constant", None, ()), ("adamw", "warmup-cosine", 1.0, ()), ("sgd", "warmup-cosine", None, ()),
    ("adamw", "constant", 0.5, (1e-3, 3e-3))])
def test_the_optimizers_state_as_one_program_is_the_optimizers_own_init(optimizer, schedule, clip_norm, lr_grid):
    """`optim.init_with_inputs` builds the state from the hyperparameters' values as inputs, with a schedule of any
    length (the state must not depend on it): it must equal, leaf for leaf, dtype and all, the run's own optimizer's
    `init` (a state that read the schedule's length would fail here)."""
    from jaxintro.optim import build_optimizer, hyperparams, init_with_inputs

    config = TrainConfig(optimizer=optimizer, schedule=schedule, clip_norm=clip_norm, lr_grid=lr_grid, lr=2e-3,
                         weight_decay=0.05)
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    got = jax.jit(init_with_inputs(config))(params, hyperparams(config))
    want = build_optimizer(config, 4680).init(params)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)
