// The flame graph (an icicle: the root on top) of the report page's Python stacks, one per
// recording with stacks (stroboscope/export/_flame.py writes its data into the page's blob).
// For the weight and the scope chosen above it, and the zoomed range of the page (while
// "the zoomed range" is ticked), it sums the stacks' weights over the time buckets that overlap
// the range, adds each node's weight to its parent's, and draws each node as wide as its share
// (the node clicked on fills the width; "whole graph", or a click on the root, undoes that).
// page.js calls window.stroboPage.flames(manifest, data, doc, hook) once and .view(a, b) on every
// redraw; window.strobo.flame is the hook tests drive (state, nodes, set).
(function (P) {
  'use strict';
  const { lowerBound, upperBound, fmtDur } = P;

  function cumsum(steps) {
    const out = new Float64Array(steps.length);
    let x = 0;
    for (let i = 0; i < steps.length; i++) out[i] = x += steps[i];
    return out;
  }

  function hue(name) {
    // flamegraph's warm colours, one per function name (a string hash: stable across pages)
    let h = 2166136261;
    for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 16777619);
    const u = (h >>> 0) / 4294967296, v = ((h >>> 12) & 1023) / 1023;
    const r = 205 + Math.round(50 * v), g = Math.round(80 + 150 * u), b = Math.round(55 * u);
    return '#' + [r, g, b].map((c) => c.toString(16).padStart(2, '0')).join('');
  }

  const BYTES = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  function fmtWeight(x, unit) {
    if (unit === 'ns') return fmtDur(x / 1e9);
    if (unit === 'bytes') {
      let i = 0;
      while (Math.abs(x) >= 1024 && i < BYTES.length - 1) { x /= 1024; i++; }
      return (i ? x.toFixed(2) : x.toFixed(0)) + ' ' + BYTES[i];
    }
    const m = Math.abs(x);
    const t = m !== 0 && (m >= 1e6 || m < 1e-2) ? x.toPrecision(3) : x.toFixed(2);
    return t + (unit ? ' ' + unit : '');
  }

  function makeFlame(f, k, buf, doc, W) {
    const tree = f.tree;
    const parent = P.array(buf, tree.parent), frame = P.array(buf, tree.frame);
    const depth = P.array(buf, tree.depth), line = P.array(buf, tree.line);
    const stackNode = P.array(buf, tree.stack_node);
    const N = parent.length;
    const tables = f.tables.map((t) => ({
      scope: t.scope,
      bucket: cumsum(P.array(buf, t.bucket)),
      stack: P.array(buf, t.stack),
      samples: P.array(buf, t.samples),
      weights: t.weights.map((e) => P.array(buf, e)),
    }));
    const src = doc.get_model_by_name('flame-' + k);
    const txt = doc.get_model_by_name('flame-text-' + k);
    const el = document.querySelector('.strobo-flame[data-flame="' + k + '"]');
    const status = document.querySelector('[data-flame-status="' + k + '"]');
    const st = { weight: 0, scope: -1, follow: true, focus: 0, a: -Infinity, b: Infinity };
    const nodeW = new Float64Array(N), nodeN = new Float64Array(N), x0 = new Float64Array(N);
    let last = null, visible = true, stale = true;

    function names(j) {
      if (j === 0) return { fn: 'all', at: f.label };
      const fr = frame[j];
      return { fn: tree.functions[fr], at: tree.files[fr] + ':' + line[fr] };
    }

    function compute() {
      const t = tables[st.scope + 1];
      const w = t.weights[st.weight];
      let i0 = 0, i1 = t.bucket.length, cover = null;
      if (st.follow && isFinite(st.a)) {
        const ka = Math.floor((st.a * 1e6 - f.first_us) / f.bucket_us);
        const kb = Math.floor((st.b * 1e6 - f.first_us) / f.bucket_us);
        i0 = lowerBound(t.bucket, ka);
        i1 = upperBound(t.bucket, kb);
        cover = [(f.first_us + Math.max(ka, 0) * f.bucket_us) / 1e6, (f.first_us + (kb + 1) * f.bucket_us) / 1e6];
      }
      nodeW.fill(0);
      nodeN.fill(0);
      for (let i = i0; i < i1; i++) {
        const n = stackNode[t.stack[i]];
        nodeW[n] += w[i];
        nodeN[n] += t.samples[i];
      }
      for (let j = N - 1; j > 0; j--) {
        nodeW[parent[j]] += nodeW[j];
        nodeN[parent[j]] += nodeN[j];
      }
      // breadth-first, children in name order: each takes its place after its elder siblings
      const cursor = new Float64Array(N);
      for (let j = 1; j < N; j++) {
        const p = parent[j];
        x0[j] = x0[p] + cursor[p];
        cursor[p] += nodeW[j];
      }
      return { cover, total: nodeW[0], samples: nodeN[0] };
    }

    function draw() {
      stale = false;
      const got = compute();
      let F = st.focus;
      if (nodeW[F] <= 0) F = st.focus = 0;
      const fx = x0[F], fw = nodeW[F];
      const q = { left: [], right: [], bottom: [], top: [], color: [], fn: [], at: [], weight: [], share: [], node: [] };
      const tx = { x: [], y: [], text: [] };
      const wt = f.weights[st.weight];
      const drawn = [];
      if (fw > 0) {
        for (let j = 0; j < N; j++) {
          if (nodeW[j] <= 0) continue;
          let l = (x0[j] - fx) / fw, r = l + nodeW[j] / fw;
          if (r <= 1e-12 || l >= 1 - 1e-12) continue; // outside the node in focus
          l = Math.max(l, 0);
          r = Math.min(r, 1);
          if ((r - l) * W < 0.5) continue; // under half a pixel: drawn in its parent
          const nm = names(j);
          const d = depth[j];
          q.left.push(l); q.right.push(r); q.bottom.push(d + 1); q.top.push(d);
          q.color.push(j === 0 ? '#c8c8c8' : hue(nm.fn));
          q.fn.push(nm.fn); q.at.push(nm.at);
          q.weight.push(fmtWeight(nodeW[j], wt.unit) + ' (' + nodeN[j] + ' samples)');
          q.share.push((100 * nodeW[j] / got.total).toFixed(1) + '% of the ' + wt.label + ' shown');
          q.node.push(j);
          drawn.push(j);
          const px = (r - l) * W - 6;
          const label = nm.fn.length * 6.5 <= px ? nm.fn : px >= 40 ? nm.fn.slice(0, Math.floor(px / 6.5) - 1) + '…' : null;
          if (label) { tx.x.push(l + 3 / W); tx.y.push(d + 0.5); tx.text.push(label); }
        }
      }
      src.data = q;
      txt.data = tx;
      const range = got.cover ? 'from ' + got.cover[0].toFixed(3) + ' s to ' + got.cover[1].toFixed(3) + ' s (buckets of ' + fmtDur(f.bucket_us / 1e6) + ')' : 'over the whole run';
      const scope = st.scope >= 0 ? ' inside the scope ' + f.tables[st.scope + 1].scope : '';
      if (status)
        status.textContent = got.samples > 0
          ? got.samples + ' stack samples' + scope + ' ' + range + ': ' + wt.label + ' ' + fmtWeight(got.total, wt.unit) + (got.total > 0 ? '' : ' (none of them weighs anything)') + '. ' + wt.rule
          : 'No stack sample' + scope + ' ' + range + '.';
      last = { ...got, drawn, focus: F };
    }

    function view(a, b) {
      if (a === st.a && b === st.b) return;
      st.a = a;
      st.b = b;
      stale = true;
      if (visible && st.follow) draw();
    }

    const bar = document.querySelector('.strobo-flame-bar[data-flame="' + k + '"]');
    if (bar) {
      bar.querySelector('[data-flame-weight]').addEventListener('change', (e) => { st.weight = +e.target.value; draw(); });
      bar.querySelector('[data-flame-scope]').addEventListener('change', (e) => { st.scope = +e.target.value; st.focus = 0; draw(); });
      bar.querySelector('[data-flame-follow]').addEventListener('change', (e) => { st.follow = e.target.checked; draw(); });
      bar.querySelector('[data-flame-reset]').addEventListener('click', () => { st.focus = 0; draw(); });
    }
    if (el) {
      new IntersectionObserver((entries) => {
        for (const e of entries) visible = e.isIntersecting;
        if (visible && stale) draw();
      }, { rootMargin: '100px' }).observe(el);
    }

    function tap(x, y) {
      const d = src.data;
      for (let i = 0; i < d.node.length; i++)
        if (d.left[i] <= x && x <= d.right[i] && d.top[i] <= y && y <= d.bottom[i]) {
          st.focus = d.node[i];
          draw();
          return d.fn[i];
        }
      return null;
    }

    function nodes() {
      // every node with weight in the last drawing: its path of functions, weight and samples
      const out = [];
      const path = new Array(N);
      for (let j = 0; j < N; j++) {
        path[j] = j === 0 ? '' : (parent[j] === 0 ? '' : path[parent[j]] + ';') + names(j).fn;
        if (j > 0 && nodeW[j] > 0) out.push({ path: path[j], weight: nodeW[j], samples: nodeN[j] });
      }
      return out;
    }

    return {
      view, draw, tap, nodes,
      state: () => ({ ...st, a: isFinite(st.a) ? st.a : null, b: isFinite(st.b) ? st.b : null,
        cover: last && last.cover, total: last ? last.total : null,
        samples: last ? last.samples : null, focus: last ? last.focus : 0,
        labels: txt.data.text.slice(), boxes: src.data.fn.slice(),
        status: status ? status.textContent : null }),
      set(opts) {
        for (const key of ['weight', 'scope', 'follow', 'focus']) if (key in opts) st[key] = opts[key];
        draw();
      },
    };
  }

  P.flames = function (m, data, doc, S) {
    const all = m.flames.map((f, k) => makeFlame(f, k, data.buf, doc, m.width));
    S.flame = {
      state: (k) => all[k].state(),
      nodes: (k) => all[k].nodes(),
      set: (k, opts) => { all[k].set(opts); return all[k].state(); },
    };
    S.flameTap = (k, x, y) => all[k].tap(x, y);
    return { view: (a, b) => { for (const f of all) f.view(a, b); } };
  };
})((window.stroboPage = window.stroboPage || {}));
