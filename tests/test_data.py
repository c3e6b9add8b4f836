"""IDX parsing, checksums, where files are found, downloads against a local server, and `auto`."""

from __future__ import annotations

import dataclasses
import gzip
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import idx_bytes, write_idx
from jaxintro import data
from jaxintro.data import DatasetSpec, FileSpec, load_dataset, load_idx_dataset, parse_idx, read_verified, sha256_hex
from jaxintro.errors import DataError, DataNotFoundError


def small_spec(rng_seed: int = 0) -> tuple[DatasetSpec, dict[str, np.ndarray]]:
    """A 4-file IDX dataset of 20/10 images of 4x4, with its own canonical hashes."""
    rng = np.random.default_rng(rng_seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (20, 4, 4), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, (20,), dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (10, 4, 4), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, (10,), dtype=np.uint8),
    }
    files = [FileSpec(stem, sha256_hex(idx_bytes(a)), a.shape) for stem, a in arrays.items()]
    spec = DatasetSpec("tiny", *files, mirrors=("http://127.0.0.1:9/",))
    return spec, arrays


def test_parse_idx_roundtrip_images_and_labels():
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(parse_idx(idx_bytes(images)), images)
    labels = np.array([7, 0, 9], dtype=np.uint8)
    np.testing.assert_array_equal(parse_idx(idx_bytes(labels)), labels)


def test_parse_idx_big_endian_int32():
    values = np.array([1, -2, 70000], dtype=">i4")
    raw = bytes([0, 0, 0x0C, 1]) + (3).to_bytes(4, "big") + values.tobytes()
    np.testing.assert_array_equal(parse_idx(raw), [1, -2, 70000])


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\x00\x00", "too short"),
        (b"\x08\x03\x00\x00" + bytes(12), "bad magic"),
        (b"PK\x03\x04" + bytes(12), "bad magic"),
        (bytes([0, 0, 0x08, 3]) + (2).to_bytes(4, "big"), "truncated"),
        (bytes([0, 0, 0x08, 1]) + (5).to_bytes(4, "big") + bytes(4), "holds 4"),
        (bytes([0, 0, 0x08, 1]) + (5).to_bytes(4, "big") + bytes(6), "holds 6"),
    ],
)
def test_parse_idx_rejects_bad_files(raw, message):
    with pytest.raises(DataError, match=message):
        parse_idx(raw, "f")


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("dotted", [False, True])
def test_both_encodings_and_spellings_load(tmp_path, gz, dotted):
    spec, arrays = small_spec()
    for stem, array in arrays.items():
        write_idx(tmp_path, stem.replace("-idx", ".idx") if dotted else stem, array, gz=gz)
    ds = load_idx_dataset(spec, tmp_path, download=False)
    assert ds.x_train.dtype == np.uint8 and ds.x_train.shape == (20, 16)
    np.testing.assert_array_equal(ds.x_test.reshape(10, 4, 4), arrays["t10k-images-idx3-ubyte"])
    np.testing.assert_array_equal(ds.y_train, arrays["train-labels-idx1-ubyte"])


def test_checksum_mismatch_names_file_and_fix(tmp_path):
    spec, arrays = small_spec()
    images = arrays["train-images-idx3-ubyte"].copy()
    images[0, 0, 0] ^= 1  # one flipped bit
    path = write_idx(tmp_path, "train-images-idx3-ubyte", images)
    with pytest.raises(DataError) as err:
        read_verified(path, spec.train_images)
    text = str(err.value)
    assert str(path) in text and spec.train_images.sha256 in text and "re-download" in text


def test_wrong_dataset_file_is_named(tmp_path, mnist_dir):
    with pytest.raises(DataError, match="is mnist's train-labels-idx1-ubyte: .* pass --dataset mnist"):
        read_verified(mnist_dir / "train-labels-idx1-ubyte.gz", data.FASHION_MNIST.train_labels)


def test_damaged_gzip_is_a_clear_error(tmp_path):
    spec, arrays = small_spec()
    path = write_idx(tmp_path, "train-images-idx3-ubyte", arrays["train-images-idx3-ubyte"])
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DataError, match="damaged gzip"):
        read_verified(path, spec.train_images)


def test_partial_folder_names_missing_files(tmp_path):
    spec, arrays = small_spec()
    write_idx(tmp_path, "train-images-idx3-ubyte", arrays["train-images-idx3-ubyte"])
    with pytest.raises(DataError, match="missing train-labels-idx1-ubyte"):
        load_idx_dataset(spec, tmp_path)


