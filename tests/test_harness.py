"""The suite's own set-up (tests/conftest.py): how it compiles, and where a user's runs are compiled as a user's."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp

from conftest import SUITE_XLA_FLAG, as_users_compile

# The LLVM optimization level XLA would compile the next program at (0: JAX's `jax_disable_most_optimizations`).
LEVEL = ("from jax._src import compiler; "
         "print(compiler.get_compile_options(1, 1).executable_build_options.debug_options.xla_backend_optimization_level)")


# Everything XLA will compile the next program with, its flags included, as one string.
OPTIONS = "from jax._src import compiler; print(compiler.get_compile_options(1, 1).SerializeAsString().hex())"


def in_a_child(code: str, environ: dict[str, str] | None = None) -> str:
    """What `code` prints in a Python process started now (with this process's environment unless told)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          env=environ).stdout.strip()


def options_here_and_in_children() -> tuple[str, str, str]:
    """XLA's compile options here, in a process started now, and in one started without the suite's XLA flag."""
    from jax._src import compiler

    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if flag != SUITE_XLA_FLAG]
    bare = in_a_child(OPTIONS, {**os.environ, "XLA_FLAGS": " ".join(flags)})
    return compiler.get_compile_options(1, 1).SerializeAsString().hex(), in_a_child(OPTIONS), bare


def test_every_process_compiles_with_the_suites_xla_flag_a_users_too():
    here, child, bare = options_here_and_in_children()
    assert here == child != bare
    with as_users_compile():  # a user's level, here and in a child, with the flag in both
        users_here, users_child, users_bare = options_here_and_in_children()
        assert users_here == users_child != users_bare and users_here != here


def test_the_suites_torch_compile_writes_plain_loops():
    from torch._inductor import config

    assert config.cpp.vec_isa_ok is False  # nothing for g++ to vectorize: it compiles without ATen's SIMD headers


def level_here_and_in_a_child() -> tuple[str, str]:
    """The level in this process and in a process it starts now."""
    child = in_a_child(LEVEL)
    from jax._src import compiler

    options = compiler.get_compile_options(1, 1).executable_build_options.debug_options
    return str(options.xla_backend_optimization_level), child


def test_the_suite_compiles_unoptimized_and_a_users_runs_as_a_user():
    assert level_here_and_in_a_child() == ("0", "0")
    with as_users_compile():
        here, child = level_here_and_in_a_child()
        assert here == child != "0"  # XLA's default level, in both
        with as_users_compile():  # nested: still a user's on the way out
            pass
        assert level_here_and_in_a_child() == (here, child)
    assert level_here_and_in_a_child() == ("0", "0")  # and back after the block


def test_a_program_compiled_one_way_is_not_run_the_other():
    add_one = jax.jit(lambda x: x + 1)
    add_one(jnp.ones(3))
    with as_users_compile():
        assert add_one._cache_size() == 0  # compiled unoptimized before: compiled again
        add_one(jnp.ones(3))
        with as_users_compile():  # nested, the flag unchanged: the program compiled just now stays
            assert add_one._cache_size() == 1
        assert add_one._cache_size() == 1
    assert add_one._cache_size() == 0  # and again after


def test_a_test_whose_programs_run_in_its_children_keeps_this_process_s():
    add_one = jax.jit(lambda x: x + 1)
    add_one(jnp.ones(3))
    with as_users_compile(here=False):
        here, child = level_here_and_in_a_child()
        assert here == "0" != child  # only the processes it starts compile as a user's
        assert add_one._cache_size() == 1  # and this process's programs stay compiled
    assert level_here_and_in_a_child() == ("0", "0") and add_one._cache_size() == 1
