"""`jaxintro serve`: a local page to draw a digit and see what the model sees, and the JSON API behind it.

Read it top to bottom like the training script: find the run, bind the port, load the run, find the
test images the run gets wrong (the forward pass and the gradient norms, compiled for that), compile
and warm the two functions a request runs (the preprocessing, and the saliency, which returns the
probabilities too), serve. The server owns no state beyond the loaded run; the page is three files shipped in the
package (`jaxintro/web`) served from memory: no request ever names a file on disk.

The server is the standard library's `ThreadingHTTPServer`: five JSON routes and three static files
need no framework, it adds no dependency, and a thread per connection suits a JAX model, whose
compiled calls release the GIL and are safe to run from several threads at once.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import http.server
import ipaddress
import socket
import sys
import threading
import time
import traceback
import urllib.parse
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxintro.api import ApiError, host_warning, page_url, parse_page_query, parse_predict_request
from jaxintro.data import load_dataset
from jaxintro.errors import ConfigError, DataError, JaxintroError
from jaxintro.evaluate import load_run
from jaxintro.i18n import N_, _
from jaxintro.images import load_image, warm_up
from jaxintro.jsonio import json_text
from jaxintro.listing import describe_run, newest_finished_run, run_kind
from jaxintro.runs import files_signature, is_finished, read_metrics, read_result
from jaxintro.serve_model import MISTAKE_ORDERS, Mistakes, find_mistakes, input_saliency, no_mistakes, page_strings
from jaxintro.signals import GracefulStop

MAX_BODY_BYTES = 1_000_000  # a 280x280 canvas as a PNG data URL is ~10 KB; 784 numbers as JSON ~ 15 KB
# The page sends its 280x280 canvas: an image for the API is small. 2 MP decodes to 8 MB as RGBA, where the
# command line's limit (images.MAX_PIXELS, for photos) allows 100 MB per request.
API_MAX_PIXELS = 2_000_000
DECODES = 2  # images decoded at once (each holds several copies of itself while read); others wait their turn
DECODE_WAIT = 10  # seconds a request waits for that turn before a 503
REREAD_S = 10  # the run folder read again at least this often (`App.read_once`)
REQUEST_SECONDS = 30  # a whole request, however slowly its bytes arrive (the socket's time-out restarts on each)
MAX_CONNECTIONS = 64  # open connections (a thread each); one more is answered 503 and closed
ASSETS = {  # URL path -> (file in jaxintro/web, content type); nothing else is ever served
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
}
# The page may talk to this server only: no CDN, no external font, no inline script.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
API_GET = ("/api/run", "/api/metrics", "/api/strings", "/api/mistakes")  # and POST: /api/predict


# ---------------------------------------------------------------- pure functions


def _rounded(values: Any, digits: int = 6) -> list[float]:
    """A flat list of floats rounded to `digits` decimals (a shorter answer, as precise as float32)."""
    return np.round(np.asarray(values, np.float64).reshape(-1), digits).tolist()


# ---------------------------------------------------------------- the application (no I/O but the run folder)


class App:
    """A loaded run, its compiled functions and its mistakes: everything a request needs."""

    def __init__(self, run_dir: Path, run: Any, mistakes: Mistakes) -> None:
        self.run_dir, self.run, self.mistakes = run_dir, run, mistakes
        self.image_shape = run.dataset.image_shape
        self.features = run.dataset.features
        self.classes = list(run.dataset.classes)
        self.assets = {path: (resources.files("jaxintro").joinpath("web", name).read_bytes(), kind)
                       for path, (name, kind) in ASSETS.items()}
        # The two compiled functions a request runs, warmed before the first request.
        warm_up(self.image_shape)
        self._saliency = jax.jit(functools.partial(input_saliency, apply=run.model.apply))
        jax.block_until_ready(self._saliency(run.params, jnp.zeros(self.features, jnp.float32)))
        self._order = {name: order(mistakes) for name, order in MISTAKE_ORDERS.items()}
        self._decoding = threading.BoundedSemaphore(DECODES)
        self._read_lock, self._read = threading.Lock(), {}  # what `read_once` read of the run folder, and when

    def read_once(self, what: str, read: Callable[[], Any]) -> Any:
        """`read()`, or its last value while the run's files are unchanged (the page polls: a large metrics.jsonl is
        parsed once per change), and at least every `REREAD_S` (whether its trainer still runs is in no file)."""
        with self._read_lock:
            signature = (files_signature(self.run_dir), time.monotonic() // REREAD_S)
            if what in self._read and self._read[what][0] == signature:
                return self._read[what][1]
            value = read()
            self._read[what] = (signature, value)
            return value

    def predict(self, kind: str, value: Any) -> dict[str, Any]:
        """The answer to `POST /api/predict`: digit, probabilities, the model's input and its saliency."""
        if kind == "image":
            if not self._decoding.acquire(timeout=DECODE_WAIT):
                raise ApiError(503, _("the server is busy reading other images; try again"))
            try:
                x = load_image(value, self.image_shape, name=_("the image"),
                               max_pixels=API_MAX_PIXELS).astype(np.float32) / 255.0
            except DataError as exc:
                raise ApiError(400, str(exc)) from None
            finally:
                self._decoding.release()
        else:
            x = value
        probs, saliency = self._saliency(self.run.params, jnp.asarray(x))
        probs = np.asarray(probs)
        digit = int(probs.argmax())
        return {"digit": digit, "class": self.classes[digit], "probabilities": _rounded(probs, 7),
                "input": _rounded(x), "saliency": _rounded(saliency, 7)}

    def run_info(self) -> dict[str, Any]:
        """The answer to `GET /api/run`: what the run is, and how far it got (as `jaxintro runs` sees it)."""
        config = self.run.config
        info = self.read_once("run", lambda: describe_run(self.run_dir)) or {"epochs": 0, "test_accuracy": None,
                                                                              "status": "", "result": None}
        model = f"{config.model} MLP {'-'.join(str(s) for s in self.run.model.sizes)}"
        note = self.run.usage_note()  # several members: which ones the page predicts with (a sweep: one setting's)
        if note:
            model = _("{model}: {what}").format(model=model, what=note)
        return {"run_dir": str(self.run_dir), "model": model, "members": self.run.members,
                "dataset": self.run.dataset.name, "classes": self.classes, "image_shape": list(self.image_shape),
                "features": self.features, "epochs_planned": config.epochs, "checkpoint_epoch": self.run.epoch,
                "epochs_done": info["epochs"], "test_accuracy": info["test_accuracy"],
                "finished": info["status"] == "finished", "result": info["result"]}

    def metrics(self) -> dict[str, Any]:
        """The answer to `GET /api/metrics` (polled while the run trains): its rows, and whether it has finished."""
        try:
            rows, result = self.read_once("metrics", lambda: (read_metrics(self.run_dir), read_result(self.run_dir)))
        except (OSError, ValueError) as exc:  # the folder is input: a damaged or linked file is said, once
            raise ApiError(409, _("the run folder cannot be read: {error}").format(error=exc)) from None
        return {"rows": rows, "finished": is_finished(result, self.run.config.epochs),
                # The headline, by the rule `jaxintro runs` uses (a sweep: its best setting's mean).
                "test_accuracy": run_kind(self.run.config.to_json(), rows[-1])["test_accuracy"] if rows else None}

    def mistakes_page(self, offset: int, limit: int, sort: str) -> dict[str, Any]:
        """The answer to `GET /api/mistakes`: one page of the run's mistakes in the chosen order."""
        m = self.mistakes
        chosen = self._order[sort][offset:offset + limit]
        items = [{"index": int(m.index[i]), "label": self.classes[int(m.label[i])],
                  "prediction": self.classes[int(m.prediction[i])], "confidence": round(float(m.confidence[i]), 6),
                  "grad_norm": round(float(m.grad_norm[i]), 6), "pixels": m.pixels[i].tolist()}
                 for i in chosen]
        return {"total": len(m.index), "test_images": m.total, "offset": offset, "limit": limit, "sort": sort,
                "checkpoint_epoch": self.run.epoch, "reason": m.reason, "items": items}