def test_full_mnist_verifies_and_stays_uint8(mnist_dir):
    ds = load_dataset("mnist", mnist_dir)
    assert ds.x_train.shape == (60000, 784) and ds.x_test.shape == (10000, 784)
    assert ds.x_train.dtype == np.uint8 and ds.y_train.dtype == np.int32
    assert set(np.unique(ds.y_test)) == set(range(10))


def test_env_var_data_dir(monkeypatch, mnist_dir):
    monkeypatch.setenv("JAXINTRO_DATA_DIR", str(mnist_dir))
    assert load_dataset("mnist").source == str(mnist_dir)


# ---------------------------------------------------------------- downloads


def serve_dataset(server, arrays, prefix="/a/", mode="ok"):
    for stem, array in arrays.items():
        server.routes[f"{prefix}{stem}.gz"] = (mode, gzip.compress(idx_bytes(array)))


def test_download_verifies_and_caches(file_server, isolated_cache):
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays)
    dest = isolated_cache / "jaxintro" / "tiny"
    path = data.download_file(spec.train_images, (file_server.url + "/a/",), dest)
    assert path == dest / "train-images-idx3-ubyte.gz"
    np.testing.assert_array_equal(read_verified(path, spec.train_images), arrays["train-images-idx3-ubyte"])
    assert [p.name for p in dest.iterdir()] == [path.name]  # no temporary files left


def test_failing_mirror_falls_back_to_the_next(file_server, isolated_cache):
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays, prefix="/bad/", mode="500")
    serve_dataset(file_server, arrays, prefix="/good/")
    dest = isolated_cache / "d"
    path = data.download_file(spec.train_labels, (file_server.url + "/bad/", file_server.url + "/good/"), dest)
    assert path.exists()
    assert file_server.hits == ["/bad/train-labels-idx1-ubyte.gz", "/good/train-labels-idx1-ubyte.gz"]


@pytest.mark.parametrize("mode", ["cut", "500", "404"])
def test_broken_transfer_leaves_nothing_behind(file_server, isolated_cache, mode):
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays, mode=mode)
    dest = isolated_cache / "d"
    with pytest.raises(DataNotFoundError, match="could not download train-images-idx3-ubyte.gz"):
        data.download_file(spec.train_images, (file_server.url + "/a/",), dest)
    assert list(dest.iterdir()) == []


def test_wrong_content_is_rejected(file_server, isolated_cache):
    spec, arrays = small_spec()
    serve_dataset(file_server, {"train-images-idx3-ubyte": arrays["train-images-idx3-ubyte"] // 2})
    dest = isolated_cache / "d"
    with pytest.raises(DataNotFoundError, match="SHA-256"):
        data.download_file(spec.train_images, (file_server.url + "/a/",), dest)
    assert list(dest.iterdir()) == []


def test_timeout_moves_on(file_server, isolated_cache):
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays, prefix="/slow/", mode="slow")
    serve_dataset(file_server, arrays, prefix="/good/")
    path = data.download_file(spec.test_labels, (file_server.url + "/slow/", file_server.url + "/good/"),
                              isolated_cache / "d", timeout=0.5)
    assert path.exists()


def test_whole_dataset_downloads_into_cache_then_loads_offline(file_server, isolated_cache, monkeypatch):
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays)
    monkeypatch.setenv("JAXINTRO_MIRRORS", file_server.url + "/a/")
    first = load_idx_dataset(spec)
    assert Path(first.source) == isolated_cache / "jaxintro" / "tiny"
    file_server.routes.clear()  # now offline: the cache must serve it
    second = load_idx_dataset(spec)
    np.testing.assert_array_equal(first.x_train, second.x_train)


def test_the_digits_are_scikit_learns_read_from_its_file_without_importing_it(monkeypatch):
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    for found in (True, False):  # scikit-learn's file where it keeps it, else its own loader
        monkeypatch.setattr(Path, "is_file", lambda self, found=found: found)
        pixels, labels = data.digits_table()
        np.testing.assert_array_equal(pixels, bunch.data)
        np.testing.assert_array_equal(labels, bunch.target)
    monkeypatch.undo()
    # The point of reading the file: a digits run does not pay for importing scikit-learn.
    probe = "import sys; from jaxintro.data import load_digits; load_digits(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_auto_falls_back_to_digits_with_a_warning_when_offline():
    with pytest.warns(UserWarning, match="(?=.*Falling back to scikit-learn's small 8x8 'digits')(?=.*--data-dir)"):
        ds = load_dataset("auto")
    assert ds.name == "digits" and ds.x_train.shape == (1437, 64) and ds.x_train.dtype == np.uint8
    assert ds.x_train.max() == 255


