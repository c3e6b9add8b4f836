"""The exercises in the lesson's order: names, the lesson's section, and the starter and reference texts.

Each exercise's reference solution is a real Python file in `solutions/`; the lines between
`# >>> solution` and `# <<<` are the learner's part. The starter file is that file with those lines
replaced by a TODO, the statement (in the learner's language) as its docstring, and the functions'
docstrings in that language. One source for both, so the starter and the reference cannot drift.
No JAX here: `init`, `list` and `hint` run without it.
"""

from __future__ import annotations

import dataclasses
import gettext
import re
import textwrap
from pathlib import Path
from typing import Callable

from jaxintro.errors import ConfigError
from jaxintro.exercises.texts import docstrings, given_docstrings, solution_comments, statement
from jaxintro.i18n import DOMAIN, LOCALE_DIR, N_, _

SOLUTIONS = Path(__file__).parent / "solutions"
_REGION = re.compile(r"^( *)# >>> solution\n.*?^ *# <<<\n", re.MULTILINE | re.DOTALL)
_MARKERS = re.compile(r"^ *# (>>> solution|<<<)\n", re.MULTILINE)
_MODULE_DOC = re.compile(r'\A""".*?"""\n', re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Exercise:
    """One exercise: its number, file stem, functions the learner writes, and where the lesson teaches it."""

    number: int
    slug: str
    functions: tuple[str, ...]
    section: str  # marked with N_, translated where shown
    # The exercises whose answers the given code of this one's file holds: the file appears once they pass (as
    # rustlings unlocks), so that no file shows the answer of an exercise the learner has not solved yet.
    builds_on: tuple[int, ...] = ()

    @property
    def filename(self) -> str:
        """The learner's file name, e.g. `01_init_params.py`."""
        return f"{self.number:02d}_{self.slug}.py"

    def reference(self, lang: str = "en") -> str:
        """Our solution, as the learner would read it (markers removed), its docstrings and comments in `lang`."""
        source = _MARKERS.sub("", (SOLUTIONS / self.filename).read_text(encoding="utf-8"))
        if lang == "en":
            return source
        for english, translated in solution_comments(lang).items():  # the starter keeps its (given) comments as
            source = source.replace(f"# {english}\n", f"# {translated}\n")  # they were: a starter stays a starter
        return self._in_language(source, lang)

    def _in_language(self, source: str, lang: str) -> str:
        """`source` with the docstrings of the given code and of the learner's functions in `lang`."""
        for english, translated in given_docstrings(lang).items():  # each wrapped at its own indent
            source = re.sub(rf'^( *)"""{re.escape(english)}"""', lambda m: m[1] + _docstring(translated, m[1]), source,
                            flags=re.MULTILINE)
        for name, doc in docstrings(self.slug, lang).items():
            source = re.sub(rf'(def {name}\(.*?:\n( +))""".*?"""', lambda m: m[1] + _docstring(doc, m[2]), source,
                            count=1, flags=re.DOTALL)
        return source

    def starter(self, lang: str) -> str:
        """The file `init` writes: the statement, the given code, and a TODO where the learner writes."""
        source = (SOLUTIONS / self.filename).read_text(encoding="utf-8")
        _ = _catalog(lang)  # the file's language, whatever the command's messages are in
        todo = _("TODO: write this function (the statement is at the top of the file)")
        source = self._in_language(_REGION.sub(lambda m: f"{m[1]}# {todo}\n{m[1]}raise NotImplementedError\n", source),
                                   lang)
        header = statement(self.slug, lang).strip() + "\n\n" + _(
            "Check it: jaxintro exercises check {n}    A hint: jaxintro exercises hint {n}").format(n=self.number)
        return _MODULE_DOC.sub(lambda m: f'"""{header}\n"""\n', source, count=1)


def _docstring(text: str, indent: str) -> str:
    """`text` as a docstring at `indent`, wrapped at 100 columns."""
    lines = textwrap.wrap(f'"""{text}"""', width=100 - len(indent), break_long_words=False)
    return ("\n" + indent).join(lines)


def _catalog(lang: str) -> Callable[[str], str]:
    """The `gettext` of language `lang` (English when it has no catalog)."""
    return gettext.translation(DOMAIN, LOCALE_DIR, languages=[lang], fallback=True).gettext


EXERCISES: tuple[Exercise, ...] = (
    Exercise(1, "init_params", ("init_params",), N_("Build it, step 1: init_params (tour: prng)")),
    Exercise(2, "forward", ("forward",), N_("Build it, step 2: the forward pass"), builds_on=(1,)),
    Exercise(3, "loss_fn", ("loss_fn",), N_("Build it, step 3: the loss (log-softmax cross-entropy)"), builds_on=(2,)),
    Exercise(4, "train_step", ("train_step",), N_("Build it, step 4: train_step (tour: grad, jit)"), builds_on=(2, 3)),
    Exercise(5, "immutable_update", ("set_row",), N_("Core ideas: immutable arrays (tour: immutability)")),
    Exercise(6, "tree_map", ("sgd_update",), N_("Core ideas: pytrees (tour: pytrees)")),
    Exercise(7, "vmap_in_axes", ("batched_predict",), N_("Core ideas: vmap and in_axes (tour: vmap)")),
    Exercise(8, "scan", ("moving_average",), N_("Core ideas: loops as lax.scan (tour: control-flow)")),
    Exercise(9, "cond", ("signed_sqrt",), N_("Core ideas: branches as lax.cond (tour: control-flow, trace)")),
    Exercise(10, "split_keys", ("noisy_copies",), N_("Core ideas: PRNG keys (tour: prng)")),
    Exercise(11, "dropout", ("forward",), N_("Exercise 1: dropout with keys")),
    Exercise(12, "per_example_grads", ("per_example_grads", "grad_norms"),
             N_("Exercise 2: per-example gradients (tour: per-example)"), builds_on=(2, 3)),
    Exercise(13, "any_depth", ("mlp_forward",), N_("Exercise 3: any depth (tour: pytrees)")),
    Exercise(14, "jit_timing", ("time_call", "compare_jit"), N_("Exercise 4: jit vs no jit (tour: jit)")),
    Exercise(15, "clipping", ("global_norm", "clipped", "grad_norm_curve"), N_("Exercise 5: gradient clipping")),
)


def by_number(number: int) -> Exercise:
    """Exercise `number` (1-based), or a `ConfigError` naming the valid range."""
    if not 1 <= number <= len(EXERCISES):
        raise ConfigError(_("there is no exercise {number}: they go from 1 to {last}").format(
            number=number, last=len(EXERCISES)))
    return EXERCISES[number - 1]
