"""IDX parsing, checksums, where files are found, downloads against a local server, and `auto`."""

from __future__ import annotations

import dataclasses
import gzip
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import idx_bytes, write_idx
from jaxintro import data
from jaxintro.data import DatasetSpec, FileSpec, load_dataset, load_idx_dataset, read_verified
from jaxintro.idx import parse_idx, sha256_hex
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
    return spec_for(arrays), arrays


def spec_for(arrays: dict[str, np.ndarray]) -> DatasetSpec:
    """A dataset whose four canonical files are `arrays`, with their hashes and shapes."""
    files = [FileSpec(stem, sha256_hex(idx_bytes(a)), a.shape) for stem, a in arrays.items()]
    return DatasetSpec("tiny", *files, mirrors=("http://127.0.0.1:9/",))


def test_parse_idx_roundtrip_images_and_labels():
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(parse_idx(idx_bytes(images)), images)
    labels = np.array([7, 0, 9], dtype=np.uint8)
    np.testing.assert_array_equal(parse_idx(idx_bytes(labels)), labels)


def test_parse_idx_big_endian_int32():
    values = np.array([1, -2, 70000], dtype=">i4")
    raw = bytes([0, 0, 0x0C, 1]) + (3).to_bytes(4, "big") + values.tobytes()
    np.testing.assert_array_equal(parse_idx(raw), [1, -2, 70000])


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
    assert ds.image_shape == (4, 4) and ds.y_train.dtype == ds.y_test.dtype == np.int32  # the checkpoint keeps these


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


def test_a_download_is_staged_beside_the_cache_not_in_the_temp_folder(file_server, isolated_cache, monkeypatch):
    # /tmp may be another file system, where the final rename fails: here there is no temp folder at all.
    monkeypatch.setattr(tempfile, "tempdir", str(isolated_cache / "no-such-tmp"))
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays)
    dest = isolated_cache / "jaxintro" / "tiny"
    assert data.download_file(spec.train_labels, (file_server.url + "/a/",), dest).is_file()


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


def test_when_every_mirror_fails_the_error_names_each_one_and_why(file_server, isolated_cache):
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays, prefix="/down/", mode="500")
    wrong = arrays["train-images-idx3-ubyte"] // 2
    serve_dataset(file_server, {"train-images-idx3-ubyte": wrong}, prefix="/wrong/")
    # Bytes whose checksum matches but that are no IDX file: parse_idx is the last check.
    not_idx = dataclasses.replace(spec.train_images, sha256=sha256_hex(b"abc"))
    file_server.routes["/junk/train-images-idx3-ubyte.gz"] = ("ok", gzip.compress(b"abc"))
    urls = [f"{file_server.url}/{name}/" for name in ("down", "wrong", "junk")]
    dest = isolated_cache / "not" / "yet"  # made, parents too
    with pytest.raises(DataNotFoundError) as err:
        data.download_file(not_idx, tuple(urls[:2]), dest)
    file = "train-images-idx3-ubyte.gz"
    assert str(err.value) == (
        f"could not download {file} from any mirror ({urls[0]}{file}: Internal Server Error; "
        f"{urls[1]}{file}: {urls[1]}{file}: SHA-256 {sha256_hex(idx_bytes(wrong))}, expected {sha256_hex(b'abc')})")
    with pytest.raises(DataNotFoundError) as err:
        data.download_file(not_idx, (urls[2],), dest)
    assert str(err.value) == (
        f"could not download {file} from any mirror ({urls[2]}{file}: {urls[2]}{file}: 3 bytes is too short for "
        "an IDX header (4 bytes at least); re-download it)")
    assert list(dest.iterdir()) == []


