// The zooming report page: on every zoom or pan refills the Bokeh sources of the figures in view
// with the points of the visible range (stroboscope/export/page_data.js decodes the readings and
// computes the points; page_bokeh.js lightens Bokeh's paint; both run before this one).
// window.strobo is the hook tests and benchmarks drive: ready (a promise), zoom(a, b) (ms until
// the next frame is drawn), readings(id, a, b) (the decoded readings in [a, b] s), shown(),
// drawn() (a promise: every figure, in view or not, shows the current range). Each figure's
// data-state says loading, drawn or error (its status text why); the ones in view are drawn
// first, the others when the browser is idle.
(function () {
  'use strict';
  const S = (window.strobo = { ready: null, redraws: 0, lastRedrawMs: null, error: null, moved: null });
  const P = window.stroboPage;
  const { decode, linePoints, lanePoints, lowerBound, upperBound, fmtDur } = P;

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


  async function start() {
    S.lighter = P.lighterBokeh();
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
    // the flame graphs of the stacks (flame.js, in the page only when a recording has stacks)
    const flames = m.flames && P.flames ? P.flames(m, data, doc, S) : null;
    const label = document.querySelector('.strobo-range');
    const view = { a: m.x0, b: m.x1 };
    let shown = null;
    // each figure says what it shows (data-state, the page's CSS): loading until its data is
    // drawn, drawn, or error with why
    function state(f, s, why) {
      f.el.dataset.state = s;
      const status = f.el.querySelector('.strobo-status');
      if (status) status.textContent = s === 'error' ? 'could not draw this plot: ' + why : 'drawing…';
    }
    function current(f) { return f.at && f.at.a === view.a && f.at.b === view.b; }
    function fill(f, counted = true) {
      try {
        fillData(f, counted);
      } catch (e) {
        state(f, 'error', String(e && e.message ? e.message : e));
        f.at = { a: view.a, b: view.b };
        throw e;
      }
      const at = f.at;
      requestAnimationFrame(() => { if (f.at === at && f.el.dataset.state !== 'error') state(f, 'drawn'); });
    }
    function fillData(f, counted) {
      const a = view.a, b = view.b;
      if (f.range.start !== a || f.range.end !== b) f.range.setv({ start: a, end: b });
      const xs = [], ys = [], dx = [], dy = [], dc = [];
      f.lines.forEach((l, i) => {
        const p = linePoints(l, data.series[l.series], a, b, W);
        if (counted) shown.points += p.xs.length;
        // typed arrays: Bokeh takes them as they are (a plain array is searched for models)
        xs.push(Float64Array.from(p.xs));
        ys.push(Float64Array.from(p.ys));
        if (p.dots) {
          const c = f.src ? f.src.data.color[i] : PALETTE[i % PALETTE.length];
          for (let k = 0; k < p.dots.xs.length; k++) { dx.push(p.dots.xs[k]); dy.push(p.dots.ys[k]); dc.push(c); }
        }
      });
      if (f.src) f.src.data = { xs, ys, color: f.src.data.color, dash: f.src.data.dash };
      if (f.dots && (dx.length || f.dots.data.x.length))
        f.dots.data = { x: Float64Array.from(dx), y: Float64Array.from(dy), color: dc };
      if (f.lane) {
        const lp = lanePoints(data.scopes, a, b, W);
        f.lane[0].data = lp.q;
        f.lane[1].data = lp.txt;
        if (counted) {
          shown.scopes = lp.q.name.length;
          shown.labels = lp.txt.text.slice();
        }
      }
      f.at = { a, b };
    }
    // refill the figures in view whose range is not the view's; the others when they come
    function redraw() {
      const t0 = performance.now();
      if (!shown || shown.a !== view.a || shown.b !== view.b)
        shown = { a: view.a, b: view.b, points: 0, scopes: 0, labels: [], figures: 0 };
      for (const f of figs) {
        if (current(f)) continue;
        if (!f.visible) {
          if (f.at && f.el.dataset.state === 'drawn') state(f, 'loading'); // an old range
          continue;
        }
        fill(f);
        shown.figures++;
      }
      idle();
      if (flames) flames.view(view.a, view.b);
      if (label) label.textContent = view.a.toFixed(3) + ' s to ' + view.b.toFixed(3) + ' s (' + fmtDur(view.b - view.a) + ' shown)';
      S.redraws++;
      S.lastComputeMs = performance.now() - t0;
    }
    // the figures out of view, one at a time when the browser is idle: the whole page is
    // drawn soon after the part in view (a screenshot of the whole page shows every plot)
    let idling = false;
    const later = window.requestIdleCallback || ((cb) => setTimeout(cb, 16));
    let whole = null;
    function idle() {
      if (idling) return;
      const next = figs.find((f) => !current(f));
      if (!next) {
        if (whole) { whole.done(); whole = null; }
        return;
      }
      idling = true;
      later(() => {
        idling = false;
        const f = figs.find((g) => !current(g));
        if (f) fill(f, false);
        idle();
      });
    }
    // a promise resolved when every figure shows the current range
    S.drawn = () => {
      if (figs.every(current)) return frame().then(() => true);
      if (!whole) {
        let done;
        const p = new Promise((res) => { done = res; });
        whole = { p, done: () => frame().then(() => done(true)) };
      }
      idle();
      return whole.p;
    };
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
    // every figure not drawn says so, and why, instead of a blank plot
    for (const el of document.querySelectorAll('.strobo-fig:not([data-state="drawn"])')) {
      el.dataset.state = 'error';
      const status = el.querySelector('.strobo-status');
      if (status) status.textContent = 'could not draw this plot: ' + String(e && e.message ? e.message : e);
    }
    throw e;
  });
})();
