"""The live view as a Textual app: widgets redrawn from the feeds ten times a second.

The drawing is :mod:`.live_draw`'s; this module lays it out and binds the keys: ``q`` (and
Ctrl-C) quit,
space pause (the feeds are still read, so nothing is missed; the screen stands still), ``+``
and ``-`` the window (1 s to 10 min), ``1`` to ``9`` show or hide a panel, ``tab``/``r`` and
``shift+tab``/``R`` the next or previous rank. The app paints its own background from its
theme, so its colours read the same on a light or a dark terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from stroboscope.export import live_draw
from stroboscope.export.live_draw import WINDOWS_S, ViewState
from stroboscope.export.live_feed import Feed

FRAME_S = 0.1
"""Seconds between frames (10 frames a second)."""
STEPS_EVERY = 5
"""Frames between two readings of the steps (twice a second)."""


def text_lines(text: Text, base: Style, get_style: Callable[[str], Style]) -> list[list[Segment]]:
    """The lines of ``text`` as segments, each run's style its spans' over ``text.style`` over
    ``base``: what ``Segment.apply_style(text.render(...), base)`` gives per line, in one pass
    over the span edges with each combination of spans styled once (rich's general path
    combines the styles again for every run)."""
    plain = text.plain

    def style_of(s: str | Style) -> Style:
        return get_style(s) if isinstance(s, str) else s

    spans = [sp for sp in text.spans if sp.end > sp.start]
    styles = [style_of(sp.style) for sp in spans]
    root = base + style_of(text.style) if text.style else base
    edges = sorted(
        [(0, False, -1), (len(plain), True, -1)]
        + [(sp.start, False, i) for i, sp in enumerate(spans)]
        + [(sp.end, True, i) for i, sp in enumerate(spans)],
        key=lambda e: (e[0], e[1]),
    )
    combined: dict[tuple[int, ...], Style] = {(): root}
    active: list[int] = []
    lines: list[list[Segment]] = [[]]
    for (at, leaving, i), (nxt, _l, _i) in zip(edges, edges[1:], strict=False):
        if i >= 0:
            if leaving:
                active.remove(i)
            else:
                active.append(i)
        if nxt <= at:
            continue
        key = tuple(sorted(active))
        style = combined.get(key)
        if style is None:
            style = combined[key] = Style.chain(root, *(styles[k] for k in key))
        first, *rest = plain[at:nxt].split("\n")
        if first:
            lines[-1].append(Segment(first, style))
        for part in rest:
            lines.append([Segment(part, style)] if part else [])
    return lines


class Pane(Widget):
    """A block of text redrawn every frame: its height follows its lines, a new text only
    repaints it (the screen is laid out again only when the number of lines changes), and its
    lines go to the screen as segments, rendered once per text (not through a widget's
    content cache)."""

    DEFAULT_CSS = "Pane { height: 1; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.text = Text()
        self._lines = 1
        self._strips: list[Strip] | None = None
        self._base: Style | None = None  # rich_style, kept until a resize or a new theme

    def update(self, text: Text) -> None:
        """Show ``text`` (a text equal to the one shown repaints nothing)."""
        if text == self.text and text.style == self.text.style:  # the screen shows it already
            return
        self.text = text
        self._strips = None
        lines = text.plain.count("\n") + 1
        if lines != self._lines:
            self._lines = lines
            self.styles.height = lines  # lays the screen out again
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._strips is None:
            if self._base is None:  # the theme's background and text colour under ours
                self._base = self.rich_style  # (Textual works it out from the DOM each call)
            base = self._base
            self._strips = [
                Strip(line).crop(0, width).extend_cell_length(width, base)
                for line in text_lines(self.text, base, self.app.console.get_style)
            ]
        return self._strips[y] if y < len(self._strips) else Strip.blank(width, self.rich_style)

    def render_lines(self, crop: Region) -> list[Strip]:
        # The lines as they are: a pane has no border, padding or tint for the styles cache
        # to add (what it would cost each frame).
        return [self.render_line(y).crop(crop.x, crop.right) for y in range(crop.y, crop.bottom)]

    def on_resize(self) -> None:
        self._strips = None
        self._base = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips = None
        self._base = None


class LiveApp(App[None]):
    """``stroboscope top``: the feeds' panels, scopes, steps and figures (see the module).

    Parameters
    ----------
    feeds : list of Feed
        The recordings followed (one per rank); the app closes them when it ends.
    view : ViewState, optional
        The settings it starts with.
    """

    CSS = """
    #footer { dock: bottom; }
    #body { height: 1fr; }
    .panel { margin-bottom: 0; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "interrupt", "quit", priority=True),
        Binding("space", "pause", "pause"),
        Binding("plus,equals_sign", "window(1)", "longer window"),
        Binding("minus", "window(-1)", "shorter window"),
        Binding("tab,r", "rank(1)", "next rank", priority=True),
        Binding("shift+tab,R", "rank(-1)", "previous rank", priority=True),
        *(Binding(str(k), f"panel({k})", show=False) for k in range(1, 10)),
    ]

    def __init__(
        self,
        feeds: list[Feed],
        view: ViewState | None = None,
        on_interrupt: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.on_interrupt = on_interrupt
        if not feeds:
            raise ValueError("feeds must name at least one recording to watch, got none")
        self.feeds = feeds
        self.view = view or ViewState()
        self.frames = 0
        self.frame_s_total = 0.0

    def compose(self) -> ComposeResult:
        yield Pane(id="header")
        with VerticalScroll(id="body"):
            for k in range(max(len(f.panels) for f in self.feeds)):
                yield Pane(classes="panel", id=f"panel-{k}")
            yield Pane(id="scopes")
            yield Pane(id="steps")
        yield Pane(id="footer")

    def on_mount(self) -> None:
        self.tick()
        self.set_interval(FRAME_S, self.tick)

    def tick(self) -> None:
        """Read what the recordings wrote, and draw (unless paused)."""
        for f in self.feeds:
            f.poll()
        if not self.view.paused:
            self.draw()

    def draw(self, force: bool = False) -> None:
        """Redraw every widget from the feeds (the steps every :data:`STEPS_EVERY` frames,
        or now with ``force``)."""
        t0 = time.perf_counter()
        view, feeds = self.view, self.feeds
        feed = feeds[view.rank]
        now = live_draw.now_of(feeds)
        width = max(40, self.size.width - 2)
        height = 2 if self.size.height >= 40 else 1
        self.query_one("#header", Pane).update(live_draw.header(feeds, view))
        for k in range(max(len(f.panels) for f in feeds)):
            widget = self.query_one(f"#panel-{k}", Pane)
            p = feed.panels[k] if k < len(feed.panels) else None
            widget.display = p is not None and p.title not in view.hidden
            if p is not None and widget.display:
                widget.update(live_draw.panel(feed, p, view, width, height, now))
        self.query_one("#scopes", Pane).update(live_draw.scopes(feed, view, width, now))
        if self.frames % STEPS_EVERY == 0 or force:  # the step rule over every rank's calls
            self.query_one("#steps", Pane).update(live_draw.steps(feeds, view))
        self.query_one("#footer", Pane).update(live_draw.footer(feeds, view))
        self.frames += 1
        self.frame_s_total += time.perf_counter() - t0

    def action_interrupt(self) -> None:
        """Ctrl-C (the terminal sends it as a key while the view is up): quit, and call
        ``on_interrupt`` (``record --live``: the recording ends, as Ctrl-C ends it without the
        view)."""
        if self.on_interrupt is not None:
            self.on_interrupt()
        self.exit()

    def action_pause(self) -> None:
        self.view.paused = not self.view.paused
        self.draw(force=True)

    def action_window(self, direction: int) -> None:
        at = min(range(len(WINDOWS_S)), key=lambda i: abs(WINDOWS_S[i] - self.view.window_s))
        self.view.window_s = WINDOWS_S[max(0, min(len(WINDOWS_S) - 1, at + direction))]
        self.draw(force=True)

    def action_rank(self, direction: int) -> None:
        self.view.rank = (self.view.rank + direction) % len(self.feeds)
        self.draw(force=True)

    def action_panel(self, number: int) -> None:
        panels = self.feeds[self.view.rank].panels
        if 1 <= number <= len(panels):
            self.view.hidden ^= {panels[number - 1].title}
            self.draw(force=True)

    def on_unmount(self) -> None:
        for f in self.feeds:
            f.close()

    def screen_text(self) -> str:
        """What the screen shows now, as plain text (one line per terminal row)."""
        strips: Any = self.screen._compositor.render_strips()
        return "\n".join(strip.text for strip in strips)
