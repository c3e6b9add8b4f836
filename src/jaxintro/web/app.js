// jaxintro serve: draw a digit, see what the model sees. No framework, no build step, no network beyond this server.
// Order: load the labels and the run, set up the pad, then predict as the user draws (throttled, one request
// in flight at a time), poll the metrics while the run trains, and page through its mistakes.

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const STROKE_WIDTH = 20; // of 280: about MNIST's pen once the digit is fitted into 20x20 of 28x28
const THROTTLE_MS = 150; // at most one prediction per 150 ms while drawing
const POLL_MS = 2000; // metrics.jsonl while the run trains
const PAGE = 24; // mistakes per page

let text = {}; // label key -> text, from /api/strings
let run = null; // /api/run
const mistakes = { offset: 0, total: 0, sort: "norm" };

async function getJSON(url, options) {
  const response = await fetch(url, options);
  const body = await response.json();
  if (!response.ok) throw Object.assign(new Error(body.error || response.statusText), { status: response.status });
  return body;
}

// A number as the page's language writes it (0,97 in Spanish), with `digits` decimals: the terminal's way.
function formatted(value, digits) {
  return new Intl.NumberFormat(text.locale || "en", { minimumFractionDigits: digits, maximumFractionDigits: digits })
    .format(value);
}

function say(message) {
  $("status").textContent = message ? `${text.error || "Error"}: ${message}` : "";
}

// ---------------------------------------------------------------- labels and the run's facts

function renderLabels() {
  for (const el of document.querySelectorAll("[data-i18n]")) el.textContent = text[el.dataset.i18n] ?? "";
  document.title = `jaxintro · ${text.title}`;
  $("pad").setAttribute("aria-label", text.draw);
  $("preview").setAttribute("aria-label", text.sees);
  $("heatmap").setAttribute("aria-label", text.saliency);
  $("chart-loss").setAttribute("aria-label", text.loss);
  $("chart-accuracy").setAttribute("aria-label", text.accuracy);
}

function renderFacts(info, metrics) {
  const rows = metrics.rows;
  const last = rows[rows.length - 1];
  $("fact-model").textContent = info.model;
  $("fact-dataset").textContent = info.dataset;
  $("fact-epochs").textContent =
    `${last ? last.epoch : 0} / ${info.epochs_planned} (${metrics.finished ? text.finished : text.training})`;
  // The run's one headline number, as `jaxintro runs` gives it (a sweep: its best setting's), not the row's mean.
  const accuracy = metrics.test_accuracy;
  $("fact-accuracy").textContent = Number.isFinite(accuracy) ? `${formatted(100 * accuracy, 2)}%` : "–";
}

// Until the run's data arrives, its panels say so instead of standing empty.
function renderLoading() {
  for (const id of ["fact-model", "fact-dataset", "fact-epochs", "fact-accuracy"]) $(id).textContent = text.loading;
  for (const id of ["chart-loss", "chart-accuracy"]) {
    const note = document.createElementNS(SVG, "text");
    note.setAttribute("x", 160);
    note.setAttribute("y", 90);
    note.setAttribute("text-anchor", "middle");
    note.textContent = text.loading;
    $(id).replaceChildren(note);
  }
  const li = document.createElement("li");
  li.textContent = text.loading;
  $("mistakes").replaceChildren(li);
}

function renderBars() {
  const list = $("bars");
  list.replaceChildren();
  for (const name of run.classes) {
    const li = document.createElement("li");
    const label = document.createElement("span");
    label.className = "name";
    label.textContent = name;
    const track = document.createElement("span");
    track.className = "track";
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.dataset.p = "0";
    track.append(bar);
    const value = document.createElement("span");
    value.className = "value";
    value.textContent = "–";
    li.append(label, track, value);
    list.append(li);
  }
}

// ---------------------------------------------------------------- the drawing pad

const pad = $("pad");
const ctx = pad.getContext("2d");
const strokes = []; // each stroke: a list of [x, y] in canvas pixels
let drawing = null;

