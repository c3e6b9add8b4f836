"""`jaxintro serve`: the JSON API (answers, refusals, load), the command (signals, ports), the page in a browser."""

from __future__ import annotations

import base64
import contextlib
import copy
import errno
import functools
import http.client
import io
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import webbrowser
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from babel.messages.pofile import read_po

from jaxintro import api, runs, serve, serve_model
from jaxintro.cli import main
from jaxintro.data import load_dataset
from jaxintro.errors import DataError
from jaxintro.evaluate import load_run, predict_proba
from jaxintro.grads import per_example_grad_norms_vmap
from jaxintro.i18n import set_language
from jaxintro.images import load_image
from jaxintro.lesson import scale_images
from test_images import EPS, SEVEN, bomb_png, drawing, image_bytes, png_bytes

ONE = (((140, 50), (140, 230)),)


# ---------------------------------------------------------------- fixtures and helpers


@contextlib.contextmanager
def running(app: serve.App) -> Iterator[tuple[str, int]]:
    """Serve `app` on a free port of 127.0.0.1 in a thread; stop it afterwards."""
    server = serve.bind("127.0.0.1", 0)
    server.app = app
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def digits_app(digits_run) -> serve.App:
    return serve.load_app(digits_run)


@pytest.fixture(scope="module")
def digits_server(digits_app) -> Iterator[tuple[str, int]]:
    with running(digits_app) as address:
        yield address


