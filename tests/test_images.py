"""Pictures to model inputs: transparency, blank images, decompression bombs, one compile, MNIST's own geometry."""

from __future__ import annotations

import io
import os
import struct
import time
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image, ImageDraw

from jaxintro import images
from jaxintro.errors import DataError
from jaxintro.images import MAX_PIXELS, fit_like_mnist, load_image


def drawing(size: int = 280, *, strokes=(((140, 50), (140, 230)),), background=(255, 255, 255, 255),
            ink=(17, 17, 17, 255), width: int = 20) -> Image.Image:
    """A pad-like RGBA drawing: `strokes` of `ink` on `background` (alpha 0 for a canvas export)."""
    img = Image.new("RGBA", (size, size), background)
    draw = ImageDraw.Draw(img)
    for stroke in strokes:
        draw.line(stroke, fill=ink, width=width, joint="curve")
    return img


def png_bytes(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


SEVEN = (((80, 60), (200, 60)), ((200, 60), (120, 230)))
# An EPS file: Pillow reads its header, then runs Ghostscript to draw it.
EPS = (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 28 28\n"
       b"newpath 14 4 moveto 14 24 lineto 3 setlinewidth stroke\nshowpage\n%%EOF\n")


def image_bytes(img: Image.Image, kind: str) -> bytes:
    out = io.BytesIO()
    img.convert("RGB").save(out, format=kind)
    return out.getvalue()


@pytest.mark.parametrize("kind", ["BMP", "TIFF", "GIF", "WEBP", "EPS"])
def test_only_png_and_jpeg_are_decoded(kind, tmp_path):
    raw = EPS if kind == "EPS" else image_bytes(drawing(strokes=SEVEN), kind)
    for source in (raw, tmp_path / "digit.png"):
        (tmp_path / "digit.png").write_bytes(raw)
        with pytest.raises(DataError, match="not a PNG or JPEG image"):
            load_image(source, (28, 28))
    assert load_image(image_bytes(drawing(strokes=SEVEN), "JPEG"), (28, 28)).max() == 255


def test_a_sixteen_bit_grey_image_is_read_at_its_own_contrast():
    # Dark ink at a quarter of full scale on white paper, in 16 bits: clipping to 8 bits would make it all white.
    values = np.full((280, 280), 65535, np.uint16)
    values[60:220, 130:150] = 16384
    raw = png_bytes(Image.fromarray(values))
    assert Image.open(io.BytesIO(raw)).mode.startswith("I")
    digit = load_image(raw, (28, 28))
    assert digit.max() == 255 and (digit > 0).sum() > 20


@pytest.mark.timeout(60)  # a FIFO opened for reading blocks for ever: a broken guard fails here, never hangs
@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir], ids=["fifo", "folder"])
def test_a_path_that_is_not_a_regular_file_is_refused_by_name_without_waiting(make, tmp_path):
    make(tmp_path / "digit.png")
    with pytest.raises(DataError) as err:
        load_image(tmp_path / "digit.png", (28, 28))
    assert str(err.value) == f"{tmp_path / 'digit.png'}: not a regular file; give a PNG or JPEG file"


def test_a_transparent_canvas_export_reads_like_the_same_drawing_on_white():
    # What a browser's canvas.toDataURL() gives: dark ink, and alpha 0 (over black RGB) everywhere else.
    transparent = load_image(png_bytes(drawing(strokes=SEVEN, background=(0, 0, 0, 0))), (28, 28))
    on_white = load_image(png_bytes(drawing(strokes=SEVEN)), (28, 28))
    assert transparent.max() == 255, "the ink must survive the transparent background"
    np.testing.assert_array_equal(transparent, on_white)