# ---------------------------------------------------------------- HTTP (the edge)
# `make mutation` mutates the answers above, not this protocol layer: tests/test_serve.py drives it over real sockets.


class Handler(http.server.BaseHTTPRequestHandler):  # pragma: no mutate block
    """Routes requests to the `App`; every answer is JSON or one of the page's three files."""

    protocol_version = "HTTP/1.1"  # keep-alive: the page's requests reuse one connection
    timeout = 30  # an idle or stalled connection frees its thread
    # Headers and body go out as two writes; with Nagle's algorithm the body would wait ~40 ms for the
    # client's delayed ACK of the headers on every keep-alive request.
    disable_nagle_algorithm = True
    server_version = "jaxintro"
    sys_version = ""

    @property
    def app(self) -> App:
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # quiet: the terminal shows the URL and errors, not every request

    def handle_one_request(self) -> None:
        # `timeout` bounds each read; this bounds the whole request, however slowly its bytes trickle in. The
        # clock starts at the request's first byte, not while a kept-alive connection waits for one.
        try:
            if not self.rfile.peek(1):
                self.close_connection = True
                return
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        watchdog = threading.Timer(REQUEST_SECONDS, self._hang_up)
        watchdog.daemon = True
        watchdog.start()
        try:
            super().handle_one_request()
        finally:
            watchdog.cancel()
            watchdog.join()  # had it fired, its shutdown is over before the next request is read

    def _hang_up(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def parse_request(self) -> bool:
        """The standard parsing, then the refusals that protect a learner's machine from other web sites."""
        if not super().parse_request():
            return False
        host, origin = self.headers.get("Host", ""), self.headers.get("Origin")
        if not self.server.names_this_server(host):  # type: ignore[attr-defined]
            # DNS rebinding: another site's name resolved to 127.0.0.1 reaches us with its own Host.
            error = _("the Host header {host} does not name this server; open the address it printed").format(
                host=repr(host[:100]))
        elif origin is not None and origin.lower() != f"http://{host.lower()}":
            # A page of another site (any page can send requests to 127.0.0.1): its Origin is not ours.
            error = _("requests from {origin} are refused: use the page this server serves").format(
                origin=repr(origin[:100]))
        else:
            return True
        self.close_connection = True
        self._send_json(403, {"error": error})
        return False

    def do_GET(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        routes: dict[str, Callable[[], Any]] = dict(zip(API_GET, (
            self.app.run_info,
            self.app.metrics,
            page_strings,
            lambda: self.app.mistakes_page(*parse_page_query(split.query)),
        ), strict=True))
        if split.path in routes:
            self._answer(lambda: routes[split.path]())
        elif split.path in self.app.assets:  # a dictionary lookup: no path ever reaches the file system
            body, kind = self.app.assets[split.path]
            self._send(200, body, kind)
        else:
            self._refuse(split.path)

    def do_POST(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        if split.path != "/api/predict":
            self._refuse(split.path)
            return
        body = self._read_body()
        if body is not None:
            self._answer(lambda: self.app.predict(*parse_predict_request(body, self.app.features)))

    def __getattr__(self, name: str) -> Any:
        # Any other method (PUT, DELETE, HEAD, OPTIONS, ...) gets a JSON 405, not the default 501 page.
        if name.startswith("do_"):
            return lambda: self._refuse(urllib.parse.urlsplit(self.path).path)
        raise AttributeError(name)

    def _refuse(self, path: str) -> None:
        """A 405 naming the method a known path takes, or a 404."""
        allowed = "POST" if path == "/api/predict" else "GET" if path in API_GET or path in self.app.assets else None
        if allowed is None:
            self._send_json(404, {"error": _("no such page: {path}").format(path=path[:200])})
        else:
            self._method_not_allowed(allowed)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's errors (bad request line, headers too long...) as JSON too."""
        self.close_connection = True
        self._send_json(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def _read_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding") or length is None:
            self.close_connection = True
            self._send_json(411, {"error": _("send the body with a Content-Length header")})
            return None
        try:
            size = int(length)
            if size < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self._send_json(400, {"error": _("bad Content-Length {value}").format(value=repr(length[:40]))})
            return None
        if size > MAX_BODY_BYTES:
            self.close_connection = True
            self._discard(size)
            self._send_json(413, {"error": _("the body is {size:,} bytes; the limit is {limit:,}").format(
                size=size, limit=MAX_BODY_BYTES)})
            return None
        # Only JSON: a form or text/plain body is what another site's page can send without asking (no CORS
        # preflight), and this API has no reason to take one.
        if (self.headers.get("Content-Type") or "").split(";")[0].strip().lower() != "application/json":
            self.close_connection = True
            self._discard(size)
            self._send_json(415, {"error": _("send the body as JSON, with Content-Type: application/json")})
            return None
        return self.rfile.read(size)

    def _discard(self, size: int) -> None:
        """Read and drop a refused body of up to 8 MB, a chunk at a time, so the client reads our answer.

        A socket closed with unread bytes sends a reset, which would hide the 413 from the client; a
        larger body is not worth reading: the connection is closed on it.
        """
        remaining = size if size <= 8 * MAX_BODY_BYTES else 0
        try:
            while remaining > 0:
                chunk = self.rfile.read(min(65536, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
        except OSError:
            pass

    def _answer(self, compute: Callable[[], Any]) -> None:
        try:
            self._send_json(200, compute())
        except ApiError as exc:
            self._send_json(exc.status, {"error": str(exc)})
        except Exception:  # a bug must not take the server down; it is printed for the user to report
            traceback.print_exc(file=sys.stderr)
            self._send_json(500, {"error": _("internal error (the server printed the details)")})

    def _method_not_allowed(self, allowed: str) -> None:
        self.close_connection = True  # a body may follow that we do not read
        self._send_json(405, {"error": _("{method} is not allowed here; use {allowed}").format(
            method=self.command, allowed=allowed)}, {"Allow": allowed})

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        # A run that exploded has infinite gradient norms or losses: null in JSON, which has no Infinity.
        self._send(status, json_text(obj).encode(), "application/json", headers)

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**SECURITY_HEADERS, **(headers or {})}.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):  # pragma: no mutate block
    """The threaded server; closing it also ends the connections a browser keeps open, then joins their threads."""

    daemon_threads = False  # `server_close` joins them: nothing of the server runs while Python shuts down
    request_queue_size = 128  # the listen backlog (the standard library's 5 stalls a burst of connections)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def names_this_server(self, host: str) -> bool:
        """Whether a request's Host header names this server: a loopback name or address (any port: a forwarded
        one, as `ssh -L` or an editor's port forwarding gives, reaches us under its own number).

        Bound to every interface (--host 0.0.0.0), any IP address names it too; a DNS name other than
        localhost never does: that is how DNS rebinding would reach a learner's server.
        """
        try:
            name = urllib.parse.urlsplit(f"//{host}").hostname  # lower-cased; the port and IPv6's brackets gone
        except ValueError:  # "[::1" and the like
            return False
        if name == "localhost":
            return True
        try:
            address = ipaddress.ip_address(name or "")
        except ValueError:
            return False
        bound = ipaddress.ip_address(self.server_address[0].split("%")[0])
        return address.is_loopback or bound.is_unspecified or address == bound

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            full = len(self.connections) >= MAX_CONNECTIONS
            if not full:
                self.connections.add(request)
        if full:  # a cap on threads: refuse at once rather than start one more
            with contextlib.suppress(OSError):
                body = json_text({"error": _("the server has too many open connections; try again")}).encode()
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        # An idle keep-alive connection would hold its thread until its 30 s time-out, and `server_close`
        # joins every handler thread: end them now, so Ctrl-C is immediate and no thread outlives the server.
        with self._connections_lock:
            for connection in self.connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # the client went away (or the server is closing): nothing to report
        super().handle_error(request, client_address)


class Server6(Server):  # pragma: no mutate block
    """The server on an IPv6 address (--host ::1)."""

    address_family = socket.AF_INET6


def bind(host: str, port: int) -> Server:
    """Bind the server's socket (before any slow work), or a one-line ConfigError."""
    if not host.strip():
        raise ConfigError(_("--host is empty; give an address such as 127.0.0.1 (this machine only) or 0.0.0.0"))
    try:
        families = {info[0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                           flags=socket.AI_PASSIVE)}
        server = (Server if socket.AF_INET in families else Server6)((host, port), Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(_("port {port} is already in use on {host}; choose another with --port "
                                "(or --port 0 for any free one)").format(port=port, host=host)) from None
        raise ConfigError(_("cannot serve on {host}:{port} ({reason}); check --host and --port").format(
            host=host, port=port, reason=exc.strerror or exc)) from None
    return server


def load_app(run_dir: Path, data_dir: str | None = None, setting: str | None = None) -> App:
    """Load the run, compile its functions and find its mistakes on the test set (when the data is at hand)."""
    run = load_run(run_dir, setting)
    try:
        dataset = load_dataset(run.dataset.name, data_dir or run.config.data_dir, download=False)
        mistakes = find_mistakes(run, dataset.x_test, dataset.y_test)
    except JaxintroError as exc:
        mistakes = no_mistakes(_("the test set of {dataset} is not at hand ({error}); pass --data-dir").format(
            dataset=run.dataset.name, error=exc))
    return App(run_dir, run, mistakes)


def serve(run_dir: Path | None, *, host: str = "127.0.0.1", port: int = 8000, open_browser: bool = False,
          data_dir: str | None = None, runs_root: Path = Path("runs"), setting: str | None = None) -> int:
    """`jaxintro serve`: serve the page for a run (default: the newest finished one) until Ctrl-C or SIGTERM."""
    if run_dir is None:
        run_dir = newest_finished_run(runs_root)
        if run_dir is None:
            raise ConfigError(_("no finished run under {root}/; train one first with `make train`, "
                                "or pass RUN_DIR").format(root=runs_root))
        print(_("No RUN_DIR given: serving {run_dir}, the newest finished run under {root}/ (by the time its result "
                "records, this machine's runs first); pass RUN_DIR to serve another").format(run_dir=run_dir,
                                                                                              root=runs_root))
    elif not run_dir.is_dir():
        raise ConfigError(_("{run_dir} is not a run folder; pass one written by `jaxintro train`").format(
            run_dir=run_dir))
    server = bind(host, port)
    try:
        warning = host_warning(host)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        server.app = load_app(run_dir, data_dir, setting)  # type: ignore[attr-defined]
        url = page_url(server.server_address[0], server.server_address[1])
        app: App = server.app  # type: ignore[attr-defined]
        # The signal watcher's thread stops the serving loop (which runs in this, the main, thread). It is in place
        # before the line that says "Ctrl-C to stop", so a Ctrl-C as soon as that line shows stops the server.
        with GracefulStop(on_stop=server.shutdown, stopping=N_("stopping the server")):
            print(_("Serving {run_dir} ({model} on {dataset}, epoch {epoch}) at {url}  (Ctrl-C to stop)").format(
                run_dir=run_dir, model=app.run_info()["model"], dataset=app.run.dataset.name, epoch=app.run.epoch,
                url=url), flush=True)
            if open_browser:
                import webbrowser

                webbrowser.open(url)
            server.serve_forever(poll_interval=0.2)
        print(_("Stopped."), flush=True)
        return 0
    finally:
        server.server_close()

