// The readings of the zooming report page (stroboscope/export/page.js draws them): decodes the
// blob and manifest that stroboscope/export/_page_data.py writes, builds min/max levels, and gives
// the points a visible range needs: each reading as a step (held until the next one, a gap where
// none followed in time), or, when more readings than pixels are visible, the min and max of each
// bucket of rows (no spike hidden). The scope lane is culled and labelled the same way.
// Its functions are shared with page.js through window.stroboPage, the page's scripts' own.
(function (P) {
  'use strict';
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
    return { series, lines, scopes, buf };  // buf: the flame graph's arrays (flame.js)
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

  // Ticks of a byte axis over [lo, hi]: the multiples of the smallest power of two (2^k bytes:
  // 4 Gi, 256 Ki...) that cuts the span into at most `most` intervals, each a round binary
  // value; the rule of the static plots (stroboscope/export/_figure.py, byte_ticks).
  function byteTicks(lo, hi, most = 8) {
    const span = hi - lo;
    if (!(span > 0) || !isFinite(span)) return isFinite(lo) ? [lo] : [];
    const step = Math.pow(2, Math.ceil(Math.log2(span / most)));
    const out = [];
    for (let k = Math.ceil(lo / step), last = Math.floor(hi / step); k <= last; k++) out.push(k * step);
    return out;
  }

  P.decode = decode;
  P.byteTicks = byteTicks;
  P.array = array;
  P.linePoints = linePoints;
  P.lanePoints = lanePoints;
  P.lowerBound = lowerBound;
  P.upperBound = upperBound;
  P.fmtDur = fmtDur;
})((window.stroboPage = window.stroboPage || {}));
