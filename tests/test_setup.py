"""The set-up: `make train` installs the runtime only, every install is pinned, and a failure says what to do.

uv and pip give the same versions when every package either installs is pinned in constraints.txt, the one
list of pins: the first test checks that of the environment this suite runs in (which `make test` set up).
"""

import re
import subprocess
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The venv's own tools (python -m venv puts them there), installed by neither uv nor pip's -c constraints.txt.
VENV_OWN = {"pip", "setuptools", "jaxintro"}


def normalize(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """constraints.txt's pins by normalized name."""
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pairs = (line.split("==") for line in lines if line.strip() and not line.startswith("#"))
    return {normalize(name): version for name, version in pairs}


def test_every_installed_package_is_pinned_at_its_installed_version():
    pinned = pins()
    # The environment's own site-packages: a test that imported setuptools puts its vendored copies on sys.path too.
    site = [p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages")]
    installed = {normalize(d.metadata["Name"]): d.version for d in distributions(path=site) if d.metadata["Name"]}
    # A local version (PyTorch's "+cpu" build) satisfies "==" of its public version, for pip and uv alike.
    off = {name: (version, pinned.get(name)) for name, version in installed.items()
           if name not in VENV_OWN and pinned.get(name) != version.split("+")[0]}
    assert off == {}, f"installed (version, pin) not matching constraints.txt: {off}"


def test_the_projects_own_pins_agree_with_constraints():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    exact = {normalize(name): version for name, version in (r.split("==") for r in wanted if "==" in r)}
    disagree = {name: (version, pins().get(name)) for name, version in exact.items() if pins().get(name) != version}
    assert exact and disagree == {}, f"pyproject.toml's (pin, constraints.txt's pin): {disagree}"
    assert "uv" in pins(), "uv, which installs everything, is pinned like the rest"


def test_the_runtime_takes_ranges_that_keep_what_a_notebook_image_holds():
    """`pip install jaxintro` beside a Colab or Kaggle image's NumPy 2.3.5 and Pillow 12.0.0 keeps them (pip replaces an
    installed version only when a requirement excludes it); constraints.txt's pins, the tested set, are inside too."""
    from packaging.requirements import Requirement

    runtime = {normalize(r.name): r for r in map(Requirement, tomllib.loads(
        (REPO / "pyproject.toml").read_text())["project"]["dependencies"])}
    assert not [str(r) for r in runtime.values() if "==" in str(r.specifier)], "the runtime asks for ranges, not pins"
    for name, version in {"numpy": "2.3.5", "pillow": "12.0.0", "matplotlib": "3.10.0", "jax": "0.10.2"}.items():
        assert runtime[name].specifier.contains(version), (name, version, str(runtime[name].specifier))
    outside = {name: pins()[name] for name, r in runtime.items() if not r.specifier.contains(pins()[name])}
    assert outside == {}, f"constraints.txt pins outside the runtime's ranges: {outside}"


def make_plan(target: str) -> str:
    """What `make TARGET` would run from scratch, without running it."""
    return subprocess.run(["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def test_make_train_installs_the_runtime_only_and_make_test_adds_its_extras():
    train = make_plan("train")
    assert 'scripts/venv.sh .venv "training" ""' in train
    assert "test" not in train.split("jaxintro train")[0] and "torch" not in train
    test = make_plan("test")
    assert 'scripts/venv.sh .venv "the tests" "test,torch,docs"' in test and "mutation" not in test
    assert 'scripts/venv.sh .venv "mutation testing" "test,torch,docs,mutation"' in make_plan("mutation")
    docs = make_plan("docs")
    assert 'scripts/venv.sh .venv "the documentation site" "docs"' in docs and "torch" not in docs
    assert "ipykernel install --sys-prefix" in make_plan("notebooks"), "the kernel lives in .venv, not user-wide"
    # The README's step 3 opens the notebook with .venv's JupyterLab: `make notebooks` installs it, pinned.
    notebooks = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["notebooks"]
    assert f"jupyterlab=={pins()['jupyterlab']}" in notebooks and '"the notebooks" "notebooks"' in make_plan("notebooks")
    for readme in ("README.md", "README.es.md"):
        assert "`make notebooks`" in (REPO / readme).read_text() and ".venv/bin/jupyter lab" in (REPO / readme).read_text()


def test_make_test_accelerator_runs_the_backend_tests_in_one_process():
    """No workers (one process holds a TPU chip), the marked tests only; an accelerator's own Python when named."""
    plan = make_plan("test-accelerator")
    assert ".venv/bin/python -m pytest -p no:xdist -m backend" in plan and " -n " not in plan
    words = accelerator_command()
    assert words[:7] == ["python3", "-m", "pytest", "-p", "no:xdist", "-m", "backend"]  # nothing installed first
    assert words[7:] and all(w.startswith("tests/test_") and w.endswith(".py") for w in words[7:])  # files only


def accelerator_command() -> list[str]:
    """What `make test-accelerator ACCEL_PYTHON=python3` runs, word by word."""
    return subprocess.run(["make", "--no-print-directory", "-n", "-B", "test-accelerator", "ACCEL_PYTHON=python3"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout.split()


def backend_tests(session: pytest.Session) -> str:
    """The node ids marked `backend` in the whole suite, one a line: this session's, when it collected every test
    file unfiltered (as `make test` does, in each worker), else from a collection of its own (10 s of CPU)."""
    option = session.config.option
    collected = {item.nodeid.split("::")[0] for item in session.items}
    if collected == {f"tests/{path.name}" for path in (REPO / "tests").glob("test_*.py")} and not (
            option.markexpr or option.keyword):
        return "\n".join(item.nodeid for item in session.items if item.get_closest_marker("backend"))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "backend", "-p", "no:randomly"],
                          cwd=REPO, capture_output=True, text=True, timeout=300).stdout


def test_the_backend_tests_cover_what_must_hold_everywhere(request):
    """The issue's list: the lesson's math, per-example gradients, resume = the uninterrupted run, the checkpoint
    round trip, member k = its single run, the speedrun's arithmetic."""
    listed = backend_tests(request.session)
    for covered in ("test_train.py::test_a_step_lowers_the_loss", "test_grads.py::test_vmap_equals_a_python_loop_of_grad",
                    "test_checkpoint.py::test_resume_is_bit_identical",
                    "test_checkpoint_units.py::test_the_newest_step_restores_whole_onto_one_device",
                    "test_members.py::test_members_start_stacked_each_as_its_single_run_bit_for_bit",
                    "test_speedrun.py::test_the_one_sided_test_is_students_t"):
        assert covered in listed, covered
    # `make test-accelerator` collects only some files (the others need Babel, Selenium): every backend test's.
    files = {line.split("::")[0] for line in listed.splitlines() if "::" in line}
    assert files and files <= set(accelerator_command()[7:]), files


def test_a_failed_set_up_says_what_failed_and_how_to_retry(tmp_path):
    done = subprocess.run(["bash", "scripts/venv.sh", str(tmp_path / "venv"), "training", ""], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(tmp_path / "no-such-python")})
    assert done.returncode == 1
    assert "failed: could not create a virtual environment" in done.stderr
    assert "run the same make command again" in done.stderr and "PIP=1" in done.stderr