def call(address: tuple[str, int], method: str, path: str, body: bytes | str | dict | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    """One request on a fresh connection; the JSON answer decoded (or the raw bytes for a page)."""
    if isinstance(body, dict):
        body = json.dumps(body)
    if body is not None:  # as the page sends it: the server takes JSON only
        headers = {"Content-Type": "application/json", **(headers or {})}
    conn = http.client.HTTPConnection(*address, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
        kind = response.getheader("Content-Type", "")
        return response.status, dict(response.getheaders()), json.loads(raw) if "json" in kind else raw
    finally:
        conn.close()


def raw_request(address: tuple[str, int], data: bytes) -> tuple[int | None, bytes]:
    """Send bytes exactly as given (no client-side path cleaning); the status (None: a bare HTTP/0.9 answer), body."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    if not answer.startswith(b"HTTP/"):
        return None, answer
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def host(address: tuple[str, int]) -> bytes:
    """The Host header line a browser sends to the server at `address`."""
    return f"Host: {address[0]}:{address[1]}\r\n".encode()


def data_url(raw: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(raw).decode()}"


# ---------------------------------------------------------------- the API's answers


def test_predict_pixels_answers_digit_probabilities_input_and_saliency(digits_run, digits_server):
    run = load_run(digits_run)
    x_u8 = load_dataset("digits").x_test[:5]
    for image in x_u8:
        pixels = (image / 255.0).tolist()
        status, _, answer = call(digits_server, "POST", "/api/predict", {"pixels": pixels})
        assert status == 200, answer
        expected = predict_proba(run, image[None])[0]
        assert type(answer["digit"]) is int and answer["digit"] == int(expected.argmax())
        assert answer["class"] == str(answer["digit"])
        assert len(answer["probabilities"]) == 10 and sum(answer["probabilities"]) == pytest.approx(1.0, abs=1e-5)
        np.testing.assert_allclose(answer["probabilities"], expected, atol=1e-6)
        np.testing.assert_allclose(answer["input"], pixels, atol=1e-6)
        assert len(answer["saliency"]) == 64


def test_saliency_is_the_gradient_of_the_predicted_log_probability(digits_run, digits_server):
    run = load_run(digits_run)
    x = load_dataset("digits").x_test[7] / 255.0
    _, _, answer = call(digits_server, "POST", "/api/predict", {"pixels": x.tolist()})

    def log_prob(x, k):
        return jax.nn.log_softmax(run.model.apply(run.params, x[None], None)[0])[k]

    expected = jax.grad(log_prob)(jnp.asarray(x, jnp.float32), answer["digit"])
    np.testing.assert_allclose(answer["saliency"], expected, rtol=1e-4, atol=1e-6)
    assert np.abs(expected).max() > 0


def test_a_transparent_png_gives_what_predict_gives(digits_run, digits_server, tmp_path, capsys):
    # A canvas export: dark ink on alpha 0. The API and `jaxintro predict` share one preprocessing function.
    raw = png_bytes(drawing(strokes=SEVEN, background=(0, 0, 0, 0)))
    (tmp_path / "seven.png").write_bytes(raw)
    status, _, answer = call(digits_server, "POST", "/api/predict", {"image": data_url(raw)})
    assert status == 200, answer
    expected_input = load_image(tmp_path / "seven.png", (8, 8)) / 255.0
    assert expected_input.max() == 1.0
    np.testing.assert_allclose(answer["input"], expected_input, atol=1e-6)
    capsys.readouterr()
    assert main(["predict", str(digits_run), str(tmp_path / "seven.png"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["digit"] == answer["digit"]
    np.testing.assert_allclose([printed["probabilities"][c] for c in map(str, range(10))], answer["probabilities"],
                               atol=1e-5)


def test_run_metrics_and_strings(digits_run, digits_server):
    status, _, info = call(digits_server, "GET", "/api/run")
    assert status == 200
    result = runs.read_json(digits_run / runs.RESULT_FILE)
    assert info["dataset"] == "digits" and info["model"] == "jax MLP 64-256-128-10"
    assert info["classes"] == list("0123456789") and info["image_shape"] == [8, 8]
    assert info["finished"] and info["epochs_done"] == 3 and info["test_accuracy"] == result["test_accuracy"]
    status, _, metrics = call(digits_server, "GET", "/api/metrics")
    assert status == 200 and [r["epoch"] for r in metrics["rows"]] == [1, 2, 3] and metrics["finished"]
    # The page renders every label from /api/strings: each key it uses must be there.
    status, _, strings = call(digits_server, "GET", "/api/strings")
    page = call(digits_server, "GET", "/")[2].decode()
    keys = set(re.findall(r'data-i18n="([a-z_]+)"', page))
    script = call(digits_server, "GET", "/app.js")[2].decode()
    keys |= set(re.findall(r"\btext\.([a-z_]+)", script))
    assert keys and keys <= {k for k, v in strings.items() if v}, keys - set(strings)


def test_the_metrics_follow_a_run_that_is_still_training(digits_run, tmp_path):
    # The page polls /api/metrics; each answer reads metrics.jsonl as it is on disk at that moment.
    run_dir = tmp_path / "training"
    shutil.copytree(digits_run, run_dir)
    rows = [json.loads(line) for line in (run_dir / runs.METRICS_FILE).read_text().splitlines()]
    (run_dir / runs.RESULT_FILE).unlink()
    runs.write_metrics(run_dir, rows[:1])
    with running(serve.load_app(run_dir)) as address:
        first = call(address, "GET", "/api/metrics")[2]
        runs.write_metrics(run_dir, rows[:2])
        second = call(address, "GET", "/api/metrics")[2]
        runs.write_json(run_dir / runs.RESULT_FILE, {"finished": True})
        third = call(address, "GET", "/api/metrics")[2]
    assert (len(first["rows"]), first["finished"]) == (1, False)
    assert (len(second["rows"]), second["finished"]) == (2, False)
    assert (len(third["rows"]), third["finished"]) == (2, True)


def test_mistakes_are_the_wrong_test_images_with_their_gradient_norms(digits_run, digits_server):
    run = load_run(digits_run)
    data = load_dataset("digits")
    wrong = np.flatnonzero(predict_proba(run, data.x_test).argmax(1) != data.y_test)
    assert wrong.size > 0, "a 3-epoch digits run makes mistakes"
    seen = []
    offset = 0
    while True:
        status, _, page = call(digits_server, "GET", f"/api/mistakes?offset={offset}&limit=7")
        assert status == 200 and page["total"] == wrong.size and page["test_images"] == len(data.x_test)
        seen += page["items"]
        offset += 7
        if offset >= page["total"]:
            break
    assert sorted(m["index"] for m in seen) == wrong.tolist()  # every mistake once, no other image
    norms = [m["grad_norm"] for m in seen]
    assert norms == sorted(norms, reverse=True)  # the default order: largest gradient first
    # The norms are exercise 2's: the same as vmap(grad) on those examples.
    idx = np.array([m["index"] for m in seen])
    expected = per_example_grad_norms_vmap(run.params, run.model.apply, scale_images(jnp.asarray(data.x_test[idx])),
                                           jnp.asarray(data.y_test[idx]))
    np.testing.assert_allclose(norms, expected, rtol=2e-3, atol=1e-6)
    for m in seen:
        assert m["label"] == str(data.y_test[m["index"]]) and m["prediction"] != m["label"]
        assert m["pixels"] == data.x_test[m["index"]].tolist() and 0 < m["confidence"] <= 1
    ascending = call(digits_server, "GET", f"/api/mistakes?limit=100&sort=norm_asc")[2]["items"]
    assert [m["grad_norm"] for m in ascending] == sorted(norms)[:100]
    by_index = call(digits_server, "GET", f"/api/mistakes?limit=100&sort=index")[2]["items"]
    assert [m["index"] for m in by_index] == wrong.tolist()[:100]


def test_mistakes_of_other_model_styles_use_vmap_grad_norms(tmp_path):
    # The fast norms are written for the pure-JAX MLP; the other styles get the same numbers through vmap(grad).
    run_dir = tmp_path / "equinox"
    assert main(["train", "--dataset", "digits", "--model", "equinox", "--hidden", "32", "--epochs", "1",
                 "--run-dir", str(run_dir)]) == 0
    run, data = load_run(run_dir), load_dataset("digits")
    mistakes = serve_model.find_mistakes(run, data.x_test, data.y_test)
    wrong = np.flatnonzero(predict_proba(run, data.x_test).argmax(1) != data.y_test)
    assert mistakes.index.tolist() == wrong.tolist() and wrong.size > 0
    expected = per_example_grad_norms_vmap(run.params, run.model.apply, scale_images(jnp.asarray(data.x_test[wrong])),
                                           jnp.asarray(data.y_test[wrong]))
    np.testing.assert_allclose(mistakes.grad_norm, expected, rtol=1e-5)


# ---------------------------------------------------------------- the API's refusals


BAD_PREDICTS = [
    ("malformed JSON", b'{"pixels": [0, 1', 400, "malformed JSON"),
    ("not an object", b"[0, 1]", 400, "exactly one of"),
    ("neither key", b"{}", 400, "exactly one of"),
    ("both keys", b'{"pixels": [], "image": ""}', 400, "exactly one of"),
    ("wrong length", json.dumps({"pixels": [0.5] * 63}).encode(), 400, "list of 64 numbers"),
    ("784 for an 8x8 run", json.dumps({"pixels": [0.5] * 784}).encode(), 400, "list of 64 numbers"),
    ("above 1", json.dumps({"pixels": [0.0] * 63 + [1.5]}).encode(), 400, "outside [0, 1]"),
    ("below 0", json.dumps({"pixels": [-0.1] + [0.0] * 63}).encode(), 400, "outside [0, 1]"),
    ("NaN", ("{\"pixels\": [NaN" + ", 0" * 63 + "]}").encode(), 400, "NaN is not a number"),
    ("Infinity", ("{\"pixels\": [Infinity" + ", 0" * 63 + "]}").encode(), 400, "Infinity is not a number"),
    ("overflow to inf", ("{\"pixels\": [1e400" + ", 0" * 63 + "]}").encode(), 400, "outside [0, 1]"),
    ("strings", json.dumps({"pixels": ["0.5"] * 64}).encode(), 400, "numbers only"),
    ("booleans", json.dumps({"pixels": [True] * 64}).encode(), 400, "numbers only"),
    ("nulls", json.dumps({"pixels": [None] * 64}).encode(), 400, "numbers only"),
    ("pixels not a list", json.dumps({"pixels": "0.5"}).encode(), 400, "list of 64 numbers"),
    ("not a data URL", json.dumps({"image": "http://example.com/a.png"}).encode(), 400, "data URL"),
    ("bad base64", json.dumps({"image": "data:image/png;base64,@@@"}).encode(), 400, "invalid base64"),
    ("not an image", json.dumps({"image": data_url(b"hello")}).encode(), 400, "not a readable image"),
    ("no ink", json.dumps({"image": data_url(png_bytes(drawing(ink=(0, 0, 0, 0), background=(0, 0, 0, 0))))}
                          ).encode(), 400, "no ink found"),
    ("decompression bomb", json.dumps({"image": data_url(bomb_png(14000, 14000))}).encode(), 400,
     "larger than the limit"),
    ("not UTF-8", b'{"pixels": "\xff"}', 400, "malformed JSON"),
    ("nested 100,000 deep", b'{"pixels": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
    ("an integer of 400 digits", ('{"pixels": [' + "9" * 400 + ", 0" * 63 + "]}").encode(), 400, "outside [0, 1]"),
    ("a BMP", json.dumps({"image": data_url(image_bytes(drawing(), "BMP"))}).encode(), 400, "not a PNG or JPEG"),
    ("a TIFF", json.dumps({"image": data_url(image_bytes(drawing(), "TIFF"))}).encode(), 400, "not a PNG or JPEG"),
    ("an EPS", json.dumps({"image": data_url(EPS)}).encode(), 400, "not a PNG or JPEG"),
    ("over the API's pixels", json.dumps({"image": data_url(png_bytes(drawing(1500)))}).encode(), 400,
     "limit of 2,000,000 pixels"),
]


@pytest.mark.parametrize("body,status,message", [b[1:] for b in BAD_PREDICTS], ids=[b[0] for b in BAD_PREDICTS])
def test_bad_predict_requests_get_a_json_400(digits_server, body, status, message):
    got, _, answer = call(digits_server, "POST", "/api/predict", body, {"Content-Type": "application/json"})
    assert (got, message) == (status, message) and message in answer["error"], answer
    assert call(digits_server, "GET", "/api/run")[0] == 200  # and the server is still up


def test_a_body_over_1_mb_gets_413(digits_server):
    body = json.dumps({"image": data_url(b"\0" * 800_000)})  # base64 makes it ~1.07 MB
    assert len(body) > serve.MAX_BODY_BYTES
    status, headers, answer = call(digits_server, "POST", "/api/predict", body)
    assert status == 413 and "limit is 1,000,000" in answer["error"]
    # A client announcing a huge body hears "no" at once, without sending it.
    status, _ = raw_request(digits_server, b"POST /api/predict HTTP/1.1\r\n" + host(digits_server) + b"Content-Length: 999999999\r\n"
                                           b"Connection: close\r\n\r\n")
    assert status == 413


def test_a_body_without_length_is_refused(digits_server):
    status, _ = raw_request(digits_server, b"POST /api/predict HTTP/1.1\r\n" + host(digits_server) + b"Transfer-Encoding: chunked\r\n"
                                           b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert status == 411


@pytest.mark.parametrize("method,path,allowed", [
    ("GET", "/api/predict", "POST"), ("PUT", "/api/predict", "POST"), ("DELETE", "/api/run", "GET"),
    ("POST", "/api/run", "GET"), ("POST", "/api/mistakes", "GET"), ("PATCH", "/", "GET"), ("OPTIONS", "/", "GET"),
    ("POST", "/app.js", "GET"), ("TRACE", "/", "GET"),
])
def test_other_methods_get_405(digits_server, method, path, allowed):
    status, headers, answer = call(digits_server, method, path, b"{}" if method in ("POST", "PUT", "PATCH") else None)
    assert status == 405 and headers["Allow"] == allowed and method in answer["error"]


@pytest.mark.parametrize("path", ["/nope", "/api/nope", "/api/predict/extra", "/index.htm", "/web/app.js"])
def test_unknown_paths_get_a_json_404(digits_server, path):
    status, _, answer = call(digits_server, "GET", path)
    assert status == 404 and "no such page" in answer["error"]


@pytest.mark.parametrize("path", [
    "/../serve.py", "/%2e%2e/serve.py", "/../../../../../../etc/passwd", "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/..%2f..%2f..%2f..%2fetc%2fpasswd",
    "//etc/passwd", "/app.js/../../serve.py", "/web/../serve.py", "/%2e%2e%2fserve.py", "/..\\..\\serve.py",
    "/app.js%00.png", "/./app.css/..",
])
def test_path_traversal_never_reads_a_file(digits_server, path):
    status, body = raw_request(digits_server, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{digits_server[1]}\r\nConnection: close\r\n\r\n".encode())
    assert status == 404, body
    assert b"root:" not in body and b"def serve" not in body and b"import" not in body


def test_malformed_requests_get_json_errors(digits_server):
    # A request line that is not HTTP: the standard library answers in HTTP/0.9 style, a bare body.
    status, body = raw_request(digits_server, b"THIS IS NOT HTTP\r\n\r\n")
    assert status in (None, 400) and "Bad request" in json.loads(body)["error"]
    status, body = raw_request(digits_server, b"GET / HTTP/1.1\r\n" + host(digits_server) + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n")
    assert status == 431 and "error" in json.loads(body)
    assert call(digits_server, "GET", "/api/run")[0] == 200


@pytest.mark.parametrize("query,message", [
    ("offset=-1", "offset must be in"), ("limit=0", "limit must be in"), ("limit=101", "limit must be in"),
    ("limit=ten", "limit must be an integer"), ("sort=confidence", "sort must be one of"),
    ("page=2", "unknown parameter"), ("offset=", "offset must be an integer"),
    ("offset=1&&limit=2", "malformed query string"),
])
def test_bad_mistakes_queries_get_400(digits_server, query, message):
    status, _, answer = call(digits_server, "GET", f"/api/mistakes?{query}")
    assert status == 400 and message in answer["error"], answer


def test_the_page_names_no_other_host(digits_server):
    # It must work with no network: no CDN, no web font, nothing fetched from elsewhere.
    status, headers, page = call(digits_server, "GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    for path in ("/", "/app.js", "/app.css"):
        text = call(digits_server, "GET", path)[2].decode()
        urls = set(re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I)) - {"http://www.w3.org"}
        assert not urls, (path, urls)
        assert "@import" not in text and "@font-face" not in text


def test_host_warning_only_beyond_this_machine():
    assert api.host_warning("127.0.0.1") is None and api.host_warning("localhost") is None
    assert api.host_warning("::1") is None and api.host_warning("127.0.0.2") is None
    assert "anyone" in api.host_warning("0.0.0.0")


# ---------------------------------------------------------------- the command


def test_without_a_finished_run_it_says_to_train_first(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no finished run" in err and "make train" in err


def test_a_port_in_use_is_a_one_line_error(digits_run, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", str(digits_run), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"port {port} is already in use" in err


def start_serve(args: list[str], cwd: Path) -> tuple[subprocess.Popen, str]:
    """`jaxintro serve ARGS --port 0` in a subprocess; return it and the URL it printed."""
    return served_url(launch_serve(args, cwd))


def launch_serve(args: list[str], cwd: Path) -> subprocess.Popen:
    """`jaxintro serve ARGS --port 0` started, not waited for (`served_url` waits): its lines are read as they come."""
    proc = subprocess.Popen([sys.executable, "-m", "jaxintro.cli", "serve", *args, "--port", "0"], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    proc.lines = []  # type: ignore[attr-defined]
    threading.Thread(target=lambda: proc.lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    return proc


def served_url(proc: subprocess.Popen) -> tuple[subprocess.Popen, str]:
    """Wait (at most 180 s) for a launched `serve` to print its URL; return it and the URL (killed if it never does)."""
    lines = proc.lines  # type: ignore[attr-defined]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        found = [m for line in lines if (m := re.search(r"http://127\.0\.0\.1:\d+/", line))]
        if found:
            return proc, found[0][0]
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"serve did not start: {lines} {proc.stderr.read()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


class CtrlCAtTheLine(io.StringIO):
    """A stdout whose reader presses Ctrl-C the moment the line "(Ctrl-C to stop)" is printed."""

    def write(self, text: str) -> int:
        written = super().write(text)
        if "Ctrl-C to stop" in text:
            os.kill(os.getpid(), signal.SIGINT)
        return written


def test_a_ctrl_c_as_soon_as_serve_says_ctrl_c_stops_it(digits_run, monkeypatch):
    # The line promises that Ctrl-C stops the server: the signal watcher must be in place before it is printed.
    bound: list[Any] = []
    real_bind = serve.bind
    monkeypatch.setattr(serve, "bind", lambda host, port: bound.append(real_bind(host, port)) or bound[-1])
    monkeypatch.setattr(sys, "stdout", CtrlCAtTheLine())
    forced: list[bool] = []  # a lost Ctrl-C: the server is stopped here, and the test fails
    timer = threading.Timer(30, lambda: forced.append(True) or (bound and bound[0].shutdown()))
    timer.start()
    try:
        returned = serve.serve(digits_run, port=0)
    except KeyboardInterrupt as interrupted:  # the Ctrl-C met no watcher
        returned = interrupted
    finally:
        timer.cancel()
    assert returned == 0 and not forced, returned
    assert "Stopped." in sys.stdout.getvalue()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_server_cleanly(signum, digits_run, tmp_path):
    # SIGINT with the default run (the newest finished one under runs/), SIGTERM with an explicit RUN_DIR.
    (tmp_path / "runs").mkdir()
    shutil.copytree(digits_run, tmp_path / "runs" / "finished")
    unfinished = tmp_path / "runs" / "later-but-unfinished"
    shutil.copytree(digits_run, unfinished)
    (unfinished / runs.RESULT_FILE).unlink()
    args = [] if signum == signal.SIGINT else [str(tmp_path / "runs" / "finished")]
    proc, url = start_serve(args, tmp_path)
    try:
        host, port = url.removeprefix("http://").rstrip("/").split(":")
        status, _, info = call((host, int(port)), "GET", "/api/run")
        assert status == 200 and Path(info["run_dir"]).name == "finished"
        # A page left open keeps a connection alive: the stop must not wait for its 30 s time-out.
        browser_like = http.client.HTTPConnection(host, int(port), timeout=60)
        browser_like.request("GET", "/api/metrics")
        assert browser_like.getresponse().read()
        proc.send_signal(signum)
        code = proc.wait(timeout=15)  # half the connection's 30 s time-out: a stop that waited for it fails here
        browser_like.close()
        err = proc.stderr.read()
        assert code == 0, err[-3000:]
        assert "Stopped." in "".join(proc.lines) and "Traceback" not in err
        with pytest.raises(OSError):  # the port is closed
            socket.create_connection((host, int(port)), timeout=2).close()
    finally:
        stop(proc)


# ---------------------------------------------------------------- load


def test_load_200_predictions_from_20_concurrent_clients(mnist_run, capsys):
    """Bounded: 200 requests of a drawn digit on 127.0.0.1; no error, same answer; p50/p95 are printed."""
    body = json.dumps({"image": data_url(png_bytes(drawing(strokes=SEVEN, background=(0, 0, 0, 0))))})
    with running(serve.load_app(mnist_run)) as address:

        def client(n: int) -> list[tuple[float, int, int]]:
            conn = http.client.HTTPConnection(*address, timeout=60)  # one keep-alive connection, as a page uses
            out = []
            try:
                for _ in range(n):
                    start = time.perf_counter()
                    conn.request("POST", "/api/predict", body=body, headers={"Content-Type": "application/json"})
                    response = conn.getresponse()
                    answer = json.loads(response.read())
                    out.append((time.perf_counter() - start, response.status, answer.get("digit", -1)))
            finally:
                conn.close()
            return out

        alone = client(20)  # one user drawing: no queue
        start = time.perf_counter()
        with ThreadPoolExecutor(20) as pool:
            results = [r for chunk in pool.map(client, [10] * 20) for r in chunk]
        wall = time.perf_counter() - start
    assert len(results) == 200 and {status for _, status, _ in results + alone} == {200}
    assert {digit for _, _, digit in results + alone} == {7}
    latencies = sorted(1e3 * t for t, _, _ in results)
    p50, p95 = statistics.median(latencies), latencies[int(0.95 * len(latencies)) - 1]
    with capsys.disabled():
        print(f"\nserve load: 200 predict requests (a drawn PNG), 20 concurrent clients: p50 {p50:.1f} ms, "
              f"p95 {p95:.1f} ms, {200 / wall:.0f} requests/s; one client alone: p50 "
              f"{statistics.median(1e3 * t for t, _, _ in alone):.1f} ms")


# ---------------------------------------------------------------- the page, in a real browser


def browser_paths() -> tuple[str, str]:
    """The Chromium and chromedriver to use; a skip that says how to get them (a failure under CI)."""
    chromium = os.environ.get("JAXINTRO_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = os.environ.get("JAXINTRO_CHROMEDRIVER") or shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        chromium = None
    if chromium and driver:
        return chromium, driver
    reason = ("no headless browser for the page test: `make test` installs Debian's chromium and chromium-driver "
              "when run as root; elsewhere: sudo apt-get install chromium chromium-driver (and pip install -e "
              "'.[dev]' for selenium), or set JAXINTRO_CHROMIUM and JAXINTRO_CHROMEDRIVER")
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def open_browser(chromium: str, driver_path: str, *, mobile: bool = False):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--window-size=1280,1150"):
        options.add_argument(flag)
    if mobile:  # a phone: 390 CSS pixels wide, touch input
        phone = {"width": 390, "height": 844, "pixelRatio": 2, "touch": True}
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": phone})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver


def wait_until(condition, timeout: float = 30.0, what: str = "the page") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def draw(driver, strokes, *, touch: bool = False) -> None:
    """Draw `strokes` (points in the pad's 280x280 pixels) with real pointer input, then wait for the answer."""
    from selenium.webdriver.common.actions import interaction
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.pointer_input import PointerInput

    pad = driver.find_element("id", "pad")
    scale = pad.rect["width"] / 280.0
    before = int(driver.execute_script("return document.body.dataset.predictions || 0"))
    for stroke in strokes:
        (x0, y0), (x1, y1) = stroke
        kind = interaction.POINTER_TOUCH if touch else interaction.POINTER_MOUSE
        builder = ActionBuilder(driver, mouse=PointerInput(kind, "finger" if touch else "mouse"))
        pointer = builder.pointer_action
        pointer.move_to(pad, int((x0 - 140) * scale), int((y0 - 140) * scale)).pointer_down()
        for i in range(1, 13):  # twelve moves per stroke, as a hand would make many
            t = i / 12
            pointer.move_to(pad, int((x0 + (x1 - x0) * t - 140) * scale), int((y0 + (y1 - y0) * t - 140) * scale))
        pointer.pointer_up()
        builder.perform()
    wait_until(lambda: int(driver.execute_script("return document.body.dataset.predictions || 0")) > before
               and not driver.execute_script("return document.body.dataset.busy"), what="the prediction")


def page_state(driver) -> dict[str, Any]:
    return driver.execute_script("""
        const lit = (id) => { const c = document.getElementById(id);
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] > 60) n++; return n; };
        const colored = (id) => { const c = document.getElementById(id);
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - d[i + 2]) > 40) n++; return n; };
        return {
            digit: document.getElementById('digit').textContent,
            bars: [...document.querySelectorAll('#bars .bar')].map((b) => Number(b.dataset.p)),
            barWidths: [...document.querySelectorAll('#bars .bar')].map((b) => b.getBoundingClientRect().width),
            preview: [document.getElementById('preview').width, document.getElementById('preview').height,
                      lit('preview')],
            heatmap: [document.getElementById('heatmap').width, document.getElementById('heatmap').height,
                      colored('heatmap')],
            pointer: document.getElementById('pad').dataset.pointer,
        };""")


def chart_layout(driver) -> dict[str, Any]:
    """Each chart's axis labels, and its legends' extent against the chart's own width (viewBox units)."""
    return driver.execute_script("""
        const out = {};
        for (const id of ['chart-loss', 'chart-accuracy']) {
            const svg = document.getElementById(id);
            const legends = [...svg.querySelectorAll('text.legend')].map((t) => {
                const b = t.getBBox(); return {text: t.textContent, left: b.x, right: b.x + b.width}; });
            out[id] = {top: svg.querySelector('.y-top')?.textContent, bottom: svg.querySelector('.y-bottom')?.textContent,
                       width: svg.viewBox.baseVal.width, legends};
        }
        return out;""")


def assert_legends_fit(layout: dict[str, Any]) -> None:
    for chart in layout.values():
        assert chart["legends"], chart
        for legend in chart["legends"]:
            assert 0 <= legend["left"] and legend["right"] <= chart["width"], (legend, chart)


def test_the_page_in_a_real_browser(mnist_run, tmp_path):
    chromium, driver_path = browser_paths()
    proc = spanish = driver = None
    try:
        # Both servers start now: the Spanish one loads while the English page is driven, which mostly waits.
        proc, spanish = launch_serve([str(mnist_run)], tmp_path), launch_serve([str(mnist_run), "--lang", "es"], tmp_path)
        proc, url = served_url(proc)
        driver = open_browser(chromium, driver_path)
        driver.get(url)
        wait_until(lambda: driver.execute_script("return document.body.dataset.state") == "ready", what="start-up")
        assert driver.find_element("css selector", "h1").text == serve_model.page_strings()["title"]
        accuracy = json.loads((mnist_run / runs.METRICS_FILE).read_text().splitlines()[-1])["test_accuracy"]
        assert driver.find_element("id", "fact-accuracy").text == f"{100 * accuracy:.2f}%"  # as the terminal
        assert driver.execute_script("return document.querySelectorAll('#chart-loss circle').length") >= 2
        # Accuracy spans the data, not 0-1 (where train and test would lie flat along the top): curves.png's rule.
        layout = chart_layout(driver)
        bottom, top = float(layout["chart-accuracy"]["bottom"]), float(layout["chart-accuracy"]["top"])
        rows = [json.loads(line) for line in (mnist_run / runs.METRICS_FILE).read_text().splitlines()]
        values = [r[k] for r in rows for k in ("train_accuracy", "test_accuracy")]
        assert 0 < bottom <= min(values) and max(values) <= top <= 1 and top - bottom < 0.5, layout
        assert_legends_fit(layout)
        assert driver.execute_script("return document.querySelectorAll('#mistakes li canvas').length") > 0

        draw(driver, ONE)  # a "1": one vertical stroke
        state = page_state(driver)
        assert state["digit"] == "1", state
        assert len(state["bars"]) == 10 and sum(state["bars"]) == pytest.approx(1.0, abs=1e-3)
        assert state["barWidths"][1] > 0.5 * max(state["barWidths"])
        assert state["preview"][:2] == [28, 28] and state["preview"][2] > 20  # the 28x28 input has ink
        assert state["heatmap"][:2] == [28, 28] and state["heatmap"][2] > 20  # and a heatmap
        assert state["pointer"] == "mouse"

        driver.find_element("id", "clear").click()
        wait_until(lambda: driver.find_element("id", "digit").text == "–", what="the cleared pad")
        draw(driver, SEVEN)  # a "7": two strokes
        state = page_state(driver)
        assert state["digit"] == "7", state
        assert sum(state["bars"]) == pytest.approx(1.0, abs=1e-3)
        shot = Path(os.environ.get("JAXINTRO_SCREENSHOT") or tmp_path / "serve.png")
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000

        # Undo removes the diagonal: the prediction changes, and no request was lost on the way.
        driver.find_element("id", "undo").click()
        wait_until(lambda: page_state(driver)["digit"] != "7", what="the prediction after undo")
        severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, severe
        driver.quit()

        # A phone, in Spanish: the pad and its buttons fit the width, nothing scrolls sideways, a finger draws,
        # the longer legends fit, and until the run's data arrives its panels say they are loading.
        spanish, url = served_url(spanish)
        driver = open_browser(chromium, driver_path, mobile=True)
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/api/metrics*", "*/api/mistakes*"]})
        driver.get(url)
        loading = wait_until(lambda: driver.find_element("id", "fact-model").text, what="the loading state")
        assert loading == "cargando…" and driver.find_element("css selector", "#mistakes li").text == loading
        assert loading in driver.find_element("id", "chart-accuracy").text
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
        driver.get(url)
        wait_until(lambda: driver.execute_script("return document.body.dataset.state") == "ready", what="start-up")
        layout = driver.execute_script("""
            const pad = document.getElementById('pad').getBoundingClientRect();
            return {width: window.innerWidth, scroll: document.documentElement.scrollWidth, padLeft: pad.left,
                    padRight: pad.right, padWidth: pad.width,
                    buttons: [...document.querySelectorAll('button')].map((b) => b.getBoundingClientRect().height)};""")
        assert layout["width"] == 390 and layout["scroll"] <= layout["width"], layout
        assert 0 <= layout["padLeft"] and layout["padRight"] <= layout["width"] and layout["padWidth"] >= 200
        assert min(layout["buttons"]) >= 44  # finger-sized
        draw(driver, ONE, touch=True)
        state = page_state(driver)
        assert state["pointer"] == "touch" and state["digit"] == "1", state
        layout = chart_layout(driver)
        assert "entrenamiento" in [legend["text"] for legend in layout["chart-accuracy"]["legends"]]
        # Numbers as the Spanish terminal writes them: 97,57%, a probability 0,981.
        assert driver.find_element("id", "fact-accuracy").text == f"{100 * accuracy:.2f}%".replace(".", ",")
        values = [v.text for v in driver.find_elements("css selector", "#bars .value")]
        assert all(re.fullmatch(r"[01],\d{3}", v) for v in values), values
        assert_legends_fit(layout)
        driver.save_screenshot(str(tmp_path / "serve-phone.png"))
    finally:
        if driver is not None:
            driver.quit()
        for server in (proc, spanish):
            if server is None:
                continue
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            finally:
                stop(server)


# ---------------------------------------------------------------- other sites, slow clients, many images


def test_an_eps_runs_no_program_in_the_api_nor_in_predict(digits_run, digits_server, tmp_path, monkeypatch):
    # A stand-in Ghostscript on PATH leaves a mark if anything runs it (Pillow's EPS reader does, for any page).
    marks = tmp_path / "gs-ran"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "gs").write_text(f"#!/bin/sh\necho \"$@\" >> {marks}\nexit 1\n")
    (tmp_path / "bin" / "gs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    from PIL import EpsImagePlugin
    monkeypatch.setattr(EpsImagePlugin, "gs_binary", None, raising=False)  # looked up again, on this PATH
    status, _, answer = call(digits_server, "POST", "/api/predict", {"image": data_url(EPS)},
                             {"Host": "evil.example", "Origin": "http://evil.example"})
    assert status == 403 and "Host header" in answer["error"]
    status, _, answer = call(digits_server, "POST", "/api/predict", {"image": data_url(EPS)})
    assert status == 400 and "not a PNG or JPEG" in answer["error"]
    fake = tmp_path / "digit.png"
    fake.write_bytes(EPS)
    done = subprocess.run([sys.executable, "-m", "jaxintro.cli", "predict", str(digits_run), str(fake)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "JAXINTRO_LANG": "en"})
    assert done.returncode != 0 and "not a PNG or JPEG" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not marks.exists(), marks.read_text()


@pytest.mark.parametrize("headers,refused", [
    ({"Host": "evil.example:{port}"}, "Host header"),  # DNS rebinding: another name for 127.0.0.1
    ({"Host": "evil.example"}, "Host header"),
    ({"Host": "127.0.0.1:9000"}, None),  # a forwarded port (ssh -L 9000:localhost:PORT) reaches us under its own
    ({"Host": ""}, "Host header"),
    ({"Origin": "http://evil.example"}, "requests from"),  # another site's page
    ({"Origin": "null"}, "requests from"),
    ({"Host": "localhost:{port}"}, None),
    ({"Origin": "http://127.0.0.1:{port}"}, None),  # the page itself
])
def test_another_site_is_refused(digits_server, headers, refused):
    headers = {k: v.format(port=digits_server[1]) for k, v in headers.items()}
    for method, path, body in (("GET", "/api/run", None), ("POST", "/api/predict", {"pixels": [0.5] * 64}),
                               ("GET", "/", None)):
        status, _, answer = call(digits_server, method, path, body, headers)
        if refused:
            assert status == 403 and refused in answer["error"], (method, path, answer)
        else:
            assert status == 200, (method, path, answer)


def test_a_post_must_be_json(digits_server):
    body = json.dumps({"pixels": [0.5] * 64})
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, _, answer = call(digits_server, "POST", "/api/predict", body, {"Content-Type": kind})
        assert status == 415 and "application/json" in answer["error"], kind
    assert call(digits_server, "POST", "/api/predict", body, {"Content-Type": "application/json; charset=utf-8"}
                )[0] == 200


def test_at_most_two_images_are_decoded_at_once(digits_app, digits_server, monkeypatch):
    inside, most, lock = [0], [0], threading.Lock()
    real = serve.load_image

    def counting(*args, **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            time.sleep(0.3)
            return real(*args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(serve, "load_image", counting)
    body = {"image": data_url(png_bytes(drawing(strokes=SEVEN)))}
    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(lambda _: call(digits_server, "POST", "/api/predict", body)[0], range(6)))
    assert statuses == [200] * 6 and most[0] == serve.DECODES == 2


def test_a_slow_client_is_cut_off_at_the_deadline(digits_server, monkeypatch):
    monkeypatch.setattr(serve, "REQUEST_SECONDS", 1.5)
    start = time.monotonic()
    with socket.create_connection(digits_server, timeout=10) as sock:
        sock.sendall(b"GET /api/run HTTP/1.1\r\n")
        with contextlib.suppress(OSError):
            for _ in range(40):  # a header line every 0.2 s: each byte would restart a per-read time-out
                sock.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.2)
    assert time.monotonic() - start < 6, "the server held the connection past its whole-request deadline"
    assert call(digits_server, "GET", "/api/run")[0] == 200


def test_the_deadline_counts_from_a_requests_first_byte_not_the_idle_wait(digits_server, monkeypatch):
    monkeypatch.setattr(serve, "REQUEST_SECONDS", 1.0)
    with socket.create_connection(digits_server, timeout=10) as sock:
        time.sleep(1.5)  # an idle kept-alive connection, longer than a request may take
        sock.sendall(b"GET /api/run HTTP/1.1\r\n" + host(digits_server) + b"Connection: close\r\n\r\n")
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]


def test_connections_are_capped_and_the_backlog_is_normal(digits_app, monkeypatch):
    assert serve.Server.request_queue_size >= 128
    monkeypatch.setattr(serve, "MAX_CONNECTIONS", 3)
    # A server of its own: the shared one may hold another test's keep-alive connection, whose time-out could
    # free a place for the fourth one here (answered 200 and kept alive, not 503).
    with running(digits_app) as server:
        idle = [socket.create_connection(server, timeout=10) for _ in range(3)]
        try:
            time.sleep(0.3)  # the server has taken all three
            # `Connection: close`: were it served (200), the answer would end, not wait as a keep-alive one does.
            status, body = raw_request(server, b"GET /api/run HTTP/1.1\r\n" + host(server) + b"Connection: close\r\n\r\n")
            assert status == 503 and "too many open connections" in json.loads(body)["error"]
        finally:
            for sock in idle:
                sock.close()
        # Each closed connection frees its place once its thread reads the end of it; under a loaded CI machine that
        # once took over 10 s (seed 2534327416): the bound is the handler's own read time-out, after which it must.
        # The answer that ends the wait is the one judged: one more request could find the places taken again, by
        # that answer's own keep-alive connection beside idle ones whose end is not read yet.
        deadline = time.monotonic() + serve.Handler.timeout + 5
        while (status := call(server, "GET", "/api/run")[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == 200


def test_host_flags_bind_and_print_an_address_that_opens():
    assert api.page_url("0.0.0.0", 8) == "http://127.0.0.1:8/"
    assert api.page_url("::", 8) == "http://[::1]:8/" and api.page_url("::1", 8) == "http://[::1]:8/"
    assert api.page_url("127.0.0.1", 8) == "http://127.0.0.1:8/"
    with pytest.raises(serve.ConfigError, match="--host is empty"):
        serve.bind("", 0)
    server = serve.bind("0", 0)  # "0" is 0.0.0.0
    try:
        assert api.page_url(server.server_address[0], 8) == "http://127.0.0.1:8/"
    finally:
        server.server_close()


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 on this machine")
def test_serves_on_ipv6_loopback(digits_app):
    try:
        server = serve.bind("::1", 0)
    except serve.ConfigError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    server.app = digits_app
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        status, _, answer = call(("::1", server.server_address[1]), "GET", "/api/run")
        assert status == 200 and answer["features"] == 64
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_run_folder_whose_metrics_link_elsewhere_is_a_409_not_a_500(digits_app, digits_run, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(digits_run, folder, symlinks=True)
    (folder / runs.METRICS_FILE).unlink()
    (folder / runs.METRICS_FILE).symlink_to("/dev/zero")
    app = copy.copy(digits_app)
    app.run_dir = folder
    with running(app) as address:
        status, _, answer = call(address, "GET", "/api/metrics")
    assert (status, answer) == (409, {"error": "the run folder cannot be read: metrics.jsonl: a symbolic link"})


def test_an_exploded_runs_infinite_norms_are_null_not_a_500(digits_app):
    app = copy.copy(digits_app)
    m = app.mistakes
    assert len(m.index) > 0, "the digits run gets some test images wrong"
    app.mistakes = m._replace(grad_norm=np.full_like(m.grad_norm, np.inf), confidence=np.full_like(m.confidence, np.nan))
    with running(app) as address:
        status, _, answer = call(address, "GET", "/api/mistakes?limit=3")
    assert status == 200 and {(item["grad_norm"], item["confidence"]) for item in answer["items"]} == {(None, None)}


def test_a_run_whose_test_set_is_not_at_hand_serves_an_empty_mistakes_panel_that_says_why(digits_run, monkeypatch):
    def missing(name, data_dir, download):
        raise DataError(f"{name}: no copy in {data_dir}")

    monkeypatch.setattr(serve, "load_dataset", missing)
    app = serve.load_app(digits_run, data_dir="elsewhere")
    reason = "the test set of digits is not at hand (digits: no copy in elsewhere); pass --data-dir"
    for sort in serve_model.MISTAKE_ORDERS:
        assert app.mistakes_page(0, 10, sort) == {
            "total": 0, "test_images": 0, "offset": 0, "limit": 10, "sort": sort,
            "checkpoint_epoch": app.run.epoch, "reason": reason, "items": []}
    # Empty arrays that every order sorts alike (find_mistakes on a run without mistakes gives float32 and (0, 64)
    # images instead: no answer reads their dtype or width when there is nothing to show).
    m = app.mistakes
    assert [a.dtype for a in m[:6]] == [np.int64, np.int64, np.int64, np.float64, np.float64, np.uint8]
    assert [a.shape for a in m[:6]] == [(0,)] * 5 + [(0, 0)]


def test_the_page_shows_every_string_it_is_given_each_translated(monkeypatch):
    web = Path(serve.__file__).parent / "web"
    shown = set(re.findall(r'data-i18n="(\w+)"', (web / "index.html").read_text())) | set(
        re.findall(r"\btext\.(\w+)", (web / "app.js").read_text()))
    english = serve_model.page_strings()
    assert set(english) == shown  # no label the page lacks, none it never shows
    catalog = Path(serve.__file__).parent / "locale" / "es" / "LC_MESSAGES" / "jaxintro.po"
    with catalog.open("rb") as po:
        spanish = {message.id: message.string for message in read_po(po) if message.id}
    set_language("es")  # the autouse fixture sets the locale's language back as the test ends
    translated = serve_model.page_strings()
    assert (english.pop("locale"), translated["locale"]) == ("en", "es")  # how numbers are written, not a label
    for key, text in english.items():
        assert spanish.get(text), f"{key}: {text!r} is not in the Spanish catalog"
        assert translated[key] == spanish[text], key


# ---------------------------------------------------------------- whole answers (mutation survivors of serve.py)


def test_the_run_and_its_metrics_are_answered_whole(digits_run, digits_server):
    """GET /api/run and /api/metrics for the digits run, every field of each."""
    result = runs.read_json(digits_run / runs.RESULT_FILE)
    rows = runs.read_metrics(digits_run)
    status, _, info = call(digits_server, "GET", "/api/run")
    assert (status, info) == (200, {
        "run_dir": str(digits_run), "model": "jax MLP 64-256-128-10", "members": 1, "dataset": "digits",
        "classes": list("0123456789"), "image_shape": [8, 8], "features": 64, "epochs_planned": 3,
        "checkpoint_epoch": 3, "epochs_done": 3, "test_accuracy": rows[-1]["test_accuracy"], "finished": True,
        "result": result})
    status, _, metrics = call(digits_server, "GET", "/api/metrics")
    assert (status, metrics) == (200, {"rows": rows, "finished": True, "test_accuracy": rows[-1]["test_accuracy"]})


def test_a_run_folder_gone_while_served_reads_as_nothing_trained(digits_app, tmp_path):
    """Its folder deleted while the page is open: the loaded model's facts stay, its progress reads as none."""
    app = copy.copy(digits_app)
    app.run_dir = tmp_path / "gone"
    assert app.run_info() == {
        "run_dir": str(tmp_path / "gone"), "model": "jax MLP 64-256-128-10", "members": 1, "dataset": "digits",
        "classes": list("0123456789"), "image_shape": [8, 8], "features": 64, "epochs_planned": 3,
        "checkpoint_epoch": 3, "epochs_done": 0, "test_accuracy": None, "finished": False, "result": None}
    assert app.metrics() == {"rows": [], "finished": False, "test_accuracy": None}


@pytest.mark.parametrize("epochs,finished", [(3, True), (2, False)])
def test_an_older_result_without_finished_counts_its_epochs(digits_app, digits_run, tmp_path, epochs, finished):
    """A result.json of an older version has no "finished": the run finished when it trained all planned epochs."""
    folder = tmp_path / "older"
    shutil.copytree(digits_run, folder)
    result = runs.read_json(folder / runs.RESULT_FILE)
    del result["finished"]
    runs.write_json(folder / runs.RESULT_FILE, {**result, "epochs": epochs})
    app = copy.copy(digits_app)
    app.run_dir = folder
    rows = runs.read_metrics(folder)
    assert app.metrics() == {"rows": rows, "finished": finished, "test_accuracy": rows[-1]["test_accuracy"]}


def test_run_info_says_which_members_a_run_of_several_predicts_with(digits_app, monkeypatch):
    """A run of several members names, after its model, the members the page predicts with (`usage_note`, whose
    words test_evaluate_units.py checks for seeds and sweeps)."""
    monkeypatch.setattr(type(digits_app.run), "usage_note", lambda run: "the ensemble of its 2 members")
    assert digits_app.run_info()["model"] == "jax MLP 64-256-128-10: the ensemble of its 2 members"


def test_a_mistakes_page_rounds_to_6_decimals_and_the_page_files_are_served(digits_run):
    """An app built on given mistakes: its page of them, whole, and the three files of the page, byte for byte."""
    mistakes = serve_model.Mistakes(index=np.array([4, 9]), label=np.array([1, 7]), prediction=np.array([7, 1]),
                              confidence=np.array([0.123456789, 0.987654321]),
                              grad_norm=np.array([2.0000004, 3.1234567]),
                              pixels=np.array([[0] * 64, [255] * 64], np.uint8), total=360)
    app = serve.App(digits_run, load_run(digits_run), mistakes)
    web = Path(serve.__file__).parent / "web"
    with running(app) as address:
        status, _, page = call(address, "GET", "/api/mistakes?limit=1")
        files = {path: call(address, "GET", path) for path in ("/", "/index.html", "/app.css", "/app.js")}
    assert (status, page) == (200, {
        "total": 2, "test_images": 360, "offset": 0, "limit": 1, "sort": "norm", "checkpoint_epoch": 3,
        "reason": None, "items": [{"index": 9, "label": "7", "prediction": "1", "confidence": 0.987654,
                                   "grad_norm": 3.123457, "pixels": [255] * 64}]})
    assert {path: (got[0], got[1]["Content-Type"], got[2]) for path, got in files.items()} == {
        "/": (200, "text/html; charset=utf-8", (web / "index.html").read_bytes()),
        "/index.html": (200, "text/html; charset=utf-8", (web / "index.html").read_bytes()),
        "/app.css": (200, "text/css; charset=utf-8", (web / "app.css").read_bytes()),
        "/app.js": (200, "text/javascript; charset=utf-8", (web / "app.js").read_bytes()),
    }


@pytest.mark.parametrize("x64", [False, True])
def test_the_saliency_is_traced_while_the_run_loads_and_reused_by_every_request(digits_run, monkeypatch, x64):
    """Once, in float32 (with JAX_ENABLE_X64 too), before the first request: no request waits for a compile."""
    traces = []
    real = serve.input_saliency
    monkeypatch.setattr(serve, "input_saliency", lambda params, x, *, apply: (
        traces.append((x.shape, str(x.dtype))), real(params, x, apply=apply))[1])
    run = load_run(digits_run)
    with jax.enable_x64(x64):
        app = serve.App(digits_run, run, serve_model.no_mistakes("not looked for"))
        assert traces == [((64,), "float32")]
        app.predict("pixels", np.full(64, 0.5, np.float32))
        app.predict("image", png_bytes(drawing(strokes=SEVEN)))
    assert traces == [((64,), "float32")]


def test_load_app_passes_the_setting_to_load_run(digits_run):
    """--setting reaches the run: a run that is not a sweep refuses it."""
    with pytest.raises(serve.ConfigError) as error:
        serve.load_app(digits_run, setting="lr=0.001")
    assert str(error.value) == "--setting chooses one setting of a sweep; this run is not a sweep: drop --setting"


def test_load_app_never_downloads_the_test_set(digits_run, monkeypatch):
    """The mistakes panel reads the test set where it already is: serving never starts a download."""
    asked = []

    def missing(name, data_dir, download):
        asked.append((name, data_dir, download))
        raise DataError(f"{name}: no copy in {data_dir}")

    monkeypatch.setattr(serve, "load_dataset", missing)
    serve.load_app(digits_run, data_dir="elsewhere")
    assert asked == [("digits", "elsewhere", False)]


def test_bind_refusals_are_whole_one_line_messages():
    for blank in ("", "  "):
        with pytest.raises(serve.ConfigError) as error:
            serve.bind(blank, 0)
        assert str(error.value) == ("--host is empty; give an address such as 127.0.0.1 (this machine only) "
                                    "or 0.0.0.0")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(serve.ConfigError) as error:
            serve.bind("127.0.0.1", port)
    assert str(error.value) == (f"port {port} is already in use on 127.0.0.1; choose another with --port "
                                "(or --port 0 for any free one)")
    with pytest.raises(serve.ConfigError) as error:
        serve.bind("192.0.2.1", 0)  # TEST-NET-1, for documentation only: no interface here has it (nothing is sent)
    assert str(error.value) == (f"cannot serve on 192.0.2.1:0 ({os.strerror(errno.EADDRNOTAVAIL)}); "
                                "check --host and --port")


def test_bind_gives_each_address_family_its_own_server():
    """An IPv6 address gets the IPv6 server (as test_serves_on_ipv6_loopback, it needs the IPv6 loopback)."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    for address, kind, family in (("::1", serve.Server6, socket.AF_INET6),
                                  ("127.0.0.1", serve.Server, socket.AF_INET)):
        server = serve.bind(address, 0)
        try:
            assert (type(server), server.socket.family, server.server_address[0]) == (kind, family, address)
        finally:
            server.server_close()


def test_the_page_strings_in_english():
    assert serve_model.page_strings() == {
        "title": "Play with the model",
        "draw": "Draw a digit",
        "draw_hint": "Draw with the mouse or a finger; the prediction follows as you draw.",
        "clear": "Clear",
        "undo": "Undo",
        "prediction": "Prediction",
        "probabilities": "Class probabilities",
        "sees": "What the model sees",
        "sees_hint": "Your drawing after the MNIST-style preprocessing that jaxintro predict uses: "
                     "cropped to the ink, fitted into the box, centred by mass.",
        "saliency": "Saliency",
        "saliency_hint": "jax.grad of the predicted class's log-probability with respect to the input pixels: "
                         "red pixels raise it, blue ones lower it.",
        "run": "The run",
        "model": "Model",
        "dataset": "Dataset",
        "epochs": "Epochs",
        "test_accuracy": "Test accuracy",
        "training": "still training: the curves update live",
        "finished": "finished",
        "curves": "Training curves",
        "loss": "Loss",
        "accuracy": "Accuracy",
        "train": "train",
        "test": "test",
        "held_out": "held out",
        "epoch": "epoch",
        "mistakes": "Mistakes",
        "mistakes_hint": "Test images this run gets wrong, with the norm of each one's loss gradient "
                         "(exercise 2): confident mistakes have the largest.",
        "sort": "Sort by",
        "sort_norm": "gradient norm, largest first",
        "sort_norm_asc": "gradient norm, smallest first",
        "sort_index": "test-set index",
        "true_label": "true",
        "predicted": "predicted",
        "confidence": "confidence",
        "grad_norm": "gradient norm",
        "previous": "Previous",
        "next": "Next",
        "of": "of",
        "no_mistakes": "No mistakes to show.",
        "loading": "loading…",
        "error": "Error",
        "locale": "en",
    }


# ---------------------------------------------------------------- find_mistakes and App.predict, called directly


def test_find_mistakes_keeps_every_field_of_each_wrong_test_image(digits_run):
    """The digits run's wrong test images: index, label, prediction, confidence and pixels each whole, and the count."""
    run, data = load_run(digits_run), load_dataset("digits")
    probs = predict_proba(run, data.x_test)  # 360 images: the one chunk find_mistakes predicts them in
    wrong = np.flatnonzero(probs.argmax(1) != data.y_test)
    assert wrong.size > 0, "a 3-epoch digits run makes mistakes"
    m = serve_model.find_mistakes(run, data.x_test, data.y_test)
    assert (m.index.tolist(), m.label.tolist(), m.prediction.tolist(), m.confidence.tolist(), m.pixels.tolist(),
            m.total, m.reason) == (wrong.tolist(), data.y_test[wrong].tolist(), probs.argmax(1)[wrong].tolist(),
                                   probs.max(1)[wrong].tolist(), data.x_test[wrong].tolist(), len(data.x_test), None)
    expected = per_example_grad_norms_vmap(run.params, run.model.apply, scale_images(jnp.asarray(data.x_test[wrong])),
                                           jnp.asarray(data.y_test[wrong]))
    np.testing.assert_allclose(m.grad_norm, expected, rtol=2e-3, atol=1e-6)


def test_find_mistakes_without_a_wrong_image_gives_empty_arrays_typed_as_with_some(digits_run):
    """Labels that are the run's own predictions: no mistake, and each array empty with the dtype it has otherwise."""
    run, data = load_run(digits_run), load_dataset("digits")
    x = data.x_test[:50]
    y = predict_proba(run, x).argmax(1).astype(data.y_test.dtype)
    m = serve_model.find_mistakes(run, x, y)
    assert [(a.dtype, a.shape) for a in m[:6]] == [
        (np.int64, (0,)), (data.y_test.dtype, (0,)), (np.int64, (0,)), (np.float32, (0,)), (np.float32, (0,)),
        (np.uint8, (0, 64))]
    assert m[6:] == (50, None)


def test_predict_answers_whole_probabilities_and_saliency_to_7_decimals(digits_app):
    """Pixels and an image: the whole answer, the probabilities and the saliency rounded to 7 decimals, the input to 6."""
    run = digits_app.run
    saliency = jax.jit(functools.partial(serve_model.input_saliency, apply=run.model.apply))  # the program the app runs
    raw = png_bytes(drawing(strokes=SEVEN, width=40))
    u8 = load_image(raw, (8, 8))
    # 182/255 is 0.713726 in float32 but 0.713725 in float64 (80 and 131 too): the image's input is float32's.
    assert {80, 131, 182} & set(u8.tolist()), u8
    pixels = (load_dataset("digits").x_test[7] / 255.0).astype(np.float32)  # as parse_predict_request gives them
    for kind, value, x in (("pixels", pixels, pixels), ("image", raw, u8.astype(np.float32) / np.float32(255))):
        probs, grad = saliency(run.params, jnp.asarray(x))
        digit = int(np.argmax(probs))
        assert digits_app.predict(kind, value) == {
            "digit": digit, "class": str(digit), "probabilities": np.round(np.asarray(probs, np.float64), 7).tolist(),
            "input": np.round(x.astype(np.float64), 6).tolist(),
            "saliency": np.round(np.asarray(grad, np.float64), 7).tolist()}, kind


def test_an_image_kept_waiting_for_a_decoding_turn_is_a_503_to_try_again(digits_app, monkeypatch):
    """Both decoding places held past DECODE_WAIT: the next image is refused, and the two held are answered."""
    raw = png_bytes(drawing(strokes=SEVEN))
    unhindered = digits_app.predict("image", raw)
    entered, go, real = threading.Semaphore(0), threading.Event(), serve.load_image

    def held(*args, **kwargs):
        entered.release()
        go.wait(timeout=30)  # released at the end of the test (or after 30 s, should it fail)
        return real(*args, **kwargs)

    monkeypatch.setattr(serve, "load_image", held)
    monkeypatch.setattr(serve, "DECODE_WAIT", 0.2)
    with ThreadPoolExecutor(serve.DECODES + 1) as pool:
        holding = [pool.submit(digits_app.predict, "image", raw) for _ in range(serve.DECODES)]
        try:
            assert all(entered.acquire(timeout=30) for _ in holding)  # both places taken
            # In a thread of its own: an image that waited for a place without bound would hang the test here.
            error = pool.submit(digits_app.predict, "image", raw).exception(timeout=10)
        finally:
            go.set()
        answers = [future.result(timeout=30) for future in holding]
    assert isinstance(error, serve.ApiError), error
    assert (error.status, str(error)) == (503, "the server is busy reading other images; try again")
    assert answers == [unhindered] * serve.DECODES


def test_an_unreadable_image_is_a_400_that_names_it_the_image(digits_app):
    """Bytes that are no image: a 400 whose message, whole, calls them "the image"."""
    with pytest.raises(serve.ApiError) as error:
        digits_app.predict("image", b"hello")
    assert (error.value.status, str(error.value)) == (
        400, "the image: not a readable image (not a PNG or JPEG image); give a PNG or JPEG file")


# ---------------------------------------------------------------- the command in this process


class FlushedStdout(io.StringIO):
    """A stdout that remembers what had been flushed: a line printed without flushing waits in a pipe's buffer."""

    flushed = ""

    def flush(self) -> None:
        self.flushed = self.getvalue()


def serve_until_answered(run_dir: Path | None, monkeypatch, **kwargs: Any) -> dict[str, Any]:
    """`serve.serve` in this (the main) thread; a helper thread waits for the page to answer, then sends SIGINT.

    Returns what serve returned (or raised), the bound port, the page's status code, what stdout had flushed by
    then, and the arguments `load_app` and `webbrowser.open` got. Every wait is bounded: a server that never
    answers, or does not stop at the signal, is shut down here.
    """
    seen: dict[str, Any] = {"status": -1, "flushed": "", "opened": []}
    bound: list[Any] = []
    real_bind, real_load_app = serve.bind, serve.load_app
    monkeypatch.setattr(serve, "bind", lambda host, port: bound.append(real_bind(host, port)) or bound[-1])
    monkeypatch.setattr(serve, "load_app", lambda *args: seen.update(load_app=args) or real_load_app(args[0]))
    monkeypatch.setattr(webbrowser, "open", seen["opened"].append)
    monkeypatch.setattr(sys, "stdout", stdout := FlushedStdout())
    forced: list[bool] = []
    returned = threading.Event()

    def stop_when_answered() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and seen["status"] == -1:
            if bound:
                with contextlib.suppress(OSError):
                    seen["status"] = call(bound[0].server_address[:2], "GET", "/")[0]
                    seen["flushed"] = stdout.flushed
            if returned.wait(0.05):  # serve ended without being asked (it failed): nothing to stop
                break
        if seen["status"] != -1:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: serve's own handler turns it into a clean stop
        if not returned.wait(15) and bound:  # still serving: stopped here, and the test fails on `forced`
            forced.append(True)
            bound[0].shutdown()

    helper = threading.Thread(target=stop_when_answered, daemon=True)
    helper.start()
    try:
        seen["returned"] = serve.serve(run_dir, port=0, **kwargs)
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 (a broken stop fails this test, not the run)
        seen["returned"] = error
    returned.set()
    helper.join(timeout=30)
    assert not forced, "the server went on serving after SIGINT"
    seen["port"], seen["out"] = bound[0].server_address[1] if bound else -1, stdout.getvalue()
    seen["flushed_at_end"] = stdout.flushed
    return seen


@pytest.mark.parametrize("named", [True, False], ids=["RUN_DIR", "newest-finished"])
def test_serve_names_the_run_and_its_address_then_stops_at_ctrl_c(named, digits_run, tmp_path, monkeypatch, capsys):
    """One line, flushed before the page answers, with the run, its model, dataset and epoch and the address; a
    host warning on stderr; "Stopped." and 0 after Ctrl-C. Without RUN_DIR: the newest finished run under
    runs_root. The data folder and setting go to `load_app`; a browser opens only when asked."""
    root = tmp_path / "runs"
    shutil.copytree(digits_run, root / "finished")
    unfinished = root / "later-but-unfinished"
    shutil.copytree(digits_run, unfinished)
    (unfinished / runs.RESULT_FILE).unlink()
    monkeypatch.setattr(serve, "host_warning", lambda host: f"(a warning for {host})")
    run_dir = root / "finished"
    kwargs = {"data_dir": "a data folder", "setting": "a setting", "open_browser": True} if named else {}
    seen = serve_until_answered(run_dir if named else None, monkeypatch, runs_root=root, **kwargs)
    serving = (f"Serving {run_dir} (jax MLP 64-256-128-10 on digits, epoch 3) at http://127.0.0.1:{seen['port']}/"
               "  (Ctrl-C to stop)\n")
    if not named:  # which run it chose, and why, before the page is served
        serving = (f"No RUN_DIR given: serving {run_dir}, the newest finished run under {root}/ (by the time its "
                   "result records, this machine's runs first); pass RUN_DIR to serve another\n" + serving)
    assert (seen["returned"], seen["status"]) == (0, 200)
    assert (seen["flushed"], seen["out"], seen["flushed_at_end"]) == (serving, *[serving + "Stopped.\n"] * 2)
    assert seen["load_app"] == (run_dir, kwargs.get("data_dir"), kwargs.get("setting"))
    assert seen["opened"] == ([f"http://127.0.0.1:{seen['port']}/"] if named else [])
    assert capsys.readouterr().err == ("(a warning for 127.0.0.1)\n"
                                       "\nCtrl-C: stopping the server (press Ctrl-C again to quit now)\n")
    with pytest.raises(OSError):  # the port is closed
        socket.create_connection(("127.0.0.1", seen["port"]), timeout=2).close()


def test_serve_refuses_a_missing_run_before_binding_a_port(tmp_path, monkeypatch):
    """No finished run, or a RUN_DIR that is not a folder: a whole, specific message, and no port taken."""
    monkeypatch.setattr(serve, "bind", lambda *args: pytest.fail("bound a port for a run it cannot serve"))
    (tmp_path / "runs").mkdir()
    with pytest.raises(serve.ConfigError) as error:
        serve.serve(None, runs_root=tmp_path / "runs")
    assert str(error.value) == (f"no finished run under {tmp_path / 'runs'}/; train one first with `make train`, "
                                "or pass RUN_DIR")
    with pytest.raises(serve.ConfigError) as error:
        serve.serve(tmp_path / "nowhere")
    assert str(error.value) == f"{tmp_path / 'nowhere'} is not a run folder; pass one written by `jaxintro train`"