def test_mirrors_can_be_named_in_the_environment(monkeypatch):
    monkeypatch.setenv("JAXINTRO_MIRRORS", "http://a.example/mnist,,http://b.example/")
    assert data.mirrors_for(data.MNIST) == ("http://a.example/mnist/", "http://b.example/")
    monkeypatch.setenv("JAXINTRO_MIRRORS", "")
    assert data.mirrors_for(data.MNIST) == data.MNIST.mirrors


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
    import sklearn.datasets

    bunch = sklearn.datasets.load_digits()
    for found in (True, False):  # scikit-learn's file where it keeps it, else its own loader
        monkeypatch.setattr(Path, "is_file", lambda self, found=found: found)
        loader = (lambda: bunch) if not found else (lambda: pytest.fail("scikit-learn imported, its file unread"))
        monkeypatch.setattr(sklearn.datasets, "load_digits", loader)
        if not found:
            monkeypatch.setattr(np, "loadtxt", lambda *args, **kwargs: pytest.fail("read a file that is not there"))
        pixels, labels = data.digits_table()
        np.testing.assert_array_equal(pixels, bunch.data)
        np.testing.assert_array_equal(labels, bunch.target)
        assert labels.dtype.kind == "i"
    monkeypatch.undo()
    ds = data.load_digits()
    assert (ds.classes, ds.image_shape, ds.source) == (tuple("0123456789"), (8, 8), "scikit-learn (bundled)")
    assert ds.x_train.shape == (1437, 64) and ds.x_test.shape == (360, 64) and ds.x_train.max() == 255
    # The point of reading the file: a digits run does not pay for importing scikit-learn.
    probe = "import sys; from jaxintro.data import load_digits; load_digits(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_auto_falls_back_to_digits_with_a_warning_when_offline():
    with pytest.raises(DataNotFoundError) as missing:  # what loading MNIST itself says here, offline
        load_idx_dataset(data.MNIST)
    with pytest.warns(UserWarning) as warned:
        ds = load_dataset("auto")
    assert [str(w.message) for w in warned] == [
        f"MNIST is not available ({missing.value}). Falling back to scikit-learn's small 8x8 'digits' set, whose "
        "accuracies are not comparable with MNIST's."]
    assert "--data-dir" in str(missing.value)  # how to get MNIST, said once, by the error
    assert ds.name == "digits" and ds.x_train.shape == (1437, 64) and ds.x_train.dtype == np.uint8
    assert ds.x_train.max() == 255


def test_an_unknown_dataset_is_refused_with_the_choices():
    # The CLI's --dataset choices refuse it first; a caller of the library gets this sentence.
    with pytest.raises(DataError) as caught:
        load_dataset("nope")
    assert str(caught.value) == "unknown dataset 'nope'; choose one of auto, mnist, fashion-mnist, digits"


@pytest.mark.parametrize("name", ["tiny", "auto"])
def test_load_dataset_downloads_only_when_asked(file_server, isolated_cache, monkeypatch, name):
    spec, arrays = small_spec()
    serve_dataset(file_server, arrays)
    spec = dataclasses.replace(spec, mirrors=(file_server.url + "/a/",))  # its own mirror: no JAXINTRO_MIRRORS
    monkeypatch.delenv("JAXINTRO_MIRRORS")
    monkeypatch.setitem(data.IDX_DATASETS, "tiny", spec)
    monkeypatch.setattr(data, "MNIST", spec)  # `auto` looks for MNIST: here, the served tiny set
    if name == "auto":  # not downloaded: `auto` falls back to the digits, with its warning
        with pytest.warns(UserWarning, match="Falling back"):
            assert load_dataset(name, download=False).name == "digits"
    else:  # not downloaded: a named dataset is not found
        with pytest.raises(DataNotFoundError, match="tiny not found"):
            load_dataset(name, download=False)
    assert not (isolated_cache / "jaxintro" / "tiny").exists()
    assert load_dataset(name).name == "tiny"  # downloaded, by default
    assert (isolated_cache / "jaxintro" / "tiny").is_dir()


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
    assert rows["fashion-mnist"] == {"dataset": "fashion-mnist", "source": str(mnist_dir), "status": (
        f"not here: {mnist_dir / 'train-images-idx3-ubyte.gz'} is mnist's train-images-idx3-ubyte: {mnist_dir} "
        "holds mnist, not fashion-mnist: pass --dataset mnist to use it, or point --data-dir at a fashion-mnist "
        "folder")}