def test_auto_does_not_hide_a_corrupt_file(tmp_path, mnist_dir):
    for f in data.MNIST.files:
        (tmp_path / f"{f.stem}.gz").write_bytes((mnist_dir / f"{f.stem}.gz").read_bytes())
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01" + bytes(4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DataError, match="t10k-labels"):
            load_dataset("auto", tmp_path)


def only_the_cache_for_fashion(monkeypatch: pytest.MonkeyPatch) -> data.DatasetSpec:
    """Fashion-MNIST searched in the user cache only: a copy installed on this machine changes nothing here."""
    spec = dataclasses.replace(data.FASHION_MNIST, system_dirs=())
    monkeypatch.setitem(data.IDX_DATASETS, spec.name, spec)
    return spec


def test_describe_sources_reports_each_dataset(mnist_dir, isolated_cache, monkeypatch):
    only_the_cache_for_fashion(monkeypatch)
    rows = {r["dataset"]: r for r in data.describe_sources(mnist_dir)}
    assert list(rows) == ["digits", "mnist", "fashion-mnist"]
    assert rows["mnist"] == {"dataset": "mnist", "source": str(mnist_dir), "status": "ok (SHA-256 verified)"}
    # The named folder holds MNIST, not Fashion-MNIST: said for that folder, never reported as found.
    assert rows["fashion-mnist"]["source"] == str(mnist_dir)
    assert rows["fashion-mnist"]["status"].startswith("not here:") and "mnist" in rows["fashion-mnist"]["status"]


def test_describe_sources_without_data_says_where_each_dataset_would_come_from(isolated_cache, monkeypatch):
    only_the_cache_for_fashion(monkeypatch)
    # Without a folder and with an empty cache, each IDX dataset would be downloaded, from the mirror in force.
    rows = {r["dataset"]: r for r in data.describe_sources()}
    assert rows["digits"]["status"] == "ok (always offline)"
    for name in ("mnist", "fashion-mnist"):
        assert rows[name]["source"] == "download from http://127.0.0.1:9/"
        assert rows[name]["status"].startswith("not on disk (searched ")
        assert str(isolated_cache / "jaxintro" / name) in rows[name]["status"]
    # A cache folder holding part of MNIST: reported as failing, with what is missing (never as downloadable).
    (isolated_cache / "jaxintro" / "mnist").mkdir(parents=True)
    (isolated_cache / "jaxintro" / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    row = {r["dataset"]: r for r in data.describe_sources()}["mnist"]
    assert row["source"] == "?" and row["status"].startswith("FAILS: ")
    assert "holds only part of mnist; missing train-labels-idx1-ubyte" in row["status"]


# ---------------------------------------------------------------- a folder the user named


@pytest.mark.parametrize("name", ["auto", "mnist"])
@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_a_named_data_folder_without_the_data_is_an_error_naming_it(tmp_path, monkeypatch, name, how, folder):
    path = tmp_path / "nonexistent" if folder == "missing" else tmp_path
    if how == "env":
        monkeypatch.setenv("JAXINTRO_DATA_DIR", str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no quiet fall-back to the 8x8 digits
        with pytest.raises(DataNotFoundError) as err:
            load_dataset(name, path if how == "flag" else None)
    text = str(err.value)
    assert str(path) in text and ("--data-dir" if how == "flag" else "JAXINTRO_DATA_DIR") in text
    assert ("does not exist" if folder == "missing" else "holds none") in text


def test_another_datasets_folder_names_the_flag_that_loads_it(mnist_dir):
    with pytest.raises(DataError, match="holds mnist, not fashion-mnist: pass --dataset mnist"):
        load_dataset("fashion-mnist", mnist_dir)


def test_data_and_train_agree_on_a_cache_folder_holding_another_dataset(isolated_cache, mnist_dir, monkeypatch):
    spec = only_the_cache_for_fashion(monkeypatch)
    wrong = isolated_cache / "jaxintro" / "fashion-mnist"
    wrong.mkdir(parents=True)
    for f in data.MNIST.files:
        (wrong / f"{f.stem}.gz").write_bytes((mnist_dir / f"{f.stem}.gz").read_bytes())
    assert data.find_dataset(spec) is None  # passed over, never loaded as Fashion-MNIST
    row = {r["dataset"]: r for r in data.describe_sources()}["fashion-mnist"]
    # `jaxintro data` says it would download it, after searching that folder; train does not load it either.
    assert row["source"] == "download from http://127.0.0.1:9/" and row["source"] != str(wrong)
    assert str(wrong) in row["status"]
    with pytest.raises(DataNotFoundError, match="searched"):
        load_dataset("fashion-mnist", download=False)
