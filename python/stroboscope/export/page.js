// The zooming report page: decodes the readings (format of stroboscope/export/_page_data.py),
// builds min/max levels, and on every zoom or pan refills the Bokeh sources with what the
// visible range needs: each reading as a step (held until the next one, a gap where none
// followed in time), or, when more readings than pixels are visible, the min and max of each
// bucket of rows (no spike hidden). The scope lane is culled and labelled the same way.
// window.strobo is the hook tests and benchmarks drive: ready (a promise), zoom(a, b) (ms until
// the next frame is drawn), readings(id, a, b) (the decoded readings in [a, b] s), shown().
(function () {
  'use strict';
  const S = (window.strobo = { ready: null, redraws: 0, lastRedrawMs: null, error: null, moved: null });
  const SIZES = { u8: 1, i8: 1, i16: 2, i32: 4, f32: 4, f64: 8 };
  const TYPES = {
    u8: Uint8Array, i8: Int8Array, i16: Int16Array, i32: Int32Array,
    f32: Float32Array, f64: Float64Array,
  };
  const B0 = 64; // rows per bucket of the finest min/max level
  const FAN = 4; // buckets of one level per bucket of the next

  function bytesOf(b64) {
    const bin = atob(b64);
    const n = bin.length;
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  async function inflate(bytes) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  function array(buf, e) {
    const w = SIZES[e.dtype];
    const n = e.n;
    const src = buf.subarray(e.at, e.at + w * n);
    const out = new Uint8Array(w * n);
    if (w === 1) out.set(src);
    else
      for (let k = 0; k < w; k++) {
        const base = k * n;
        for (let i = 0; i < n; i++) out[i * w + k] = src[base + i];
      }
    return new TYPES[e.dtype](out.buffer);
  }

  function times(buf, t) {
    const rest = array(buf, t.rest);
    const us = new Float64Array(rest.length + 1);
    let x = t.first_us;
    us[0] = x;
    for (let i = 0; i < rest.length; i++) {
      x += t.step_us + rest[i];
      us[i + 1] = x;
    }
    return us;
  }

  function values(buf, e) {
    const a = array(buf, e);
    const out = new Float64Array(a.length);
    if (e.enc === 'int-steps') {
      let x = e.first;
      for (let i = 0; i < a.length; i++) out[i] = x += a[i];
    } else out.set(a);
    return out;
  }

  // first index i in sorted a[lo, hi) with a[i] >= x
  function lowerBound(a, x, lo = 0, hi = a.length) {
    while (lo < hi) {
      const m = (lo + hi) >>> 1;
      if (a[m] < x) lo = m + 1;
      else hi = m;
    }
    return lo;
  }
  function upperBound(a, x, lo = 0, hi = a.length) {
    while (lo < hi) {
      const m = (lo + hi) >>> 1;
      if (a[m] <= x) lo = m + 1;
      else hi = m;
    }
    return lo;
  }

  // The time each reading stands for: the rule of the static plots
  // (stroboscope/export/_downsample.py, reading_spans), with the column's usual spacing p (and
  // rows apart), the gap and stall factors from the manifest. A level holds from its reading to the next one (p when
  // the next is missing, and after the last); a rate stands for its window, since the reading
  // before (p after a gap, and for the first); never outside the run's rows [lo, hi].
  function spans(line, s, G, STALL) {
    const tu = line.tu, rows = line.rows, p = line.period, every = line.every, n = tu.length;
    const rate = line.rate;
    const lo = s.tu[0], hi = s.tu[s.tu.length - 1];
    // readings are joined when close in time, or in their usual number of rows and not a
    // stall of the sampler apart (ticks it missed on a loaded machine are no gap)
    const near = (i) => {
      if (i + 1 >= n) return false;
      const dt = tu[i + 1] - tu[i];
      return dt <= G * p || (rows[i + 1] - rows[i] <= G * every && dt <= STALL * p);
    };
    const start = rate
      ? (i) => Math.max(i === 0 ? tu[0] - p : near(i - 1) ? tu[i - 1] : tu[i] - p, lo)
      : (i) => Math.max(tu[i], lo);
    const end = rate
      ? (i) => tu[i]
      : (i) => Math.min(near(i) ? tu[i + 1] : tu[i] + p, Math.max(hi, tu[i]));
    return { near, start, end };
  }

  function levels(line, s) {
    // min and max of the held values over buckets of B0 rows, then FAN buckets at a time
    const { rows, v } = line;
    const t = s.tu;
    const nRows = t.length;
    const nb = Math.ceil(nRows / B0);
    let mn = new Float64Array(nb).fill(Infinity);
    let mx = new Float64Array(nb).fill(-Infinity);
    const n = rows.length;
    const sp = line.spans;
    for (let i = 0; i < n; i++) {
      let r0, r1; // rows [r0, r1) the reading stands for
      if (!line.rate) {
        r0 = rows[i];
        r1 = sp.near(i) ? rows[i + 1] : Math.max(r0 + 1, lowerBound(t, sp.end(i), r0, i + 1 < n ? rows[i + 1] : nRows));
      } else {
        r1 = rows[i] + 1;
        r0 = i > 0 && sp.near(i - 1) ? rows[i - 1] + 1 : lowerBound(t, sp.start(i), i > 0 ? rows[i - 1] + 1 : 0, r1);
      }
      const x = v[i];
      for (let b = Math.floor(r0 / B0), last = Math.floor((r1 - 1) / B0); b <= last; b++) {
        if (x < mn[b]) mn[b] = x;
        if (x > mx[b]) mx[b] = x;
      }
    }
    const out = [{ size: B0, mn, mx }];
    let size = B0;
    while (mn.length > 8) {
      const m = Math.ceil(mn.length / FAN);
      const a = new Float64Array(m).fill(Infinity);
      const b = new Float64Array(m).fill(-Infinity);
      for (let i = 0; i < mn.length; i++) {
        const j = (i / FAN) | 0;
        if (mn[i] < a[j]) a[j] = mn[i];
        if (mx[i] > b[j]) b[j] = mx[i];
      }
      size *= FAN;
      mn = a;
      mx = b;
      out.push({ size, mn, mx });
    }
    return out;
  }

  async function decode(m) {
    const buf = await inflate(bytesOf(document.getElementById('strobo-data').textContent));
    const series = m.series.map((s) => ({ label: s.label, tu: times(buf, s.time) }));
    for (const s of series) {
      s.t = new Float64Array(s.tu.length);
      for (let i = 0; i < s.tu.length; i++) s.t[i] = s.tu[i] / 1e6;
    }
    const lines = m.lines.map((l) => {
      let rows;
      if (l.rows.every !== undefined) {
        rows = new Int32Array(l.rows.n);
        for (let i = 0; i < rows.length; i++) rows[i] = l.rows.first + i * l.rows.every;
      } else {
        const steps = array(buf, l.rows);
        rows = new Int32Array(steps.length);
        let r = 0;
        for (let i = 0; i < rows.length; i++) rows[i] = r += steps[i];
      }
      const s = series[l.series];
      const tu = new Float64Array(rows.length);
      for (let i = 0; i < rows.length; i++) tu[i] = s.tu[rows[i]];
      const line = {
        id: l.id, series: l.series, rows, tu, v: values(buf, l.values),
        period: l.period_us, every: l.every_rows, rate: l.rate,
      };
      line.spans = spans(line, s, m.gap_factor, m.stall_factor);
      line.levels = levels(line, s);
      return line;
    });
    const sc = m.scopes;
    const scopes = sc && {
      begin: array(buf, sc.begin_us), end: array(buf, sc.end_us), lane: array(buf, sc.lane),
      name: array(buf, sc.name), path: array(buf, sc.path),
      names: sc.names, paths: sc.paths, colors: sc.colors, lanes: sc.lanes,
    };
    return { series, lines, scopes };
  }

  // points of one line over the visible [a, b] s, at about W pixels
  function linePoints(line, s, a, b, W) {
    const xs = [], ys = [];
    const t = s.t, tu = line.tu, v = line.v;
    const ra = Math.max(lowerBound(t, a) - 1, 0);
    const rb = Math.min(upperBound(t, b) + 1, t.length);
    const perPx = (rb - ra) / W;
    if (perPx > B0) {
      let lv = line.levels[0];
      for (const l of line.levels) if (l.size <= perPx) lv = l;
      const first = Math.max(Math.floor(ra / lv.size) - 1, 0);
      const last = Math.min(Math.floor(rb / lv.size) + 1, lv.mn.length - 1);
      for (let k = first; k <= last; k++) {
        const x = t[Math.min(k * lv.size, t.length - 1)];
        if (lv.mn[k] === Infinity) {
          xs.push(x); ys.push(NaN);
        } else {
          xs.push(x, x); ys.push(lv.mn[k], lv.mx[k]);
        }
      }
      return { xs, ys, dots: null };
    }
    const ua = a * 1e6, ub = b * 1e6;
    const n = tu.length;
    const sp = line.spans;
    const ia = Math.max(upperBound(tu, ua) - 2, 0);
    const ib = Math.min(lowerBound(tu, ub) + 2, n);
    if (ib - ia <= 2 * W) {
      for (let i = ia; i < ib; i++) {
        xs.push(sp.start(i) / 1e6, sp.end(i) / 1e6); ys.push(v[i], v[i]);
        if (!sp.near(i)) { xs.push(sp.end(i) / 1e6); ys.push(NaN); }
      }
      const dots = ib - ia <= W / 8 ? { xs: Array.from(tu.subarray(ia, ib), (x) => x / 1e6), ys: Array.from(v.subarray(ia, ib)) } : null;
      return { xs, ys, dots };
    }
    // more readings than pixels: min and max of the readings in each pixel column
    const px = (b - a) / W;
    let cur = null, lo = 0, hi = 0;
    const flush = () => { if (cur !== null) { xs.push(cur, cur); ys.push(lo, hi); } cur = null; };
    for (let i = ia; i < ib; i++) {
      if (i > ia && !sp.near(i - 1)) {
        flush();
        xs.push(sp.end(i - 1) / 1e6, sp.end(i - 1) / 1e6); ys.push(v[i - 1], NaN);
      }
      const x = a + Math.floor((tu[i] / 1e6 - a) / px) * px;
      if (x !== cur) { flush(); cur = x; lo = hi = v[i]; }
      else { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; }
    }
    flush();
    return { xs, ys, dots: null };
  }

  function fmtDur(s) {
    if (s >= 1) return s.toFixed(3) + ' s';
    if (s >= 1e-3) return (s * 1e3).toFixed(3) + ' ms';
    return (s * 1e6).toFixed(1) + ' µs';
  }

  function lanePoints(sc, a, b, W) {
    const q = { left: [], right: [], bottom: [], top: [], color: [], name: [], path: [], dur: [], lane: [] };
    const txt = { x: [], y: [], text: [] };
    if (!sc) return { q, txt };
    const px = (b - a) / W;
    const lastPx = new Float64Array(sc.lanes.length).fill(-Infinity);
    const lastEnd = new Float64Array(sc.lanes.length).fill(-Infinity);
    const lastIdx = new Int32Array(sc.lanes.length).fill(-1);
    for (let i = 0; i < sc.begin.length; i++) {
      const x0 = sc.begin[i] / 1e6, x1 = sc.end[i] / 1e6;
      if (x1 < a || x0 > b) continue;
      const L = sc.lane[i];
      const p1 = (x1 - a) / px;
      const w = (x1 - x0) / px;
      const nm = sc.names[sc.name[i]];
      // a call of the name just drawn, less than a pixel after it: one bar (as the PNG lane)
      const k = lastIdx[L];
      if (k >= 0 && q.name[k] === nm && (x0 - lastEnd[L]) / px < 1 && w < 4) {
        q.right[k] = Math.max(q.right[k], x1);
        q.dur[k] = 'calls less than a pixel apart: zoom in';
        lastEnd[L] = x1;
        lastPx[L] = p1;
        continue;
      }
      if (p1 - lastPx[L] < 0.5 && w < 0.5) continue; // drawn over already
      lastPx[L] = p1;
      lastEnd[L] = x1;
      lastIdx[L] = q.name.length;
      // calls wider than 4 pixels keep a pixel's gap before the next; thinner ones none
      q.left.push(x0); q.right.push(w > 4 ? x1 - px : Math.max(x1, x0 + px * 0.5));
      q.bottom.push(L + 0.08); q.top.push(L + 0.92);
      q.color.push(sc.colors[sc.name[i]]); q.name.push(nm);
      q.path.push(sc.paths[sc.path[i]]); q.dur.push(fmtDur(x1 - x0)); q.lane.push(sc.lanes[L]);
      const va = Math.max(x0, a), vb = Math.min(x1, b);
      if ((vb - va) / px >= 7 * nm.length + 6) {
        txt.x.push((va + vb) / 2); txt.y.push(L + 0.5); txt.text.push(nm);
      }
    }
    return { q, txt };
  }

  function frame() {
    return new Promise((res) => requestAnimationFrame(() => requestAnimationFrame(res)));
  }

  async function models() {
    for (;;) {
      const docs = window.Bokeh && window.Bokeh.documents;
      if (docs && docs.length && docs[0].get_model_by_name('time-0')) return docs[0];
      await new Promise((res) => setTimeout(res, 10));
    }
  }

  // Bokeh's paint does work a zoom of this page does not need, once per figure in view; with
  // 12 figures it was most of a zoom's redraw. Each change below keeps what Bokeh draws; where
  // the Bokeh in the page lacks the method patched, the page works as it is, only slower.
  // S.lighter lists the changes made.
  function bokehModule(name) {
    try {
      return window.Bokeh && window.Bokeh.require ? window.Bokeh.require(name) : null;
    } catch (e) {
      return null;
    }
  }
  function lighterBokeh() {
    const done = [];
    // 1. Each visual's CSS variables (--bk-line-color, ...) are read with getComputedStyle on
    // every paint, for every axis, tick, grid and glyph property. This page sets none and
    // Bokeh's own style sheets set none: each is read once per element and kept.
    const visual = bokehModule('core/visuals/visual');
    const vp = visual && visual.VisualProperties && visual.VisualProperties.prototype;
    if (vp && typeof vp._get_css_value === 'function') {
      const read = vp._get_css_value;
      const kept = new WeakMap();
      vp._get_css_value = function (name) {
        const el = this.obj && this.obj.el;
        if (!el) return read.call(this, name);
        let values = kept.get(el);
        if (!values) kept.set(el, (values = new Map()));
        const key = this.css_prefix + name;
        let v = values.get(key);
        if (v === undefined) values.set(key, (v = read.call(this, name)));
        return v;
      };
      done.push('css values');
    }
    // 2. The same for a plot's font size (getComputedStyle(el).fontSize on every paint).
    const canvas = bokehModule('models/plots/plot_canvas');
    const pv = canvas && canvas.PlotView && canvas.PlotView.prototype;
    const size = pv && Object.getOwnPropertyDescriptor(pv, 'base_font_size');
    if (size && size.get && size.configurable) {
      const kept = new WeakMap();
      Object.defineProperty(pv, 'base_font_size', {
        configurable: true,
        get() {
          if (!this.el || !this.el.isConnected) return size.get.call(this);
          if (!kept.has(this.el)) kept.set(this.el, size.get.call(this));
          return kept.get(this.el);
        },
      });
      done.push('font size');
    }
    // 3. Each element's own style sheet (its position) is written on every paint: a text that
    // is the same is not written again (a written sheet makes the browser work out the
    // styles again at the next read, the next figure's canvas font).
    const dom = bokehModule('core/dom');
    const sheet = dom && dom.InlineStyleSheet && dom.InlineStyleSheet.prototype;
    if (sheet && typeof sheet._update === 'function') {
      const write = sheet._update;
      sheet._update = function (css) {
        if (this.el && this.el.textContent === css) return;
        write.call(this, css);
      };
      done.push('style sheets');
    }
    // 4. A glyph renderer's element (empty: the glyphs are drawn on the canvas) is moved to
    // the glyphs' extent on screen on every paint, which a zoom changes for every line: its
    // first place is kept (nothing is drawn in it, and the canvas takes the events).
    const glyph = bokehModule('models/renderers/glyph_renderer');
    const gv = glyph && glyph.GlyphRendererView && glyph.GlyphRendererView.prototype;
    if (gv && typeof gv.update_position === 'function') {
      const place = gv.update_position;
      const placed = new WeakSet();
      gv.update_position = function () {
        if (placed.has(this)) return;
        place.call(this);
        if (this.bbox != null && this.bbox.is_valid) placed.add(this);
      };
      done.push('renderer places');
    }
    return done;
  }

  async function start() {
    S.lighter = lighterBokeh();
    const m = JSON.parse(document.getElementById('strobo-manifest').textContent);
    const PALETTE = m.palette;
    const [data, doc] = await Promise.all([decode(m), models()]);
    const W = m.width;
    const byId = new Map(data.lines.map((l) => [l.id, l]));
    const figs = m.figures.map((f, i) => ({
      range: doc.get_model_by_name('time-' + i),
      lines: f.lines.map((id) => byId.get(id)),
      src: f.lane ? null : doc.get_model_by_name('lines-' + i),
      dots: f.lane ? null : doc.get_model_by_name('dots-' + i),
      lane: f.lane ? [doc.get_model_by_name('lane'), doc.get_model_by_name('lane-text')] : null,
      el: document.querySelector('.strobo-fig[data-fig="' + i + '"]'),
      visible: false,
      at: null,
    }));
    const label = document.querySelector('.strobo-range');
    const view = { a: m.x0, b: m.x1 };
    let shown = null;
    function fill(f) {
      const a = view.a, b = view.b;
      if (f.range.start !== a || f.range.end !== b) f.range.setv({ start: a, end: b });
      const xs = [], ys = [], dx = [], dy = [], dc = [];
      f.lines.forEach((l, i) => {
        const p = linePoints(l, data.series[l.series], a, b, W);
        shown.points += p.xs.length;
        // typed arrays: Bokeh takes them as they are (a plain array is searched for models)
        xs.push(Float64Array.from(p.xs));
        ys.push(Float64Array.from(p.ys));
        if (p.dots) {
          const c = PALETTE[i % PALETTE.length];
          for (let k = 0; k < p.dots.xs.length; k++) { dx.push(p.dots.xs[k]); dy.push(p.dots.ys[k]); dc.push(c); }
        }
      });
      if (f.src) f.src.data = { xs, ys, color: f.src.data.color };
      if (f.dots && (dx.length || f.dots.data.x.length))
        f.dots.data = { x: Float64Array.from(dx), y: Float64Array.from(dy), color: dc };
      if (f.lane) {
        const lp = lanePoints(data.scopes, a, b, W);
        f.lane[0].data = lp.q;
        f.lane[1].data = lp.txt;
        shown.scopes = lp.q.name.length;
        shown.labels = lp.txt.text.slice();
      }
      f.at = { a, b };
    }
    // refill the figures in view whose range is not the view's; the others when they come
    function redraw() {
      const t0 = performance.now();
      if (!shown || shown.a !== view.a || shown.b !== view.b)
        shown = { a: view.a, b: view.b, points: 0, scopes: 0, labels: [], figures: 0 };
      for (const f of figs) {
        if (!f.visible || (f.at && f.at.a === view.a && f.at.b === view.b)) continue;
        fill(f);
        shown.figures++;
      }
      if (label) label.textContent = view.a.toFixed(3) + ' s to ' + view.b.toFixed(3) + ' s (' + fmtDur(view.b - view.a) + ' shown)';
      S.redraws++;
      S.lastComputeMs = performance.now() - t0;
    }
    let pending = false;
    function schedule() {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => { pending = false; redraw(); });
    }
    function set(a, b) {
      const w = Math.min(Math.max(b - a, 1e-6), m.x1 - m.x0);
      a = Math.min(Math.max(a, m.x0), m.x1 - w);
      view.a = a; view.b = a + w;
    }
    S.moved = (i) => {
      const r = figs[i].range;
      if (r.start === view.a && r.end === view.b) return;
      view.a = r.start; view.b = r.end;
      figs[i].at = null;
      schedule();
    };
    const io = new IntersectionObserver((entries) => {
      for (const e of entries) figs[+e.target.dataset.fig].visible = e.isIntersecting;
      schedule();
    }, { rootMargin: '100px' });
    for (const f of figs) io.observe(f.el);
    for (const btn of document.querySelectorAll('.strobo-bar button'))
      btn.addEventListener('click', () => {
        const c = (view.a + view.b) / 2, w = view.b - view.a, k = btn.dataset.zoom;
        if (k === 'all') set(m.x0, m.x1);
        else if (k === 'in') set(c - w / 8, c + w / 8);
        else set(c - w * 2, c + w * 2);
        schedule();
      });
    S.zoom = async (a, b) => {
      const t0 = performance.now();
      set(a, b);
      redraw();
      await frame();
      S.lastRedrawMs = performance.now() - t0;
      return S.lastRedrawMs;
    };
    S.readings = (id, a, b) => {
      const l = byId.get(id);
      const i = lowerBound(l.tu, a * 1e6), j = upperBound(l.tu, b * 1e6);
      return { t_us: Array.from(l.tu.subarray(i, j)), v: Array.from(l.v.subarray(i, j)) };
    };
    S.shown = () => shown;
    const frag = /[#&]t=([-\d.e]+),([-\d.e]+)/.exec(location.hash);
    if (frag) set(+frag[1], +frag[2]);
    await new Promise((res) => setTimeout(res, 0)); // the observer's first report
    await frame();
    redraw();
    await frame();
    document.body.dataset.strobo = 'ready';
    return true;
  }

  S.ready = start().catch((e) => {
    S.error = String(e && e.stack ? e.stack : e);
    console.error('stroboscope page: ' + S.error);
    throw e;
  });
})();
