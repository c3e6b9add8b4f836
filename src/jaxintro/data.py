"""Datasets as uint8 NumPy arrays: checksum-verified IDX files (`idx.py` reads the format), cached downloads.

Where MNIST and Fashion-MNIST come from, in order: `--data-dir` (or `JAXINTRO_DATA_DIR`),
the user cache (`$XDG_CACHE_HOME/jaxintro`, else `~/.cache/jaxintro`), for Fashion-MNIST
Debian's `/usr/share/datasets/fashion-mnist`, then a download from the public mirrors.
Every file is checked against the SHA-256 of its canonical decompressed bytes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import tempfile
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from jaxintro.errors import DataError, DataNotFoundError
from jaxintro.i18n import _
from jaxintro.idx import MAX_IDX_BYTES, decompress_if_gzip, parse_idx, sha256_hex
from jaxintro.runs import read_bounded

DOWNLOAD_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """One canonical IDX file: its stem, the SHA-256 of its decompressed bytes and its shape."""

    stem: str
    sha256: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """Where a dataset's four IDX files are checked, fetched and verified."""

    name: str
    train_images: FileSpec
    train_labels: FileSpec
    test_images: FileSpec
    test_labels: FileSpec
    mirrors: tuple[str, ...]
    system_dirs: tuple[str, ...] = ()
    classes: tuple[str, ...] = tuple(str(i) for i in range(10))

    @property
    def files(self) -> tuple[FileSpec, ...]:
        """The four files in a fixed order."""
        return (self.train_images, self.train_labels, self.test_images, self.test_labels)


# MNIST and Fashion-MNIST share file names and shapes; only contents, hashes and hosts differ.
IDX_FILES = (
    ("train-images-idx3-ubyte", (60000, 28, 28)),
    ("train-labels-idx1-ubyte", (60000,)),
    ("t10k-images-idx3-ubyte", (10000, 28, 28)),
    ("t10k-labels-idx1-ubyte", (10000,)),
)


def mnist_like(name: str, sha256s: tuple[str, str, str, str], mirrors: tuple[str, ...], **kwargs) -> DatasetSpec:
    """A dataset laid out as MNIST's four IDX files, with the SHA-256 of each decompressed file."""
    files = [FileSpec(stem, digest, shape) for (stem, shape), digest in zip(IDX_FILES, sha256s)]
    return DatasetSpec(name, *files, mirrors=mirrors, **kwargs)


