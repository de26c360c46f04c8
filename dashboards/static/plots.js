/* preemptscope: draw Plotly figures; long series drawn min/max-downsampled, full data on zoom.
 *
 * A week of 10-s windows is 60,480 points per series, far more than a plot has pixels. Traces on
 * a regular grid (x0/dx) with more than two points per pixel of plot width are drawn as
 * per-bucket (min, max) pairs, which keeps every spike visible; each zoom redraws the visible
 * slice from the full data, so at window scale every point is back. Shared by the HTML report
 * (inlined) and the live page.
 */
(function (root) {
  "use strict";
  var MAX_POINTS = 4000; // per trace at most: buckets × (min, max)

  // About one bucket per pixel of plot width: finer cannot be seen, coarser drops spikes.
  function bucketsFor(gd) {
    var width = (gd && gd.clientWidth) || 1000;
    return Math.max(500, Math.min(MAX_POINTS / 2, Math.round(width)));
  }

  function toMs(value) {
    if (typeof value === "number") return value;
    // Plotly date strings carry no zone; the figures are in UTC.
    return Date.parse(String(value).replace(" ", "T") + "Z");
  }

  function isLong(trace, buckets) {
    return trace.x0 !== undefined && trace.dx !== undefined && Array.isArray(trace.y) &&
      trace.y.length > 2 * buckets;
  }

  // Points [i0, i1) of a trace: as-is when few, else (min, max) per bucket in time order;
  // an all-empty bucket stays a gap (null), never a zero.
  function slice(full, x0, dx, i0, i1, buckets) {
    var xs = [], ys = [], i;
    if (i1 - i0 <= 2 * buckets) {
      for (i = i0; i < i1; i++) { xs.push(x0 + i * dx); ys.push(full[i]); }
      return { x: xs, y: ys };
    }
    var size = (i1 - i0) / buckets;
    for (var b = 0; b < buckets; b++) {
      var s = i0 + Math.floor(b * size), e = i0 + Math.floor((b + 1) * size);
      var lo = -1, hi = -1;
      for (i = s; i < e; i++) {
        var v = full[i];
        if (v === null || v === undefined) continue;
        if (lo < 0 || v < full[lo]) lo = i;
        if (hi < 0 || v > full[hi]) hi = i;
      }
      if (lo < 0) { xs.push(x0 + s * dx); ys.push(null); continue; }
      var first = Math.min(lo, hi), second = Math.max(lo, hi);
      xs.push(x0 + first * dx); ys.push(full[first]);
      if (second !== first) { xs.push(x0 + second * dx); ys.push(full[second]); }
    }
    return { x: xs, y: ys };
  }

  // The x range a relayout event set (any of the matched x axes), else the drawn one.
  function visible(gd, event) {
    var lo, hi;
    Object.keys(event).forEach(function (k) {
      var m = /^xaxis\d*\.range(\[(\d)\])?$/.exec(k);
      if (!m) return;
      if (m[2] === undefined) { lo = event[k][0]; hi = event[k][1]; }
      else if (m[2] === "0") lo = event[k];
      else hi = event[k];
    });
    if (lo === undefined || hi === undefined) {
      var axis = gd._fullLayout && gd._fullLayout.xaxis;
      if (!axis || !axis.range) return null;
      lo = axis.range[0]; hi = axis.range[1];
    }
    return [toMs(lo), toMs(hi)];
  }

  // Replace long traces by their visible slice; remember the full data on the graph div.
  function prepare(gd, fig) {
    var full = [];
    var range = gd.__psZoom || null;
    var buckets = bucketsFor(gd);
    fig.data.forEach(function (trace, index) {
      if (!isLong(trace, buckets)) return;
      var x0 = toMs(trace.x0), dx = Number(trace.dx), n = trace.y.length;
      var i0 = 0, i1 = n;
      if (range) {
        i0 = Math.max(0, Math.floor((range[0] - x0) / dx) - 1);
        i1 = Math.min(n, Math.ceil((range[1] - x0) / dx) + 2);
      }
      full.push({ index: index, y: trace.y, x0: x0, dx: dx });
      var part = slice(trace.y, x0, dx, i0, i1, buckets);
      trace.x = part.x; trace.y = part.y;
      delete trace.x0; delete trace.dx;
    });
    gd.__psFull = full;
  }

  function redraw(gd) {
    var full = gd.__psFull || [];
    if (!full.length) return;
    var range = gd.__psZoom;
    var buckets = bucketsFor(gd);
    var xs = [], ys = [], indices = [];
    full.forEach(function (t) {
      var n = t.y.length, i0 = 0, i1 = n;
      if (range) {
        i0 = Math.max(0, Math.floor((range[0] - t.x0) / t.dx) - 1);
        i1 = Math.min(n, Math.ceil((range[1] - t.x0) / t.dx) + 2);
      }
      var part = slice(t.y, t.x0, t.dx, i0, i1, buckets);
      xs.push(part.x); ys.push(part.y); indices.push(t.index);
    });
    root.Plotly.restyle(gd, { x: xs, y: ys }, indices);
  }

  function listen(gd) {
    if (gd.__psListening) return;
    gd.__psListening = true;
    gd.on("plotly_relayout", function (event) {
      var keys = Object.keys(event || {});
      var reset = keys.some(function (k) { return /^xaxis\d*\.autorange$/.test(k); });
      var ranged = keys.some(function (k) { return /^xaxis\d*\.range/.test(k); });
      if (!reset && !ranged) return;
      gd.__psZoom = reset ? null : visible(gd, event);
      redraw(gd);
    });
  }

  // WebGL canvases: Plotly draws them at 2x by default whatever the screen. On a 1x screen that
  // is 4x the pixels the screen shows, and every WebGL context (two per figure) is allocated at
  // that size: on a CPU renderer (SwiftShader) a 2800x1800 context costs ~140 ms against ~40 ms
  // at 1400x900. Screens with more than one device pixel per CSS pixel keep Plotly's 2x.
  function glRatio() {
    return (root.devicePixelRatio || 1) > 1 ? 2 : 1;
  }

  // Draw (first time) or update (live page) one figure in the element with this id.
  function draw(id, fig, config) {
    var gd = document.getElementById(id);
    var copy = { data: fig.data.map(function (t) { return Object.assign({}, t); }), layout: fig.layout };
    prepare(gd, copy);
    config = Object.assign({ plotGlPixelRatio: glRatio() }, config);
    return root.Plotly.react(gd, copy.data, copy.layout, config).then(function () {
      listen(gd);
      return gd;
    });
  }

  root.preemptscopePlots = { draw: draw, MAX_POINTS: MAX_POINTS, slice: slice };
})(window);
