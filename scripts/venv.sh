#!/usr/bin/env bash
# Set up .venv for one make target: jaxintro and the pinned dependencies that target needs, nothing more.
#
#   scripts/venv.sh VENV NAME EXTRAS
#
# NAME says what the set-up is for; EXTRAS are pyproject.toml's extras, comma-separated ("" for the runtime
# only). Every install reads constraints.txt, the one list of pins. It goes through uv (itself pinned there,
# bootstrapped by the venv's own pip) unless PIP=1 is set or uv cannot be installed; both give the same
# versions because every package either installs is pinned (tests/test_setup.py checks it).
set -euo pipefail

venv="$1" name="$2" extras="$3"
python="$venv/bin/python"
log="$venv/install.log"
spec=(-e .)
[ -n "$extras" ] && spec=(-e ".[$extras]")

fail() {
    echo "Setting up $venv for $name failed: $1 (its output: $log)." >&2
    echo "Fix the cause and run the same make command again; 'make clean' starts the set-up over," >&2
    echo "and PIP=1 (e.g. 'make train PIP=1') installs with pip instead of uv." >&2
    exit 1
}

# What a new user sees of the installer: its phases as they happen (uv: resolved, prepared, installed) and
# any warning or error, but not the list of every package added (the log keeps it), nor pip's notes on this
# machine's empty local index folders.
show() { grep --line-buffered -v -E '^ [+~-] |^ Downloaded |^WARNING: Location .* is ignored|^(Collecting|Downloading|Requirement already|  )' || true; }

size() {
    case "$extras" in
        "") echo "JAX, Optax, Flax, Equinox, Orbax, Matplotlib and scikit-learn: about 1 GB, 10 to 30 s" ;;
        *torch*) echo "the runtime and the extras $extras (PyTorch's CPU build, the test tools): about 2 GB, under a minute" ;;
        *) echo "the runtime and the extras $extras" ;;
    esac
}

if [ ! -x "$python" ]; then
    "${PYTHON:-python3}" -m venv "$venv" || fail "could not create a virtual environment with ${PYTHON:-python3} -m venv"
fi

installer=pip
if [ "${PIP:-0}" != 1 ]; then
    if [ ! -x "$venv/bin/uv" ]; then
        "$python" -m pip install --quiet --disable-pip-version-check "$(grep -E '^uv==' constraints.txt)" 2>&1 | show ||
            true
    fi
    [ -x "$venv/bin/uv" ] && installer=uv || echo "uv could not be installed: installing with pip instead (slower)."
fi

echo "Setting up $venv for $name with $installer: $(size)."
start=$SECONDS
if [ "$installer" = uv ]; then
    # uv does not read pip's settings: a local wheel folder named in PIP_FIND_LINKS (where PyTorch's CPU
    # build may lie) is passed on, so that uv takes the same file as pip.
    links=()
    [ -n "${PIP_FIND_LINKS:-}" ] && links=(--find-links "$PIP_FIND_LINKS")
    # uv's build of the editable install leaves a lock file in the temporary folder: keep it inside the venv.
    # --compile-bytecode costs 15 s of a fresh install (every file of every package) and pays for itself where
    # PYTHONDONTWRITEBYTECODE is set (this project's machines and CI set it): there no process keeps what it compiles,
    # and without it a fresh clone's `bash .ci/run` took 9 min 33 s instead of 8 min 24 s.
    mkdir -p "$venv/tmp"
    TMPDIR="$venv/tmp" "$venv/bin/uv" pip install --python "$python" --compile-bytecode ${links[@]+"${links[@]}"} -c constraints.txt "${spec[@]}" 2>&1 |
        tee "$log" | show || fail "uv could not install the pinned packages"
else
    "$python" -m pip install --disable-pip-version-check --progress-bar off -c constraints.txt "${spec[@]}" 2>&1 |
        tee "$log" | show | cut -c1-200 || fail "pip could not install the pinned packages"
fi

# An editable install turns a failed catalog compile into a mere warning: check that Spanish loads.
"$python" -c "import sys; from jaxintro.i18n import set_language; \
sys.exit(0 if set_language('es') == 'es' else 'the Spanish catalog did not compile (setup.py build hook)')" ||
    fail "the Spanish catalog"
"$python" -c "from importlib.metadata import version as v; print('Installed in $venv in $((SECONDS - start)) s: jaxintro', \
v('jaxintro'), 'with', ', '.join(f'{p} {v(p)}' for p in ('jax', 'optax', 'flax', 'equinox', 'orbax-checkpoint')))"