def test_describe_sources_without_data_says_where_each_dataset_would_come_from(isolated_cache, monkeypatch):
    only_the_cache_for_fashion(monkeypatch)
    # Without a folder and with an empty cache, each IDX dataset would be downloaded, from the mirror in force.
    rows = {r["dataset"]: r for r in data.describe_sources()}
    assert rows["digits"] == {"dataset": "digits", "source": "scikit-learn (bundled)", "status": "ok (always offline)"}
    for name in ("mnist", "fashion-mnist"):
        assert rows[name] == {"dataset": name, "source": "download from http://127.0.0.1:9/",
                              "status": f"not on disk (searched {isolated_cache / 'jaxintro' / name})"}
    # A cache folder holding part of MNIST: reported as failing, with what is missing (never as downloadable).
    (isolated_cache / "jaxintro" / "mnist").mkdir(parents=True)
    (isolated_cache / "jaxintro" / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    rows = {r["dataset"]: r for r in data.describe_sources()}
    assert list(rows) == ["digits", "mnist", "fashion-mnist"]  # a failing dataset does not hide the next
    row = rows["mnist"]
    partial = isolated_cache / "jaxintro" / "mnist"
    assert row == {"dataset": "mnist", "source": "?", "status": f"FAILS: {partial}: holds only part of mnist; missing "
                   "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte[.gz]"}
    # The same folder named with --data-dir: the row says which folder fails.
    assert {r["dataset"]: r for r in data.describe_sources(partial)}["mnist"]["source"] == str(partial)


def test_a_named_folder_that_verifies_is_searched_by_later_loads_without_the_flag(tmp_path, monkeypatch):
    spec, arrays = small_spec()
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        for stem, array in arrays.items():
            write_idx(folder, stem, array)
    cache = tmp_path / "not" / "yet" / "cache"  # made on first use, parents too
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    record = cache / "jaxintro" / "tiny.location"
    assert data.search_dirs(spec, None) == [cache / "jaxintro" / "tiny"] and data.remembered_dir(spec) is None
    assert data.search_dirs(data.FASHION_MNIST, None)[-1] == Path("/usr/share/datasets/fashion-mnist")
    load_idx_dataset(spec, first / ".." / "first", download=False)
    assert record.read_text(encoding="utf-8") == f"{first.resolve()}\n"
    assert data.search_dirs(spec, None) == [cache / "jaxintro" / "tiny", first.resolve()]
    assert Path(load_idx_dataset(spec, download=False).source) == first.resolve()
    load_idx_dataset(spec, second, download=False)  # the newest folder named wins
    assert data.remembered_dir(spec) == second.resolve()
    record.write_text("\n", encoding="utf-8")
    assert data.remembered_dir(spec) is None
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert data.default_cache_dir() == tmp_path / ".cache" / "jaxintro"


# ---------------------------------------------------------------- a folder the user named


@pytest.mark.parametrize("name", ["auto", "mnist"])
@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize("folder", ["missing", "empty", "file"])
def test_a_named_data_folder_without_the_data_is_an_error_naming_it(tmp_path, monkeypatch, name, how, folder):
    path = {"missing": tmp_path / "nonexistent", "empty": tmp_path, "file": tmp_path / "notes.txt"}[folder]
    if folder == "file":
        path.write_text("not a folder")
    if how == "env":
        monkeypatch.setenv("JAXINTRO_DATA_DIR", str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no quiet fall-back to the 8x8 digits
        with pytest.raises(DataNotFoundError) as err:
            load_dataset(name, path if how == "flag" else None)
    source = "--data-dir" if how == "flag" else "JAXINTRO_DATA_DIR"
    problem = {"missing": f"{source} {path} does not exist", "file": f"{source} {path} is not a folder",
               "empty": f"{source} {path} holds none of mnist's four IDX files"}[folder]
    assert str(err.value) == (
        f"{problem} (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte,"
        " .gz or not); point it at the folder that holds them, or leave it out to use the cache and the download")


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


# ---------------------------------------------------------------- each fault's whole message


@pytest.mark.parametrize("raw, message", [
    (b"\x00\x00\x08", "f: 3 bytes is too short for an IDX header (4 bytes at least); re-download it"),
    (b"\x00\x00\x08\x00", "f: header of rank 0 is truncated (4 bytes); re-download the file"),
    (b"\x00\x00\x08\x01\x00\x00\x00", "f: header of rank 1 is truncated (7 bytes); re-download the file"),
    # Each of the magic number's three checks on its own: first byte, second byte, type byte.
    (b"\x01\x00\x08\x01", "f: bad magic number 01000801 (expected 0000 then a type byte 08-0e and a rank); "
                          "this is not an IDX file, or it is still compressed under another name"),
    (b"\x00\x01\x08\x01", "f: bad magic number 00010801 (expected 0000 then a type byte 08-0e and a rank); "
                          "this is not an IDX file, or it is still compressed under another name"),
    (b"\x00\x00\x07\x01", "f: bad magic number 00000701 (expected 0000 then a type byte 08-0e and a rank); "
                          "this is not an IDX file, or it is still compressed under another name"),
    (bytes([0, 0, 0x0C, 1]) + (3).to_bytes(4, "big") + bytes(8),
     "f: header says shape (3,) (12 data bytes) but the file holds 8; "
     "it is truncated or corrupt: delete it and re-download"),
    (bytes([0, 0, 0x08, 1]) + (5).to_bytes(4, "big") + bytes(6),
     "f: header says shape (5,) (5 data bytes) but the file holds 6; "
     "it is truncated or corrupt: delete it and re-download"),
    (b"PK\x03\x04" + bytes(12), "f: bad magic number 504b0304 (expected 0000 then a type byte 08-0e and a rank); "
                                "this is not an IDX file, or it is still compressed under another name"),
    (bytes([0, 0, 0x0E, 5]) + b"".join(d.to_bytes(4, "big") for d in (0, 3484, 3484, 3690, 25740507)),
     "f: header shape (0, 3484, 3484, 3690, 25740507) cannot be represented; the file is corrupt"),
], ids=["3 bytes", "rank 0", "cut header", "byte 0", "byte 1", "type byte", "int32 short", "too long", "zip",
        "unrepresentable"])
def test_a_bad_idx_file_gets_one_line_naming_it_and_the_fix(raw, message):
    with pytest.raises(DataError) as err:
        parse_idx(raw, "f")
    assert str(err.value) == message


def test_the_smallest_idx_files_parse():
    np.testing.assert_array_equal(parse_idx(b"\x00\x00\x08\x01" + bytes(4)), np.zeros(0, np.uint8))
    assert parse_idx(bytes([0, 0, 0x08, 1, 0, 0, 0, 1, 7])).tolist() == [7]


def test_parsed_arrays_start_on_a_64_byte_boundary():
    # On the CPU, jax.device_put shares 64-byte-aligned host memory instead of copying it.
    for n in range(1, 17):
        images = np.arange(n * 3, dtype=np.uint8).reshape(n, 3)
        out = parse_idx(idx_bytes(images))
        assert out.ctypes.data % 64 == 0
        np.testing.assert_array_equal(out, images)


def test_each_unreadable_file_gets_one_line_naming_it_and_the_fix(tmp_path, monkeypatch):
    spec, arrays = small_spec()
    folder = tmp_path / "train-images-idx3-ubyte.gz"
    folder.mkdir()
    with pytest.raises(DataError) as err:
        read_verified(folder, spec.train_images)
    assert str(err.value) == f"{folder}: is a folder, expected the IDX file train-images-idx3-ubyte[.gz]; " \
                             "remove or rename it"
    path = write_idx(tmp_path, "train-labels-idx1-ubyte", arrays["train-labels-idx1-ubyte"])
    for error, message in [(PermissionError(13, "Permission denied"),
                            f"{path}: no permission to read it; fix with: chmod a+r {path}"),
                           (OSError(5, "Input/output error"), f"{path}: cannot be read (Input/output error)")]:
        def fail(self, error=error):
            raise error
        # Tests run as root in CI, where chmod cannot deny a read: simulate the OS's answer.
        with monkeypatch.context() as m:
            m.setattr(data, "read_bounded", lambda path, limit, error=error: fail(path, error))
            with pytest.raises(DataError) as err:
                read_verified(path, spec.train_labels)
        assert str(err.value) == message


def test_a_file_of_the_wrong_content_or_shape_gets_one_line_naming_it_and_the_fix(tmp_path):
    spec, arrays = small_spec()
    images = arrays["train-images-idx3-ubyte"].copy()
    images[0, 0, 0] ^= 1
    path = write_idx(tmp_path, "train-images-idx3-ubyte", images)
    with pytest.raises(DataError) as err:
        read_verified(path, spec.train_images)
    assert str(err.value) == (
        f"{path}: SHA-256 of the decompressed file is {sha256_hex(idx_bytes(images))}, expected "
        f"{spec.train_images.sha256}; the file is corrupt or truncated: delete it and re-download, "
        "or point --data-dir at the right folder")
    # The right bytes, but a spec that promises another shape.
    path = write_idx(tmp_path, "train-images-idx3-ubyte", arrays["train-images-idx3-ubyte"])
    wrong_shape = dataclasses.replace(spec.train_images, shape=(10, 4, 4))
    with pytest.raises(DataError) as err:
        read_verified(path, wrong_shape)
    assert str(err.value) == f"{path}: shape (20, 4, 4), expected (10, 4, 4)"
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DataError) as err:
        read_verified(path, spec.train_images)
    assert str(err.value) == (f"{path}: damaged gzip data (Compressed file ended before the end-of-stream marker was "
                              "reached); delete it and re-download")


def test_another_file_of_the_same_dataset_or_of_another_is_named(mnist_dir):
    labels = mnist_dir / "train-labels-idx1-ubyte.gz"
    with pytest.raises(DataError) as err:
        read_verified(labels, data.MNIST.test_labels)
    assert not isinstance(err.value, data.WrongDatasetError)
    assert str(err.value) == (
        f"{labels}: SHA-256 of the decompressed file is {data.MNIST.train_labels.sha256}, expected "
        f"{data.MNIST.test_labels.sha256}; it is mnist's train-labels-idx1-ubyte: delete it and re-download, "
        "or point --data-dir at the right folder")
    with pytest.raises(data.WrongDatasetError) as err:
        read_verified(labels, data.FASHION_MNIST.train_labels)
    assert err.value.holds == "mnist"
    assert str(err.value) == (
        f"{labels} is mnist's train-labels-idx1-ubyte: {mnist_dir} holds mnist, not fashion-mnist: "
        "pass --dataset mnist to use it, or point --data-dir at a fashion-mnist folder")


@pytest.mark.parametrize("split", ["train", "t10k"])
def test_images_and_labels_that_disagree_get_one_line_naming_both_files(tmp_path, split):
    _, arrays = small_spec()
    arrays[f"{split}-labels-idx1-ubyte"] = arrays[f"{split}-labels-idx1-ubyte"][:-1]
    spec = spec_for(arrays)
    paths = [write_idx(tmp_path, stem, a) for stem, a in arrays.items()]
    images, labels = (paths[0], paths[1]) if split == "train" else (paths[2], paths[3])
    n = len(arrays[f"{split}-images-idx3-ubyte"])
    with pytest.raises(DataError) as err:
        load_idx_dataset(spec, tmp_path)
    assert str(err.value) == (f"{images} holds {n} images but {labels} holds {n - 1} labels; "
                              "the two files come from different sets: re-download both")


@pytest.mark.parametrize("split", ["train", "t10k"])
def test_a_label_past_the_last_class_is_refused_naming_it(tmp_path, split):
    _, arrays = small_spec()
    arrays[f"{split}-labels-idx1-ubyte"][3] = 10  # one past the last of the ten classes
    spec = spec_for(arrays)
    paths = [write_idx(tmp_path, stem, a) for stem, a in arrays.items()]
    with pytest.raises(DataError) as err:
        load_idx_dataset(spec, tmp_path)
    assert str(err.value) == f"{paths[1] if split == 'train' else paths[3]}: label 10 out of range 0..9"
    arrays[f"{split}-labels-idx1-ubyte"][3] = 9  # the last class itself is fine
    for stem, a in arrays.items():
        write_idx(tmp_path, stem, a)
    loaded = load_idx_dataset(spec_for(arrays), tmp_path)
    assert max(loaded.y_train.max(), loaded.y_test.max()) == 9


def test_a_dataset_found_nowhere_says_where_it_looked_and_how_to_get_it(file_server, isolated_cache, monkeypatch):
    spec, _ = small_spec()
    cache = isolated_cache / "jaxintro" / "tiny"
    with pytest.raises(DataNotFoundError) as err:
        load_idx_dataset(spec, download=False)
    assert str(err.value) == f"tiny not found (searched {cache})"
    monkeypatch.setenv("JAXINTRO_MIRRORS", file_server.url + "/nothing/")  # every file: 404
    with pytest.raises(DataNotFoundError) as err:
        load_idx_dataset(spec)
    message = str(err.value)
    assert message.startswith(f"tiny is not on disk (searched {cache}) and could not download ") and "Not Found" in message
    assert message.endswith("; pass --data-dir DIR with the four IDX files, or connect to the internet once")


def test_a_datasets_record_in_the_checkpoint_reads_back_the_same(tmp_path):
    spec, arrays = small_spec()
    for stem, array in arrays.items():
        write_idx(tmp_path, stem, array)
    info = data.DatasetInfo.of(load_idx_dataset(spec, tmp_path, download=False))
    record = {"name": "tiny", "image_shape": [4, 4], "classes": [str(c) for c in range(10)], "features": 16}
    assert info.to_json() == record
    assert data.DatasetInfo.from_json(record) == info
    assert data.DatasetInfo.from_json({"name": "tiny"}) is None  # a checkpoint from before this record
    # A crafted record is refused before anything is allocated for it.
    for shape, features in (([2000, 2000], 4_000_000), ([30000, 30000], 900_000_000), ([0, 0], 0), ([-8, -8], 64),
                            ("ab", 16), ([4, 4], "abc"), ([4, 8], 32), ([4], 4), (["4", "4"], 16), ([4, 4], 17)):
        with pytest.raises(ValueError, match="not a small square image"):
            data.DatasetInfo.from_json({**record, "image_shape": shape, "features": features})
    with pytest.raises(ValueError, match="name or classes"):
        data.DatasetInfo.from_json({**record, "classes": "0123456789"})


def test_mnist_like_lays_out_the_four_idx_files_with_their_digests():
    spec = data.mnist_like("x", ("a", "b", "c", "d"), ("http://mirror/",), system_dirs=("/data/x",))
    assert [(f.stem, f.sha256, f.shape) for f in spec.files] == [
        ("train-images-idx3-ubyte", "a", (60000, 28, 28)), ("train-labels-idx1-ubyte", "b", (60000,)),
        ("t10k-images-idx3-ubyte", "c", (10000, 28, 28)), ("t10k-labels-idx1-ubyte", "d", (10000,))]
    assert (spec.name, spec.mirrors, spec.system_dirs) == ("x", ("http://mirror/",), ("/data/x",))


def test_folders_holding_another_dataset_are_passed_over_and_said_so(isolated_cache, tmp_path, monkeypatch):
    # Two datasets the program knows: `tiny`'s cache and remembered folder hold `other`'s files; its own files
    # are in a later folder. `other` is on disk nowhere.
    (tiny, tiny_arrays), (other, other_arrays) = small_spec(0), small_spec(1)
    remembered, system = tmp_path / "remembered", tmp_path / "system"
    tiny = dataclasses.replace(tiny, system_dirs=(str(system),))
    other = dataclasses.replace(other, name="other", system_dirs=(str(tmp_path / "a"), str(tmp_path / "b")),
                                mirrors=("http://127.0.0.1:9/other/",))
    monkeypatch.delenv("JAXINTRO_MIRRORS")  # each dataset's own mirrors
    monkeypatch.setattr(data, "IDX_DATASETS", {"tiny": tiny, "other": other})
    monkeypatch.setattr(data, "KNOWN_FILES", {f.sha256: (spec.name, f.stem) for spec in (tiny, other)
                                              for f in spec.files})
    cache = isolated_cache / "jaxintro" / "tiny"
    for folder, arrays in ((cache, other_arrays), (remembered, other_arrays), (system, tiny_arrays)):
        folder.mkdir(parents=True)
        for stem, array in arrays.items():
            write_idx(folder, stem, array)
    (isolated_cache / "jaxintro" / "tiny.location").write_text(f"{remembered}\n", encoding="utf-8")

    found = data.find_dataset(tiny)
    assert found.folder == system and found.skipped == (f"{cache} holds other", f"{remembered} holds other")
    rows = {row["dataset"]: row for row in data.describe_sources()}
    assert rows["tiny"] == {"dataset": "tiny", "source": str(system), "status":
                            f"ok (SHA-256 verified) (passed over: {cache} holds other; {remembered} holds other)"}
    searched = f"{isolated_cache / 'jaxintro' / 'other'}, {tmp_path / 'a'}, {tmp_path / 'b'}"
    assert rows["other"] == {"dataset": "other", "source": "download from http://127.0.0.1:9/other/",
                             "status": f"not on disk (searched {searched})"}
    with pytest.raises(DataNotFoundError) as missing:
        load_idx_dataset(other, download=False)
    assert str(missing.value) == f"other not found (searched {searched})"


def test_auto_with_a_named_folder_loads_from_that_folder(tmp_path, monkeypatch):
    spec, arrays = small_spec()
    for stem, array in arrays.items():
        write_idx(tmp_path, stem, array)
    monkeypatch.setattr(data, "MNIST", spec)  # `auto` looks for MNIST: here, the tiny set in that folder
    loaded = load_dataset("auto", tmp_path)
    assert loaded.name == "tiny" and Path(loaded.source) == tmp_path


def dataset_record(side: int = 8, features: int | None = None, classes: int = 10) -> dict:
    """A checkpoint's dataset record, as `DatasetInfo.to_json` writes it."""
    return {"name": "digits", "image_shape": [side, side], "features": side * side if features is None else features,
            "classes": [str(c) for c in range(classes)]}


@pytest.mark.parametrize("record", [dataset_record(1), dataset_record(256), dataset_record(classes=1),
                                    dataset_record(classes=1000)], ids=["1x1", "256x256", "1-class", "1000-classes"])
def test_a_dataset_record_at_its_bounds_is_read_back(record):
    info = data.DatasetInfo.from_json(record)
    assert (info.name, list(info.image_shape), info.features, len(info.classes)) == (
        "digits", record["image_shape"], record["features"], len(record["classes"]))


@pytest.mark.parametrize("record, message", [
    (dataset_record(257), "image_shape [257, 257] with 66049 features is not a small square image"),
    (dataset_record(0), "image_shape [0, 0] with 0 features is not a small square image"),
    ({**dataset_record(), "image_shape": [8, 9], "features": 72}, "image_shape [8, 9] with 72 features is not a small square image"),
    (dataset_record(features=63), "image_shape [8, 8] with 63 features is not a small square image"),
    ({**dataset_record(), "image_shape": [8] * 30}, f"image_shape {str([8] * 30)[:40]} with 64 features is not a small square image"),
    (dataset_record(features=10**30), f"image_shape [8, 8] with {str(10**30)[:20]} features is not a small square image"),
    (dataset_record(classes=0), "the dataset's name or classes are not what jaxintro writes"),
    (dataset_record(classes=1001), "the dataset's name or classes are not what jaxintro writes"),
], ids=["257x257", "0x0", "not-square", "features-not-pixels", "long-shape", "long-features", "no-class", "1001-classes"])
def test_a_dataset_record_jaxintro_never_writes_is_refused_whole(record, message):
    with pytest.raises(ValueError) as error:
        data.DatasetInfo.from_json(record)
    assert str(error.value) == message