MNIST = mnist_like(
    "mnist",
    (
        "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    ),
    # The original host refuses scripted downloads; these are the mirrors that JAX's
    # examples and torchvision use.
    mirrors=(
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
    ),
)

FASHION_MNIST = mnist_like(
    "fashion-mnist",
    (
        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    ),
    mirrors=(
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/",
    ),
    system_dirs=("/usr/share/datasets/fashion-mnist",),
    classes=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
)

IDX_DATASETS = {spec.name: spec for spec in (MNIST, FASHION_MNIST)}
KNOWN_FILES = {f.sha256: (spec.name, f.stem) for spec in IDX_DATASETS.values() for f in spec.files}


def owner_of(spec: FileSpec) -> str:
    """The dataset a canonical file belongs to (`dataset` for files of an unregistered spec)."""
    return KNOWN_FILES.get(spec.sha256, ("dataset",))[0]


class WrongDatasetError(DataError):
    """A folder holds another known dataset's files (e.g. Fashion-MNIST given as MNIST)."""

    def __init__(self, message: str, holds: str) -> None:
        super().__init__(message)
        self.holds = holds


class Dataset(NamedTuple):
    """A train/test split with flattened uint8 images (N, D) and int32 labels (N,)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    image_shape: tuple[int, int]
    source: str

    @property
    def num_features(self) -> int:
        """Pixels per image."""
        return int(self.x_train.shape[1])

    @property
    def num_classes(self) -> int:
        """Number of label classes."""
        return len(self.classes)


MAX_IMAGE_SIDE = 256  # pixels a side a checkpoint's images may have (MNIST 28, the digits 8)


class DatasetInfo(NamedTuple):
    """What a run records of the data it trained on (JSON in every checkpoint's metadata): enough to rebuild
    its model and to read new images the way its data was read."""

    name: str
    image_shape: tuple[int, ...]
    classes: tuple[str, ...]
    features: int

    @classmethod
    def of(cls, dataset: Dataset) -> "DatasetInfo":
        """The description of a loaded dataset."""
        return cls(dataset.name, tuple(dataset.image_shape), tuple(dataset.classes), dataset.num_features)

    def to_json(self) -> dict[str, Any]:
        """As the checkpoint stores it."""
        return {"name": self.name, "image_shape": list(self.image_shape), "classes": list(self.classes),
                "features": self.features}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "DatasetInfo | None":
        """Read back from a checkpoint; None when it has none (a checkpoint older than this record).

        A checkpoint is input (a run folder may come from anyone): a record that is not a small square image
        whose pixels are its features, with a name per class, is a ValueError before anything is allocated.
        """
        if not isinstance(obj, dict) or not all(key in obj for key in cls._fields):
            return None
        shape, features, classes = obj["image_shape"], obj["features"], obj["classes"]
        if not (isinstance(shape, list) and len(shape) == 2 and shape[0] == shape[1]  # load_image makes squares
                and all(type(s) is int and 0 < s <= MAX_IMAGE_SIDE for s in shape)
                and type(features) is int and features == shape[0] * shape[1]):
            raise ValueError(_("image_shape {shape} with {features} features is not a small square image").format(
                shape=str(shape)[:40], features=str(features)[:20]))
        if not (isinstance(classes, list) and 0 < len(classes) <= 1000 and isinstance(obj["name"], str)):
            raise ValueError(_("the dataset's name or classes are not what jaxintro writes"))
        return cls(obj["name"], tuple(shape), tuple(str(c) for c in classes), features)


# ---------------------------------------------------------------- files on disk


def candidate_names(stem: str) -> tuple[str, ...]:
    """File names a stem may be stored under: gzip or raw, `-idx3-` or `.idx3-` spelling."""
    dotted = stem.replace("-idx", ".idx")
    return (stem + ".gz", stem, dotted + ".gz", dotted)


def find_file(folder: Path, spec: FileSpec) -> Path | None:
    """The first existing path for `spec` in `folder`, or None."""
    for name in candidate_names(spec.stem):
        path = folder / name
        if path.exists():
            return path
    return None


def read_verified(path: Path, spec: FileSpec) -> np.ndarray:
    """Read, decompress, checksum and parse one IDX file; raise DataError naming the fix."""
    if path.is_dir():
        raise DataError(_("{path}: is a folder, expected the IDX file {stem}[.gz]; remove or rename it").format(
            path=path, stem=spec.stem))
    try:
        raw = read_bounded(path, MAX_IDX_BYTES)
    except PermissionError:
        raise DataError(_("{path}: no permission to read it; fix with: chmod a+r {path}").format(path=path)) from None
    except OSError as exc:
        raise DataError(_("{path}: cannot be read ({reason})").format(path=path, reason=exc.strerror)) from None
    raw = decompress_if_gzip(raw, str(path))
    digest = sha256_hex(raw)
    if digest != spec.sha256:
        known = KNOWN_FILES.get(digest)
        if known is not None and known[0] != owner_of(spec):
            raise WrongDatasetError(_(
                "{path} is {holds}'s {stem}: {folder} holds {holds}, not {wanted}: "
                "pass --dataset {holds} to use it, or point --data-dir at a {wanted} folder"
            ).format(path=path, holds=known[0], stem=known[1], folder=path.parent, wanted=owner_of(spec)), known[0])
        what = (_("it is {dataset}'s {stem}").format(dataset=known[0], stem=known[1]) if known
                else _("the file is corrupt or truncated"))
        raise DataError(_(
            "{path}: SHA-256 of the decompressed file is {digest}, expected {expected}; "
            "{what}: delete it and re-download, or point --data-dir at the right folder"
        ).format(path=path, digest=digest, expected=spec.sha256, what=what))
    array = parse_idx(raw, str(path))
    if array.shape != spec.shape:
        raise DataError(_("{path}: shape {shape}, expected {expected}").format(
            path=path, shape=array.shape, expected=spec.shape))
    return array


def default_cache_dir() -> Path:
    """The user cache: `$XDG_CACHE_HOME/jaxintro`, else `~/.cache/jaxintro`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jaxintro"


def explicit_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """The folder the user named (`--data-dir`, else `JAXINTRO_DATA_DIR`), or None."""
    explicit = data_dir if data_dir is not None else os.environ.get("JAXINTRO_DATA_DIR")
    return Path(explicit).expanduser() if explicit else None


def search_dirs(spec: DatasetSpec, data_dir: str | os.PathLike | None) -> list[Path]:
    """Folders searched for `spec`'s files, in order; a folder the user named is the only one searched."""
    explicit = explicit_data_dir(data_dir)
    if explicit is not None:
        return [explicit]
    remembered = remembered_dir(spec)
    return [default_cache_dir() / spec.name, *([remembered] if remembered else []),
            *(Path(d) for d in spec.system_dirs)]


def remembered_dir(spec: DatasetSpec) -> Path | None:
    """The folder where `spec` last verified from a `--data-dir` (recorded in the user cache), or None."""
    try:
        text = (default_cache_dir() / f"{spec.name}.location").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return Path(text) if text else None


def remember_dir(spec: DatasetSpec, folder: Path) -> None:
    """Record where `spec` verified, so one `--data-dir` is enough for every later command.

    Like a download, it is remembered in the user cache; a cache that cannot be written only loses the
    convenience, never the command.
    """
    record = default_cache_dir() / f"{spec.name}.location"
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        if remembered_dir(spec) != folder.resolve():
            record.write_text(f"{folder.resolve()}\n", encoding="utf-8")
    except OSError:
        pass


def mirrors_for(spec: DatasetSpec) -> tuple[str, ...]:
    """Mirror base URLs; `JAXINTRO_MIRRORS` (comma-separated) overrides the built-in list."""
    override = os.environ.get("JAXINTRO_MIRRORS")
    if override:
        return tuple(url if url.endswith("/") else url + "/" for url in override.split(",") if url)
    return spec.mirrors


# ---------------------------------------------------------------- downloads


def download_file(
    spec: FileSpec, mirrors: tuple[str, ...], dest_dir: Path, *, timeout: float = DOWNLOAD_TIMEOUT_S
) -> Path:
    """Fetch `<mirror><stem>.gz` from the first mirror that serves verified bytes; return its cache path.

    The bytes go to a temporary file in `dest_dir` and are renamed into place only once the
    decompressed SHA-256 matches, so an interrupted or bad transfer leaves nothing behind.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / (spec.stem + ".gz")
    failures = []
    for mirror in mirrors:
        url = mirror + spec.stem + ".gz"
        fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.stem}.", suffix=".part", dir=dest_dir)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
            raw = decompress_if_gzip(tmp.read_bytes(), url)
            digest = sha256_hex(raw)
            if digest != spec.sha256:
                raise DataError(_("{url}: SHA-256 {digest}, expected {expected}").format(
                    url=url, digest=digest, expected=spec.sha256))
            parse_idx(raw, url)
            os.replace(tmp, target)
            return target
        except (OSError, urllib.error.URLError, DataError, ValueError) as exc:
            failures.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
        finally:
            tmp.unlink(missing_ok=True)
    raise DataNotFoundError(_("could not download {file} from any mirror ({failures})").format(
        file=spec.stem + ".gz", failures="; ".join(failures)))


# ---------------------------------------------------------------- datasets


class Found(NamedTuple):
    """Where a dataset loads from, and its four verified arrays."""

    folder: Path
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    skipped: tuple[str, ...]  # searched folders passed over, and why


def find_dataset(spec: DatasetSpec, data_dir: str | os.PathLike | None = None) -> Found | None:
    """The first searched folder whose four files verify as `spec`, read; None when no folder holds them.

    A folder the user named must hold the dataset (else an error that names it). Of the default
    folders, one holding another dataset (Fashion-MNIST in MNIST's cache) is passed over; one holding
    a damaged file is an error, never silently skipped. `train`, `data` and every other command call
    this, so what `jaxintro data` reports is what `train` uses.
    """
    explicit = explicit_data_dir(data_dir)
    skipped = []
    for folder in search_dirs(spec, data_dir):
        paths = [find_file(folder, f) for f in spec.files]
        if not any(paths):
            continue
        if not all(paths):
            missing = [f.stem for f, path in zip(spec.files, paths) if path is None]
            raise DataError(_("{folder}: holds only part of {dataset}; missing {files}[.gz]").format(
                folder=folder, dataset=spec.name, files=", ".join(missing)))
        try:
            arrays = tuple(read_verified(path, f) for path, f in zip(paths, spec.files))  # type: ignore[arg-type]
        except WrongDatasetError as exc:
            if explicit is not None:
                raise
            skipped.append(_("{folder} holds {dataset}").format(folder=folder, dataset=exc.holds))
            continue
        check_consistent(spec, paths, arrays)  # type: ignore[arg-type]
        return Found(folder, arrays, tuple(skipped))  # type: ignore[arg-type]
    if explicit is not None:
        source = "--data-dir" if data_dir is not None else "JAXINTRO_DATA_DIR"
        if not explicit.exists():
            problem = _("{source} {folder} does not exist").format(source=source, folder=explicit)
        elif not explicit.is_dir():
            problem = _("{source} {folder} is not a folder").format(source=source, folder=explicit)
        else:
            problem = _("{source} {folder} holds none of {dataset}'s four IDX files").format(
                source=source, folder=explicit, dataset=spec.name)
        raise DataNotFoundError(_(
            "{problem} ({files}, .gz or not); "
            "point it at the folder that holds them, or leave it out to use the cache and the download"
        ).format(problem=problem, files=", ".join(f.stem for f in spec.files)))
    return None


def check_consistent(spec: DatasetSpec, paths: list[Path], arrays: tuple[np.ndarray, ...]) -> None:
    """Images and labels of each split agree in count; labels are valid classes."""
    x_train, y_train, x_test, y_test = arrays
    for images, labels, image_path, label_path in ((x_train, y_train, paths[0], paths[1]),
                                                    (x_test, y_test, paths[2], paths[3])):
        if len(images) != len(labels):
            raise DataError(_(
                "{images_file} holds {images} images but {labels_file} holds {labels} labels; "
                "the two files come from different sets: re-download both"
            ).format(images_file=image_path, images=len(images), labels_file=label_path, labels=len(labels)))
        if labels.max(initial=0) >= len(spec.classes):
            raise DataError(_("{path}: label {label} out of range 0..{last}").format(
                path=label_path, label=labels.max(), last=len(spec.classes) - 1))


def load_idx_dataset(
    spec: DatasetSpec, data_dir: str | os.PathLike | None = None, *, download: bool = True
) -> Dataset:
    """Load a verified IDX dataset from disk, downloading it into the cache when no searched folder holds it."""
    found = find_dataset(spec, data_dir)
    if found is None:
        searched = ", ".join(map(str, search_dirs(spec, data_dir)))
        if not download:
            raise DataNotFoundError(_("{dataset} not found (searched {searched})").format(
                dataset=spec.name, searched=searched))
        cache = default_cache_dir() / spec.name
        try:
            for f in spec.files:
                if find_file(cache, f) is None:
                    download_file(f, mirrors_for(spec), cache)
        except DataNotFoundError as exc:
            raise DataNotFoundError(_(
                "{dataset} is not on disk (searched {searched}) and {error}; pass --data-dir DIR with the four "
                "IDX files, or connect to the internet once"
            ).format(dataset=spec.name, searched=searched, error=exc)) from None
        found = find_dataset(spec, data_dir)
        if found is None:
            raise DataNotFoundError(_("{dataset}: downloaded into {folder}, yet not found there").format(
                dataset=spec.name, folder=cache))
    if explicit_data_dir(data_dir) is not None:  # verified just now: later commands find it without the flag
        remember_dir(spec, found.folder)
    x_train, y_train, x_test, y_test = found.arrays
    return Dataset(
        name=spec.name,
        x_train=x_train.reshape(len(x_train), -1),  # a view: keeps the 64-byte alignment
        y_train=y_train.astype(np.int32),
        x_test=x_test.reshape(len(x_test), -1),
        y_test=y_test.astype(np.int32),
        classes=spec.classes,
        image_shape=tuple(spec.train_images.shape[1:]),  # type: ignore[arg-type]
        source=str(found.folder),
    )


def load_digits() -> Dataset:
    """scikit-learn's bundled 8x8 digits (always offline), scaled to uint8 0..255, split 1437/360."""
    data, target = digits_table()
    # The pixels are 0..16; rescale to MNIST's 0..255 so the same 1/255 scaling applies.
    x = np.round(data * (255.0 / 16.0)).astype(np.uint8)
    y = target.astype(np.int32)
    split = 1437  # the first 80%, a fixed split so runs are comparable
    return Dataset("digits", x[:split], y[:split], x[split:], y[split:], tuple(str(i) for i in range(10)), (8, 8),
                   _("scikit-learn (bundled)"))


def digits_table() -> tuple[np.ndarray, np.ndarray]:
    """The digits' pixels (0..16) and labels, as `sklearn.datasets.load_digits` returns them.

    Read from scikit-learn's own file without importing scikit-learn: its import takes a second, more than the
    rest of a digits run's set-up (a scikit-learn that keeps the file elsewhere is asked the usual way).
    """
    spec = importlib.util.find_spec("sklearn")
    locations = (spec.submodule_search_locations or []) if spec else []
    path = Path(locations[0], "datasets", "data", "digits.csv.gz") if locations else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits as sk_load_digits

        bunch = sk_load_digits()
        return bunch.data, bunch.target
    table = np.loadtxt(path, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


def load_dataset(name: str = "auto", data_dir: str | os.PathLike | None = None, *, download: bool = True) -> Dataset:
    """Load `name`; `auto` is MNIST when found or downloadable, else `digits` with a warning."""
    if name == "digits":
        return load_digits()
    if name in IDX_DATASETS:
        return load_idx_dataset(IDX_DATASETS[name], data_dir, download=download)
    if name == "auto":
        if explicit_data_dir(data_dir) is not None:  # a folder the user named must hold the data: no fallback
            return load_idx_dataset(MNIST, data_dir, download=download)
        try:
            return load_idx_dataset(MNIST, data_dir, download=download)
        except DataNotFoundError as exc:
            warnings.warn(
                # The error already says how to get MNIST (--data-dir, or the internet once): no second fix here.
                _("MNIST is not available ({error}). Falling back to scikit-learn's small 8x8 'digits' set, "
                  "whose accuracies are not comparable with MNIST's.").format(error=exc),
                UserWarning,
                stacklevel=2,
            )
            return load_digits()
    raise DataError(_("unknown dataset {name}; choose one of auto, mnist, fashion-mnist, digits").format(
        name=repr(name)))


def describe_sources(data_dir: str | os.PathLike | None = None) -> list[dict[str, str]]:
    """For `jaxintro data`: each dataset, where it would load from (by `find_dataset`), and whether it verifies.

    The keys and the dataset names are fixed; the source and status are prose, in the chosen language.
    """
    rows = [{"dataset": "digits", "source": _("scikit-learn (bundled)"), "status": _("ok (always offline)")}]
    for spec in IDX_DATASETS.values():
        try:
            found = find_dataset(spec, data_dir)
        except WrongDatasetError as exc:
            rows.append({"dataset": spec.name, "source": str(explicit_data_dir(data_dir)),
                         "status": _("not here: {error}").format(error=exc)})
            continue
        except DataError as exc:
            rows.append({"dataset": spec.name, "source": str(explicit_data_dir(data_dir) or "?"),
                         "status": _("FAILS: {error}").format(error=exc)})
            continue
        if found is not None:
            note = " " + _("(passed over: {folders})").format(folders="; ".join(found.skipped)) if found.skipped else ""
            rows.append({"dataset": spec.name, "source": str(found.folder),
                         "status": _("ok (SHA-256 verified)") + note})
            continue
        rows.append({"dataset": spec.name, "source": _("download from {url}").format(url=mirrors_for(spec)[0]),
                     "status": _("not on disk (searched {searched})").format(
                         searched=", ".join(map(str, search_dirs(spec, data_dir))))})
    return rows
