// Lightens Bokeh's paint for the zooming report page (stroboscope/export/page.js calls it first,
// and reports the list it returns as window.strobo.lighter).
(function (P) {
  'use strict';
  // Bokeh's paint does work a zoom of this page does not need, once per figure in view; with
  // 12 figures it was most of a zoom's redraw. Each change below keeps what Bokeh draws; where
  // the Bokeh in the page lacks the method patched, the page works as it is, only slower.
  // window.strobo.lighter lists the changes made.
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

  P.lighterBokeh = lighterBokeh;
})((window.stroboPage = window.stroboPage || {}));