function point(event) {
  const box = pad.getBoundingClientRect();
  return [(event.clientX - box.left) * (pad.width / box.width), (event.clientY - box.top) * (pad.height / box.height)];
}

function paint(stroke) {
  ctx.lineWidth = STROKE_WIDTH;
  ctx.lineCap = "round";
  ctx.lineJoin = "round";
  ctx.strokeStyle = "#111";
  ctx.beginPath();
  ctx.moveTo(...stroke[0]);
  // A single tap is a dot: a zero-length segment with round caps.
  for (const p of stroke.length > 1 ? stroke.slice(1) : stroke) ctx.lineTo(...p);
  ctx.stroke();
}

function repaint() {
  // Dark ink on a transparent canvas, as drawing apps export it: the server composites it onto white.
  ctx.clearRect(0, 0, pad.width, pad.height);
  strokes.forEach(paint);
  $("undo").disabled = $("clear").disabled = strokes.length === 0;
}

pad.addEventListener("pointerdown", (event) => {
  event.preventDefault();
  pad.setPointerCapture(event.pointerId);
  drawing = [point(event)];
  strokes.push(drawing);
  pad.dataset.pointer = event.pointerType; // what drew last: mouse, pen or touch
  repaint();
  throttle();
});
pad.addEventListener("pointermove", (event) => {
  if (!drawing) return;
  for (const e of event.getCoalescedEvents ? event.getCoalescedEvents() : [event]) drawing.push(point(e));
  repaint();
  throttle();
});
for (const type of ["pointerup", "pointercancel"]) {
  pad.addEventListener(type, () => {
    if (!drawing) return;
    drawing = null;
    requestPrediction();
  });
}
$("undo").addEventListener("click", () => {
  strokes.pop();
  repaint();
  requestPrediction();
});
$("clear").addEventListener("click", () => {
  strokes.length = 0;
  repaint();
  requestPrediction();
});

// ---------------------------------------------------------------- predictions

let timer = null;
let inFlight = false;
let stale = false; // the drawing changed while a request was in flight

function throttle() {
  if (timer === null) timer = setTimeout(() => { timer = null; requestPrediction(); }, THROTTLE_MS);
}

async function requestPrediction() {
  if (inFlight) { stale = true; return; }
  if (strokes.length === 0) { renderEmpty(); return; }
  inFlight = true;
  document.body.dataset.busy = "1";
  try {
    const answer = await getJSON("/api/predict", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ image: pad.toDataURL("image/png") }),
    });
    if (strokes.length) renderPrediction(answer);
    say("");
  } catch (error) {
    say(error.message);
  } finally {
    inFlight = false;
    if (stale) { stale = false; requestPrediction(); } else delete document.body.dataset.busy;
  }
}

function renderEmpty() {
  $("digit").textContent = "–";
  $("digit").dataset.value = "";
  for (const li of $("bars").children) {
    li.classList.remove("top");
    li.querySelector(".bar").style.width = "0";
    li.querySelector(".bar").dataset.p = "0";
    li.querySelector(".value").textContent = "–";
  }
  for (const id of ["preview", "heatmap"]) {
    const c = $(id);
    c.getContext("2d").clearRect(0, 0, c.width, c.height);
  }
  document.body.dataset.predictions = String(Number(document.body.dataset.predictions || 0) + 1);
}

function renderPrediction(answer) {
  $("digit").textContent = answer.class;
  $("digit").dataset.value = String(answer.digit);
  [...$("bars").children].forEach((li, k) => {
    const p = answer.probabilities[k];
    li.classList.toggle("top", k === answer.digit);
    li.querySelector(".bar").style.width = `${(100 * p).toFixed(1)}%`;
    li.querySelector(".bar").dataset.p = String(p);
    li.querySelector(".value").textContent = formatted(p, 3);
  });
  drawGray($("preview"), answer.input, 1);
  drawSaliency($("heatmap"), answer.input, answer.saliency);
  document.body.dataset.predictions = String(Number(document.body.dataset.predictions || 0) + 1);
}