@pytest.mark.parametrize("background,ink", [
    ((255, 255, 255, 255), (255, 255, 255, 255)),  # white on white
    ((0, 0, 0, 255), (0, 0, 0, 255)),  # black
    ((0, 0, 0, 0), (0, 0, 0, 0)),  # fully transparent
    ((128, 128, 128, 255), (128, 128, 128, 255)),  # uniform grey
    ((255, 255, 255, 255), (245, 245, 245, 255)),  # a stroke too faint to be ink
])
def test_an_image_with_no_ink_is_an_error_not_a_guess(background, ink):
    with pytest.raises(DataError) as err:
        load_image(png_bytes(drawing(background=background, ink=ink)), (28, 28), name="pad.png")
    assert str(err.value) == ("pad.png: no ink found (the image is blank or uniform); "
                              "give a picture of one digit, dark on light or light on dark")


def bomb_png(width: int, height: int) -> bytes:
    """A valid 1-bit PNG of `width` x `height` white pixels: tiny on disk, huge once decoded."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    compressor = zlib.compressobj(9)
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


@pytest.mark.parametrize("side", [14000, 10000])
def test_an_oversized_image_is_refused_from_its_header(side, tmp_path, monkeypatch):
    path = tmp_path / "huge.png"
    path.write_bytes(bomb_png(side, side))
    assert path.stat().st_size < 300_000

    def no_decoding(self):
        raise AssertionError("the image was decoded before its size was checked")

    # Decoding 10^8 pixels would take seconds and gigabytes: the refusal must come from the header alone.
    monkeypatch.setattr(Image.Image, "load", no_decoding)
    with pytest.raises(DataError) as info:
        load_image(path, (28, 28))
    # Past twice its own limit Pillow refuses first (its message gives the count); below, the header does.
    size = {14000: "(it has 196,000,000 pixels)", 10000: "(it is 10000x10000, 100,000,000 pixels)"}[side]
    assert str(info.value) == (f"{path}: the image is larger than the limit of {MAX_PIXELS:,} pixels; shrink it "
                               f"(a digit needs a few hundred pixels a side) and try again {size}")


@pytest.mark.parametrize("mode", ["1", "P", "I;16", "RGBA"])
def test_a_large_image_in_any_png_mode_is_read(mode):
    # Wider than the working size, so it is reduced after decoding: every mode must survive that.
    img = Image.new("L", (4200, 3000), 255)
    ImageDraw.Draw(img).line(((2100, 500), (2100, 2500)), fill=0, width=200)
    out = io.BytesIO()
    (img.convert(mode) if mode != "I;16" else img.convert("I").point(lambda v: v * 256).convert("I;16")).save(
        out, format="PNG")
    x = load_image(out.getvalue(), (28, 28)).reshape(28, 28)
    assert x.max() == 255 and x[:, 14].sum() > x[:, 3].sum()  # a vertical stroke in the middle


def test_an_image_at_the_limit_is_still_read():
    width = 5000
    img = Image.new("L", (width, MAX_PIXELS // width), 255)
    ImageDraw.Draw(img).line(((2500, 1000), (2500, 4000)), fill=0, width=300)
    out = io.BytesIO()
    img.save(out, format="PNG")
    assert load_image(out.getvalue(), (28, 28)).max() == 255


def test_a_digit_anywhere_and_at_any_size_gives_the_same_input():
    # The point of MNIST's preprocessing: position and size of the drawing do not matter.
    seven = (((10, 10), (60, 10)), ((60, 10), (25, 90)))
    small = drawing(strokes=[[(x + 150, y + 170) for x, y in s] for s in seven], width=8)  # low right
    large = drawing(strokes=[[(2.5 * x + 40, 2.5 * y + 20) for x, y in s] for s in seven], width=20)  # 2.5x
    a = load_image(png_bytes(small), (28, 28)).astype(float)
    b = load_image(png_bytes(large), (28, 28)).astype(float)
    assert np.corrcoef(a, b)[0, 1] > 0.95


def test_mnist_geometry_20_pixel_box_centred_by_mass():
    x = load_image(png_bytes(drawing(strokes=SEVEN)), (28, 28)).reshape(28, 28).astype(float)
    rows, cols = np.nonzero(x > 0.1 * 255)
    assert max(np.ptp(rows), np.ptp(cols)) + 1 in (20, 21)
    ys, xs = np.indices(x.shape)
    assert abs((ys * x).sum() / x.sum() - 13.5) <= 0.5
    assert abs((xs * x).sum() / x.sum() - 13.5) <= 0.5


def test_digits_runs_get_an_8x8_input_that_fills_the_frame_like_their_data():
    x = load_image(png_bytes(drawing(strokes=SEVEN)), (8, 8)).reshape(8, 8)
    assert x.shape == (8, 8) and x.max() == 255
    rows, _ = np.nonzero(x > 0.1 * 255)
    assert np.ptp(rows) + 1 == 8  # scikit-learn's digits are all 8 pixels tall


def test_bytes_and_a_file_give_identical_inputs(tmp_path):
    # The API gets bytes, `predict` gets a path: the same function, the same pixels.
    raw = png_bytes(drawing(strokes=SEVEN, background=(0, 0, 0, 0)))
    (tmp_path / "seven.png").write_bytes(raw)
    np.testing.assert_array_equal(load_image(raw, (28, 28)), load_image(tmp_path / "seven.png", (28, 28)))


@pytest.mark.parametrize("by_mass", [True, False])
def test_the_jitted_stage_computes_in_float32_with_x64_on_too(by_mass):
    canvas = jnp.zeros((112, 112)).at[30:80, 50:58].set(1.0).at[30:36, 40:90].set(0.7)
    expected = fit_like_mnist(canvas, side=28, box=20, by_mass=by_mass)
    with jax.enable_x64(True):  # JAX_ENABLE_X64=1: every dtype the stage computes in is written out
        out = fit_like_mnist(canvas, side=28, box=20, by_mass=by_mass)
    assert out.dtype == expected.dtype == jnp.float32
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("x64", [False, True])
def test_the_jitted_stage_is_traced_once_per_side(monkeypatch, x64):
    traces = []
    real = images.fit_like_mnist
    monkeypatch.setattr(images, "fit_like_mnist",
                        lambda canvas, **kw: (traces.append(kw["side"]), real(canvas, **kw))[1])
    images._jitted_fit.cache_clear()
    try:
        with jax.enable_x64(x64):  # with x64 on, a float64 warm-up canvas would compile a program of its own
            images.warm_up((28, 28))  # what a server does before its first request
            assert traces == [28]  # compiled now, and reused by the images that follow
            for strokes in (SEVEN, (((140, 50), (140, 230)),), (((60, 60), (220, 220)), ((220, 60), (60, 220)))):
                load_image(png_bytes(drawing(strokes=strokes)), (28, 28))
            load_image(png_bytes(drawing(strokes=SEVEN)), (8, 8))
    finally:
        images._jitted_fit.cache_clear()  # later tests get the real function, compiled afresh
    assert traces == [28, 8]


@pytest.mark.parametrize("by_mass", [True, False])
def test_the_jitted_stage_is_total_a_blank_canvas_gives_zeros(by_mass):
    out = fit_like_mnist(jnp.zeros((112, 112)), side=28, box=20, by_mass=by_mass)
    assert out.shape == (28, 28) and float(jnp.abs(out).max()) == 0.0


def test_a_file_that_is_not_an_image_is_a_data_error(tmp_path):
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    with pytest.raises(DataError) as err:
        load_image(Path(bad), (28, 28))
    assert str(err.value) == f"{bad}: not a readable image (not a PNG or JPEG image); give a PNG or JPEG file"


def test_other_sides_keep_mnists_proportions():
    # MNIST fits the ink in 20 of 28 pixels, then centres it by mass; the 8x8 digits fill the whole canvas.
    assert images.framing(28) == (20, True) and images.framing(8) == (8, False)
    assert images.framing(56) == (40, True) and images.framing(14) == (10, True)
    assert images.framing(1) == (1, True)  # never an empty box


def test_the_ink_box_is_scaled_into_the_box_and_centred_in_the_frame():
    canvas = np.zeros((112, 112), np.float32)
    canvas[10:50, 30:50] = 4.0  # 40 tall, 20 wide, off centre, peak 4: scale 20/40 puts it on rows 4-23, columns 9-18
    canvas[60:70, 80:100] = 0.4  # a tenth of the peak exactly: not ink, not part of the box
    for by_mass in (False, True):  # a uniform box's centre of mass is its centre: no shift
        out = np.asarray(fit_like_mnist(jnp.asarray(canvas), side=28, box=20, by_mass=by_mass))
        rows, cols = np.nonzero(out > 0.5)
        assert (rows.min(), rows.max() + 1, cols.min(), cols.max() + 1) == (4, 24, 9, 19)
        assert out.min() >= 0.0 and out.max() == pytest.approx(1.0)
        # Any peak becomes 1, and a faint canvas (its mass under 1 too) is placed as the same canvas at full strength.
        faint = np.asarray(fit_like_mnist(jnp.asarray(canvas / 8000), side=28, box=20, by_mass=by_mass))
        np.testing.assert_allclose(faint, out, atol=1e-6)


def test_a_lopsided_digit_is_moved_by_whole_pixels_until_its_mass_is_centred():
    canvas = np.zeros((112, 112), np.float32)
    canvas[10:90, 20:30] = 1.0  # an L: most of its mass low and left of its box's centre
    canvas[80:90, 20:70] = 1.0
    centres = np.arange(28) + 0.5

    def centre_of_mass(out):
        return out.sum(axis=1) @ centres / out.sum(), out.sum(axis=0) @ centres / out.sum()

    boxed = centre_of_mass(np.asarray(fit_like_mnist(jnp.asarray(canvas), side=28, box=20, by_mass=False)))
    moved = centre_of_mass(np.asarray(fit_like_mnist(jnp.asarray(canvas), side=28, box=20)))  # by mass: the default
    assert boxed[0] > 15 and boxed[1] < 12  # box-centred, the mass sits low and left
    assert abs(moved[0] - 14) <= 0.5 and abs(moved[1] - 14) <= 0.5


def gray_png(pixels: np.ndarray) -> bytes:
    """An 8-bit grey PNG of exactly these pixel values."""
    return png_bytes(Image.fromarray(pixels.astype(np.uint8), mode="L"))


def test_the_canvas_is_the_ink_over_the_paper_cropped_to_its_box_with_a_margin():
    gray = np.full((48, 48), 200)  # light paper: the ink is dark, and 200 - 50 = 150 over the paper
    gray[10:30, 14:17] = 50  # an L, 20 rows by 12 columns: its stem
    gray[27:30, 14:26] = 50  # and its foot
    gray[40, 40] = 185  # 15 over the paper, a tenth of the peak: too faint to count in the ink's box
    side = 20 + 2 * (20 // 10 + 1)  # the box's longer side and a margin of a tenth of it (and a pixel) each way
    square = np.zeros((side, side), np.float32)
    top, left = (side - 20) // 2, (side - 12) // 2  # the box centred in the square
    square[top:top + 20, left:left + 3] = 150
    square[top + 17:top + 20, left:left + 12] = 150
    # At the square's own size the canvas is the square, in [0, 1]; at any other, its Lanczos resampling.
    np.testing.assert_array_equal(images.read_ink(gray_png(gray), side), square / 255.0)
    resampled = np.asarray(Image.fromarray(square, mode="F").resize((56, 56), Image.Resampling.LANCZOS))
    assert resampled.min() < 0  # (Lanczos rings below zero beside the strokes: the canvas has no negative ink)
    np.testing.assert_allclose(images.read_ink(gray_png(gray), 56), np.clip(resampled, 0, None) / 255.0, rtol=1e-6)


@pytest.mark.parametrize("paper,ink", [(127, 255), (128, 0)])
def test_paper_lighter_than_mid_grey_means_dark_ink(paper, ink):
    gray = np.full((30, 30), paper)
    gray[5:25, 13:17] = ink  # 128 over (or under) the paper, either way: light ink on 127, dark on 128
    canvas = images.read_ink(gray_png(gray), 26)
    assert canvas.max() == pytest.approx(128 / 255, rel=1e-6) and canvas.min() == 0.0


def test_ink_at_the_threshold_is_a_digit_and_bytes_without_a_name_are_the_image():
    gray = np.full((30, 30), 255)
    gray[5:25, 13:17] = 255 - images.NO_INK_LEVEL
    assert images.read_ink(gray_png(gray), 26).max() == pytest.approx(images.NO_INK_LEVEL / 255, rel=1e-6)
    gray[5:25, 13:17] = 255 - images.NO_INK_LEVEL + 1
    with pytest.raises(DataError) as err:
        load_image(gray_png(gray), (28, 28))
    assert str(err.value).startswith("the image: no ink found")


def test_a_damaged_image_says_what_pillow_found():
    with pytest.raises(DataError) as err:
        load_image(png_bytes(drawing(strokes=SEVEN))[:300], (28, 28))  # the header, then a cut
    message = str(err.value)
    assert message.startswith("the image: not a readable image (") and message.endswith("; give a PNG or JPEG file")
    assert "truncated" in message and "not a PNG or JPEG image" not in message


def test_a_large_jpeg_is_decoded_small_and_gives_uint8_pixels_like_the_png(monkeypatch):
    img = Image.new("L", (4200, 4200), 255)  # twice the working side: JPEG decodes it at half size (draft),
    ImageDraw.Draw(img).line(((2100, 600), (2100, 3600)), fill=0, width=200)  # PNG is reduced after decoding
    jpeg, png = io.BytesIO(), io.BytesIO()
    img.save(jpeg, format="JPEG", quality=95)
    img.save(png, format="PNG")
    decoded = []
    monkeypatch.setattr(Image.Image, "reduce", lambda self, factor: decoded.append(self.size) or self)
    x = load_image(jpeg.getvalue(), (28, 28))
    assert decoded == []  # already small: decoded at 2100x2100, nothing left to reduce
    monkeypatch.undo()
    assert x.dtype == np.uint8 and x.shape == (784,)
    assert np.abs(x.astype(int) - load_image(png.getvalue(), (28, 28))).max() <= 8


@pytest.mark.parametrize("shape", [(1, 40), (40, 1)], ids=["one-pixel-tall", "one-pixel-wide"])
def test_a_one_pixel_thin_dash_is_read_like_the_same_dash_on_a_larger_sheet(shape):
    dash = np.full(shape, 200)  # dark on light paper: its border is the paper whatever its thickness
    dash.flat[10:30] = 50
    sheet = np.full((shape[0] + 2, shape[1] + 2), 200)  # the same dash with a row or column of paper around it
    sheet[1:-1, 1:-1] = dash
    np.testing.assert_array_equal(images.read_ink(gray_png(dash), 28), images.read_ink(gray_png(sheet), 28))


def test_a_grey_and_alpha_canvas_export_reads_like_the_same_drawing_on_white():
    # PNG's grey + alpha mode (LA): alpha 0 over black, like the RGBA canvas export, must be put on paper too.
    transparent = drawing(strokes=SEVEN, background=(0, 0, 0, 0)).convert("LA")
    on_white = drawing(strokes=SEVEN).convert("L")
    np.testing.assert_array_equal(load_image(png_bytes(transparent), (28, 28)),
                                  load_image(png_bytes(on_white), (28, 28)))


def test_a_palette_png_with_a_transparent_colour_reads_like_the_same_drawing_on_white():
    # A palette PNG marks a colour transparent (its tRNS chunk): here black, the paper; the ink is dark grey.
    mask = np.zeros((64, 64), np.uint8)
    mask[8:56, 30:36] = 1
    palette = Image.fromarray(mask, mode="P")
    palette.putpalette([0, 0, 0, 17, 17, 17])
    out = io.BytesIO()
    palette.save(out, format="PNG", transparency=0)
    on_white = gray_png(np.where(mask == 1, 17, 255))
    np.testing.assert_array_equal(load_image(out.getvalue(), (28, 28)), load_image(on_white, (28, 28)))


def test_paper_lighter_than_the_rest_of_the_paper_is_no_ink():
    gray = np.full((48, 48), 200)  # light paper and dark ink, as in the test above: two bars, an 11
    gray[10:30, 14:17] = 50
    gray[10:30, 24:27] = 50
    speck = gray.copy()
    speck[20, 20] = 230  # lighter than the paper, between the bars: below the paper is nothing, not negative ink
    np.testing.assert_array_equal(images.read_ink(gray_png(speck), 56), images.read_ink(gray_png(gray), 56))


def test_an_image_past_twice_the_working_side_is_box_reduced_right_after_decoding():
    wide = np.full((64, 2 * images.WORK_SIDE + 100), 255)  # twice the working side and more: reduced by 2
    wide[16:48, 1000:3000] = 0
    reduced = Image.fromarray(wide.astype(np.uint8), mode="L").reduce(2)  # under twice the side: read as it is
    assert max(reduced.size) < 2 * images.WORK_SIDE
    np.testing.assert_array_equal(images.read_ink(gray_png(wide), 28), images.read_ink(png_bytes(reduced), 28))


def test_shrinking_averages_the_strokes_instead_of_sampling_them():
    canvas = np.zeros((112, 112), np.float32)
    canvas[16:96:2, 16:96] = 1.0  # 40 one-pixel stripes over an 80 x 80 box: an even grey once shrunk 4 times
    out = np.asarray(fit_like_mnist(jnp.asarray(canvas), side=28, box=20, by_mass=False))
    inside = out[6:22, 6:22]  # the box's inside, away from its edges
    # Antialiased, each pixel averages the four rows it covers (peak scaled to 1); sampled, it would be a
    # stripe or a gap.
    assert inside.min() > 0.9, inside.min()


def test_a_sixteen_bit_grey_png_with_a_transparent_value_reads_like_the_same_drawing_on_white():
    """16-bit grey is floored to 8 bits (v // 257) and its tRNS value, the paper, put on white like an 8-bit image."""
    values = np.zeros((48, 48), np.uint16)  # black paper, marked transparent: a canvas export saved in 16 bits
    values[10:30, 14:17] = 100 * 257  # dark grey ink at the bottom of 8-bit step 100 (25700 // 258 would be 99)
    values[27:30, 14:26] = 100 * 257 + 256  # its foot at the top of the same step: floored, not rounded, to 100
    out = io.BytesIO()
    Image.fromarray(values).save(out, format="PNG", transparency=0)
    on_white = gray_png(np.where(values > 0, 100, 255))
    np.testing.assert_array_equal(images.read_ink(out.getvalue(), 28), images.read_ink(on_white, 28))


def test_load_image_checks_the_header_against_the_limit_it_is_given():
    """`max_pixels` reaches the header check: a 280x280 drawing is refused one pixel under its size, read at it."""
    raw = png_bytes(drawing(strokes=SEVEN))
    with pytest.raises(DataError) as err:
        load_image(raw, (28, 28), name="pad.png", max_pixels=280 * 280 - 1)
    assert str(err.value) == ("pad.png: the image is larger than the limit of 78,399 pixels; shrink it (a digit "
                              "needs a few hundred pixels a side) and try again (it is 280x280, 78,400 pixels)")
    assert load_image(raw, (28, 28), max_pixels=280 * 280).max() == 255
