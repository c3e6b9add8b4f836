"""Any picture of a digit to the model's input, the way MNIST was made: one function for `predict`, `serve` and its API.

Two stages, the I/O edge first and the pure, jitted core second:

1. `read_ink` (PIL + NumPy): refuse an oversized image from its header, before decoding; decode;
   composite transparency onto white (a canvas export is dark ink on alpha 0); turn the ink light
   on dark, MNIST's convention; subtract the paper; refuse an image with no ink; crop loosely to
   the ink and fit it, square, into a fixed canvas of 4x the model's side.
2. `fit_like_mnist` (jnp, jitted once per output side): crop to the ink box, scale its longer side
   to the dataset's box and centre it as the dataset did: for MNIST into 20x20, then shifted so the
   centre of mass sits in the middle of 28x28 (as LeCun et al. prepared it); for the 8x8 digits
   into the whole frame, centred by its box.

`load_image` chains the two and returns uint8 pixels, as the datasets hold them.
"""

from __future__ import annotations

import functools
import io
import re
import warnings
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxintro.errors import DataError
from jaxintro.i18n import _, printable

MAX_PIXELS = 25_000_000  # refused before decoding: 25 MP is 100 MB as RGBA, a photo from any phone up to 24 MP
# The only formats decoded: what the page and the README accept. Pillow opens about 40 others when asked for
# none, and some run external programs (EPS runs Ghostscript) on bytes from anyone who can send them.
FORMATS = ("PNG", "JPEG")
WORK_SIDE = 2048  # larger images are box-reduced to about this side right after decoding
NO_INK_LEVEL = 32  # an image whose darkest stroke is fainter than this (of 255) over its paper holds no digit
CANVAS_PER_SIDE = 4  # the jitted stage reads a canvas of 4x the output side: 112x112 for MNIST
# How each dataset framed its digits: (box the ink's longer side is scaled to, centred by mass?).
# MNIST: fitted into 20x20, then centred by mass in 28x28. scikit-learn's 8x8 digits fill their frame
# (every one is 8 pixels tall), centred by their box: a shift by mass would push ink out of the frame.
FRAMING = {28: (20, True), 8: (8, False)}

ImageSource = Path | bytes


def framing(side: int) -> tuple[int, bool]:
    """The box the ink is fitted into for an output of `side` pixels, and whether it is then centred by mass."""
    return FRAMING.get(side, (max(1, round(side * 20 / 28)), True))