function drawGray(canvas, values, scale) {
  const [h, w] = run.image_shape;
  canvas.width = w;
  canvas.height = h;
  const image = canvas.getContext("2d").createImageData(w, h);
  values.forEach((v, i) => {
    const g = Math.round(255 * Math.min(1, Math.max(0, v / scale)));
    image.data.set([g, g, g, 255], 4 * i);
  });
  canvas.getContext("2d").putImageData(image, 0, 0);
}

function drawSaliency(canvas, input, saliency) {
  // Red where more ink would raise the predicted class's log-probability, blue where it would lower it,
  // over a faint copy of the input so the strokes stay visible.
  const [h, w] = run.image_shape;
  canvas.width = w;
  canvas.height = h;
  const peak = Math.max(1e-12, ...saliency.map(Math.abs));
  const image = canvas.getContext("2d").createImageData(w, h);
  saliency.forEach((s, i) => {
    const t = Math.abs(s) / peak;
    const base = 40 * input[i];
    const strong = Math.round(base + (255 - base) * t);
    const weak = Math.round(base * (1 - t));
    image.data.set(s >= 0 ? [strong, weak, weak, 255] : [weak, weak, strong, 255], 4 * i);
  });
  canvas.getContext("2d").putImageData(image, 0, 0);
}

// ---------------------------------------------------------------- training curves (live while training)

// `tight`: the axis spans the data (with a margin), as curves.png does; else it starts at 0. The legend sits in
// the corner the curves leave free: top right for a falling loss, bottom right for a rising accuracy.
function chart(svg, series, label, { tight = false, legendBelow = false } = {}) {
  const W = 320, H = 180, L = 36, R = 8, T = 14, B = 24;
  svg.replaceChildren();
  const add = (name, attrs, parent = svg) => {
    const el = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    parent.append(el);
    return el;
  };
  const all = series.flatMap((s) => s.points.map((p) => p[1]));
  const epochs = series.flatMap((s) => s.points.map((p) => p[0]));
  if (!all.length) return;
  const [low, high] = [Math.min(...all), Math.max(...all)];
  const margin = Math.max(0.1 * (high - low), 0.005);
  const bottom = tight ? Math.max(0, low - margin) : 0;
  const top = tight ? Math.min(1, high + margin) : high * 1.05;
  const lastEpoch = Math.max(1, ...epochs);
  const x = (e) => L + ((W - L - R) * (lastEpoch === 1 ? 0.5 : (e - 1) / (lastEpoch - 1)));
  const y = (v) => T + (H - T - B) * (1 - (v - bottom) / (top - bottom || 1));
  add("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999" });
  add("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#999" });
  const digits = top < 10 ? (tight ? 3 : 2) : 0;
  add("text", { x: 2, y: T + 4, class: "y-top" }).textContent = formatted(top, digits);
  add("text", { x: 2, y: H - B, class: "y-bottom" }).textContent = bottom === 0 ? "0" : formatted(bottom, digits);
  add("text", { x: L, y: H - 6 }).textContent = `${text.epoch} 1`;
  if (lastEpoch > 1) add("text", { x: W - R - 40, y: H - 6 }).textContent = `${text.epoch} ${lastEpoch}`;
  add("text", { x: L + 4, y: 10 }).textContent = label;
  series.forEach((s, k) => {
    const points = s.points.map(([e, v]) => `${x(e).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    add("polyline", { points, fill: "none", stroke: s.color, "stroke-width": 2 });
    for (const [e, v] of s.points) add("circle", { cx: x(e), cy: y(v), r: 2.5, fill: s.color });
    // Anchored at its end, inside the frame: a longer word ("entrenamiento") grows leftwards, never off the edge.
    const row = legendBelow ? H - B - 6 - 12 * (series.length - 1 - k) : T + 12 + 12 * k;
    const legend = add("text", { x: W - R - 2, y: row, "text-anchor": "end", class: "legend" });
    legend.textContent = s.name;
    legend.style.fill = s.color; // CSSOM, not a style attribute: the page's CSP allows no inline styles
  });
}

function renderCurves(rows) {
  const pick = (key) => rows.filter((r) => Number.isFinite(r[key])).map((r) => [r.epoch, r[key]]);
  // A run with held-out images scores them every epoch and its test set once, where it ends: one point.
  const curves = (train, test, heldOut) => [
    { name: text.train, color: "#2f6fdf", points: pick(train) },
    { name: text.test, color: "#d9480f", points: pick(test) },
    { name: text.held_out, color: "#9467bd", points: pick(heldOut) },  // curves.png's tab:purple
  ].filter((s) => s.points.length);
  chart($("chart-loss"), curves("loss", "test_loss", "val_loss"), text.loss);
  chart($("chart-accuracy"), curves("train_accuracy", "test_accuracy", "val_accuracy"), text.accuracy,
    { tight: true, legendBelow: true });
}

async function pollMetrics() {
  try {
    const metrics = await getJSON("/api/metrics");
    renderFacts(run, metrics);
    renderCurves(metrics.rows);
    document.body.dataset.epochs = String(metrics.rows.length);
    if (!metrics.finished) setTimeout(pollMetrics, POLL_MS);
  } catch (error) {
    say(error.message);
    // 409: the run folder's files cannot be read; asking again will not change that.
    if (error.status !== 409) setTimeout(pollMetrics, 5 * POLL_MS);
  }
}

// ---------------------------------------------------------------- mistakes

async function loadMistakes() {
  const page = await getJSON(`/api/mistakes?offset=${mistakes.offset}&limit=${PAGE}&sort=${mistakes.sort}`);
  mistakes.total = page.total;
  const list = $("mistakes");
  list.replaceChildren();
  for (const m of page.items) {
    const li = document.createElement("li");
    const canvas = document.createElement("canvas");
    drawGray(canvas, m.pixels, 255);
    const caption = document.createElement("div");
    caption.textContent =
      `#${m.index} · ${text.true_label} ${m.label} → ${text.predicted} ${m.prediction}`;
    const numbers = document.createElement("div");
    numbers.textContent =
      `${text.confidence} ${formatted(m.confidence, 2)} · ${text.grad_norm} ${formatted(m.grad_norm, 3)}`;
    li.dataset.norm = String(m.grad_norm);
    li.append(canvas, caption, numbers);
    list.append(li);
  }
  if (!page.items.length) {
    const li = document.createElement("li");
    li.textContent = page.reason || text.no_mistakes;
    list.append(li);
  }
  const last = Math.min(page.total, mistakes.offset + page.items.length);
  $("page-info").textContent = page.total ? `${mistakes.offset + 1}–${last} ${text.of} ${page.total}` : "";
  $("prev").disabled = mistakes.offset === 0;
  $("next").disabled = last >= page.total;
}

$("sort").addEventListener("change", (event) => {
  mistakes.sort = event.target.value;
  mistakes.offset = 0;
  loadMistakes().catch((error) => say(error.message));
});
$("prev").addEventListener("click", () => {
  mistakes.offset = Math.max(0, mistakes.offset - PAGE);
  loadMistakes().catch((error) => say(error.message));
});
$("next").addEventListener("click", () => {
  mistakes.offset += PAGE;
  loadMistakes().catch((error) => say(error.message));
});

// ---------------------------------------------------------------- start

async function start() {
  text = await getJSON("/api/strings");
  renderLabels();
  renderLoading();
  run = await getJSON("/api/run");
  renderBars();
  repaint();
  await Promise.all([pollMetrics(), loadMistakes()]);
  document.body.dataset.state = "ready";
}

start().catch((error) => {
  say(error.message);
  document.body.dataset.state = "failed";
});