def read_ink(source: ImageSource, canvas: int, *, name: str | None = None, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """Decode a PNG/JPEG (path or bytes) into a `canvas` x `canvas` float32 ink map in [0, 1], light ink on black."""
    from PIL import Image, UnidentifiedImageError

    label = name or (printable(source) if isinstance(source, Path) else _("the image"))
    too_big = _("{name}: the image is larger than the limit of {limit:,} pixels; "
                "shrink it (a digit needs a few hundred pixels a side) and try again").format(
        name=label, limit=max_pixels)
    if isinstance(source, Path) and source.exists() and not source.is_file():  # a FIFO or a device would hang
        raise DataError(_("{name}: not a regular file; give a PNG or JPEG file").format(name=label))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own limit is lower
            img = Image.open(source if isinstance(source, Path) else io.BytesIO(source), formats=FORMATS)
        with img:
            # Only the header has been read so far: refuse a decompression bomb before it is decoded.
            if img.width * img.height > max_pixels:
                raise DataError(too_big + " " + _("(it is {width}x{height}, {pixels:,} pixels)").format(
                    width=img.width, height=img.height, pixels=img.width * img.height))
            img.draft("RGB", (WORK_SIDE, WORK_SIDE))  # JPEG: decode at a reduced scale (a no-op for PNG)
            img.load()
            img = _eight_bit(img)
            # Grey first: `reduce` refuses 1-bit, palette and 16-bit modes, which PNGs often use.
            gray_img = _on_white(img).convert("L")
            factor = max(1, max(gray_img.size) // WORK_SIDE)
            if factor > 1:
                gray_img = gray_img.reduce(factor)
            gray = np.asarray(gray_img, dtype=np.float32)
    except Image.DecompressionBombError as exc:  # Pillow's own check, at twice its limit, fired first
        pixels = re.search(r"\((\d+) pixels\)", str(exc))
        has = " " + _("(it has {pixels:,} pixels)").format(pixels=int(pixels[1])) if pixels else ""
        raise DataError(too_big + has) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        # Pillow names the in-memory file it was given (`<_io.BytesIO object at 0x...>`): say what is wrong instead.
        error = _("not a PNG or JPEG image") if isinstance(exc, UnidentifiedImageError) else exc
        raise DataError(_("{name}: not a readable image ({error}); give a PNG or JPEG file").format(
            name=label, error=error)) from None
    # Ink on paper is dark on light: MNIST is light on dark. The border is the paper: judge by it.
    border = np.concatenate([gray[0], gray[-1], gray[:, 0], gray[:, -1]])
    if np.median(border) > 127:
        gray, border = 255.0 - gray, 255.0 - border
    ink = np.clip(gray - np.median(border), 0.0, 255.0)
    check_ink(ink, label)
    return _fit_in_canvas(ink, canvas) / 255.0


def check_ink(ink: np.ndarray, name: str) -> None:
    """Refuse an input with no ink (0..255, light on dark): a blank image has no digit to guess, image or pixels."""
    if float(np.max(ink, initial=0.0)) < NO_INK_LEVEL:
        raise DataError(_("{name}: no ink found (the image is blank or uniform); "
                          "give a picture of one digit, dark on light or light on dark").format(name=name))


def _eight_bit(img):
    """A 16-bit grey image scaled to 8 bits (convert("L") would clip it), its transparent value kept as alpha."""
    from PIL import Image

    if img.mode not in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        return img
    values = np.asarray(img)
    gray = Image.fromarray((np.clip(values, 0, 65535) // 257).astype(np.uint8), "L")
    key = img.info.get("transparency")
    if isinstance(key, int):
        gray.putalpha(Image.fromarray(np.where(values == key, 0, 255).astype(np.uint8), "L"))
    return gray


def _on_white(img):
    """The image composited onto white paper when it has transparency, else itself."""
    from PIL import Image

    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return img


def _fit_in_canvas(ink: np.ndarray, canvas: int) -> np.ndarray:
    """Crop loosely to the ink, pad it square and resize it to `canvas` x `canvas` (float32, same range)."""
    from PIL import Image

    rows, cols = np.nonzero(ink > 0.1 * ink.max())
    ink = ink[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    # A margin, so the resampling filter does not clip the strokes' edges: the jitted stage crops tightly.
    side = max(ink.shape) + 2 * (max(ink.shape) // 10 + 1)
    square = np.zeros((side, side), np.float32)
    top, left = (side - ink.shape[0]) // 2, (side - ink.shape[1]) // 2
    square[top:top + ink.shape[0], left:left + ink.shape[1]] = ink
    small = Image.fromarray(square, mode="F").resize((canvas, canvas), Image.Resampling.LANCZOS)
    return np.clip(np.asarray(small, dtype=np.float32), 0.0, None)


def fit_like_mnist(canvas: Float[Array, "c c"], *, side: int, box: int,
                   by_mass: bool = True) -> Float[Array, "side side"]:
    """Crop to the ink, scale its longer side to `box`, centre it (by mass) in `side` x `side`; peak 1; blank: 0."""
    c = canvas.shape[0]
    peak = jnp.max(canvas)
    mask = canvas > 0.1 * peak
    index = jnp.arange(c)

    def extent(occupied):
        first = jnp.min(jnp.where(occupied, index, c))
        last = jnp.max(jnp.where(occupied, index, -1)) + 1
        return first, last

    top, bottom = extent(mask.any(axis=1))
    left, right = extent(mask.any(axis=0))
    scale = box / jnp.maximum(jnp.maximum(bottom - top, right - left), 1).astype(jnp.float32)
    # Output = input * scale + translation (pixel i spans [i, i + 1]): the box's centre goes to the frame's.
    translation = side / 2 - scale * jnp.stack([top + bottom, left + right]).astype(jnp.float32) / 2
    scales = jnp.stack([scale, scale])

    def resample(shift):
        frame = jax.image.scale_and_translate(canvas, (side, side), (0, 1), scales, translation + shift,
                                              method="lanczos3", antialias=True)
        return jnp.clip(frame, 0.0, None)  # Lanczos rings slightly below zero beside strokes

    frame = resample(jnp.zeros(2, jnp.float32))
    if not by_mass:
        return jnp.where(peak > 0, frame / jnp.maximum(jnp.max(frame), 1e-12), 0.0)
    # MNIST then moved each digit by whole pixels so its centre of mass sits at the frame's centre.
    centres = jnp.arange(side, dtype=jnp.float32) + 0.5
    mass = jnp.maximum(jnp.sum(frame), 1e-12)
    com = jnp.stack([jnp.sum(frame.sum(axis=1) * centres), jnp.sum(frame.sum(axis=0) * centres)]) / mass
    frame = resample(jnp.round(side / 2 - com))
    frame = frame / jnp.maximum(jnp.max(frame), 1e-12)
    return jnp.where(peak > 0, frame, 0.0)


@functools.lru_cache(maxsize=4)
def _jitted_fit(side: int) -> Callable:
    """`fit_like_mnist` for one output side, compiled on first use (one canvas shape per side)."""
    box, by_mass = framing(side)
    return jax.jit(functools.partial(fit_like_mnist, side=side, box=box, by_mass=by_mass))


def load_image(source: ImageSource, image_shape: tuple[int, int], *, name: str | None = None,
               max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """A PNG/JPEG (path or bytes) as the model's uint8 input (features,): MNIST-style, white ink on black."""
    side = int(image_shape[0])
    canvas = read_ink(source, CANVAS_PER_SIDE * side, name=name, max_pixels=max_pixels)
    frame = np.asarray(_jitted_fit(side)(jnp.asarray(canvas)))
    return np.round(frame * 255.0).astype(np.uint8).reshape(-1)


def warm_up(image_shape: tuple[int, int]) -> None:
    """Compile the jitted stage for `image_shape` now (a server does this before its first request)."""
    side = int(image_shape[0])
    canvas = np.zeros((CANVAS_PER_SIDE * side,) * 2, np.float32)
    canvas[side:-side, 2 * side - 2:2 * side + 2] = 1.0  # a "1"
    jax.block_until_ready(_jitted_fit(side)(jnp.asarray(canvas)))
