"""The key footer: one line of text, drawn again only when the keys it shows change.

Textual's Footer is a container of a widget per key (ten on the dashboard) that it makes
again, mounted, styled and laid out, at every bindings signal: a start sends several, and the
scenario list's numbered keys follow its rows. Each making cost the dashboard 15-20 ms and
two layout passes of the screen (25-30 ms each) after its first frame. This footer draws
the same keys, the same way (a test compares it cell by cell with Textual's), as one line:
a signal is a comparison of a handful of tuples, and a change is one repaint of one line.
Its keys are in the first frame. As Textual's, a key is pressed by a click on it (a disabled
one rings the bell), lights up under the mouse, tells its tooltip there, and a line longer
than the terminal scrolls with the mouse wheel, the command palette's key staying right.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import groupby

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget


@dataclass(frozen=True)
class Item:
    """A run of the line: a key's display or description, a group's label, the palette's
    border, or a blank (a margin between widgets, the palette key's padding)."""

    text: str
    part: str  # "key", "description", "label", "separator", "margin", "padding"
    key: Binding | None = None  # the key this run belongs to (click, hover, tooltip)
    enabled: bool = True
    tooltip: str = ""


Line = tuple[tuple[Item, ...], tuple[Item, ...]]  # (the keys from the left, the right's)
BLANK = Item(" ", "margin")


def _spaced(widgets: list[tuple[int, list[Item], int]]) -> list[Item]:
    """Neighbours' runs with the larger of their margins between them (Textual's horizontal
    layout), the first's left margin before and the last's right margin after."""
    out: list[Item] = []
    before = 0
    for n, (left, runs, right) in enumerate(widgets):
        out += [BLANK] * (max(before, left) if n else left) + runs
        before = right
    return out + [BLANK] * before


class KeyFooter(Widget, can_focus=False):
    """The screen's active keys on one line, as Textual's Footer shows them."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"footer-key--key", "footer-key--description", "footer-key--item",
                         "footer-key--hover", "footer-key--label", "footer-key--separator"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        width: 1fr;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        .footer-key--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .footer-key--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        .footer-key--item {
            background: $footer-item-background;
        }
        .footer-key--hover {
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
        .footer-key--label {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        .footer-key--separator {
            color: $foreground 20%;
        }
    }
    """

    def __init__(self, *, compact: bool = False, show_command_palette: bool = True,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.compact = compact
        self.show_command_palette = show_command_palette
        self._line: Line = ((), ())
        self._hover: Binding | None = None
        self._scroll = 0  # cells of the left part scrolled out of sight

    # ------------------------------------------------------------------ what it shows

    def _keys(self) -> Line:
        """The line's runs: Textual's Footer's widgets, their paddings and margins (a gap
        between two neighbours is the larger of their margins), as it lays them out."""
        app = self.app
        active = self.screen.active_bindings
        by_action: defaultdict[str, list[tuple[Binding, bool, str]]] = defaultdict(list)
        for _, binding, enabled, tooltip in active.values():
            if binding.show:
                by_action[binding.action].append((binding, enabled, tooltip))
        key_margin = 1 if self.compact else 0
        # (left margin, runs, right margin) of each widget in the line, in order
        widgets: list[tuple[int, list[Item], int]] = []
        for group, runs in groupby(by_action.values(), lambda bs: bs[0][0].group):
            keys = [bs[0] for bs in runs]
            if group is not None and len(keys) > 1:
                widgets.append((0, self._group(keys, group.compact), int(group.compact)))
                widgets.append((0, [Item(group.description, "label")], 1))
                continue
            for binding, enabled, tooltip in keys:
                widgets.append((0, self._key(binding, binding.description, enabled, tooltip,
                                             self.compact), key_margin))
        right: list[Item] = []
        palette = app.COMMAND_PALETTE_BINDING
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE and palette in active:
            _, binding, enabled, tooltip = active[palette]
            right = [Item("▏", "separator", binding, enabled),
                     *self._key(binding, binding.description, enabled,
                                binding.tooltip or binding.description, True),
                     BLANK if self.compact else
                     Item(" ", "padding", binding, enabled)]
        return tuple(_spaced(widgets)), tuple(right)

    def _key(self, binding: Binding, description: str, enabled: bool, tooltip: str,
             compact: bool) -> list[Item]:
        """A key as FooterKey draws it: "k Desc" compact, " k Desc " not, "k" alone."""
        display = self.app.get_key_display(binding)
        if not description:
            return [Item(display, "key", binding, enabled, tooltip)]
        if compact:
            return [Item(display, "key", binding, enabled, tooltip),
                    Item(f" {description}", "description", binding, enabled, tooltip)]
        return [Item(f" {display} ", "key", binding, enabled, tooltip),
                Item(f"{description} ", "description", binding, enabled, tooltip)]

    def _group(self, keys: list[tuple[Binding, bool, str]], compact_group: bool) -> list[Item]:
        """Keys sharing one label ("⏎ 1 2 3 Start/switch"), each its key alone: a blank
        around and between them, or a compact group's one blank before them."""
        margin = 0 if compact_group else 1
        inside = [(margin, self._key(binding, "", enabled, tooltip or binding.description,
                                     True), margin)
                  for binding, enabled, tooltip in keys]
        return ([BLANK] if compact_group else []) + _spaced(inside)

    # ------------------------------------------------------------------ when it changes

    def on_mount(self) -> None:
        self._line = self._keys()
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen[object]) -> None:
        if not self.is_attached or screen is not self.screen:
            return
        line = self._keys()
        if line != self._line:
            self._line = line
            self.refresh()

    # ------------------------------------------------------------------ drawing

    def _style(self, item: Item) -> Style:
        """A run's style as Textual draws its widget: a margin is the footer's ground; a
        key's runs are its component colours over the key's own ground (lit under the
        mouse, dim when disabled), each colour blended over what is beneath it."""
        ground = self.styles.background
        if item.part == "margin":
            return Style(bgcolor=ground.rich_color)
        if item.part == "label":
            label = self.get_component_styles("footer-key--label")
            bg = ground + label.background
            return Style(color=(bg + label.color).rich_color, bgcolor=bg.rich_color)
        unlit = ground + self.get_component_styles("footer-key--item").background
        if item.key is not None and item.key == self._hover:
            hover = self.get_component_styles("footer-key--hover")
            bg = ground + hover.background
            fg = bg + hover.color
        else:
            bg, fg = unlit, unlit + self.styles.color
        base = Style(color=fg.rich_color, bgcolor=bg.rich_color, dim=not item.enabled or None)
        if item.part == "separator":  # a border: its colour over the unlit ground
            line = self.get_component_styles("footer-key--separator").color
            return base + Style(color=(unlit + line).rich_color)
        if item.part == "padding":
            return Style(bgcolor=bg.rich_color)
        part = self.get_component_styles(f"footer-key--{item.part}")
        part_bg = bg + part.background
        return base + Style(color=(part_bg + part.color).rich_color, bgcolor=part_bg.rich_color,
                            bold=part.text_style.bold or None)

    def _right_at(self) -> int:
        """The cell where the right part (the palette's key) begins."""
        return max(0, self.size.width - sum(cell_len(i.text) for i in self._line[1]))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        ground = self._style(BLANK)
        if y or not width:
            return Strip.blank(width, ground)
        left, right = self._line
        right_at = self._right_at()
        self._scroll = min(self._scroll, self._overflow())  # a wider terminal, fewer keys
        shown = Strip([Segment(i.text, self._style(i)) for i in left]).crop(
            self._scroll, self._scroll + right_at).adjust_cell_length(right_at, ground)
        palette = Strip([Segment(i.text, self._style(i)) for i in right])
        return Strip.join([shown, palette]).crop(0, width).adjust_cell_length(width, ground)

    # ------------------------------------------------------------------ the mouse

    def _at(self, x: int) -> Item | None:
        """The run drawn at cell x."""
        left, right = self._line
        right_at = self._right_at()
        start = right_at if x >= right_at else -self._scroll
        for item in right if x >= right_at else left:
            end = start + cell_len(item.text)
            if start <= x < end:
                return item
            start = end
        return None

    def on_mouse_move(self, event: events.MouseMove) -> None:
        item = self._at(event.x)
        key = item.key if item is not None else None
        if key != self._hover:  # by value: a remap makes the keys' Bindings anew
            self._hover = key
            self.tooltip = (item.tooltip or None) if item is not None and key else None
            self.refresh()

    def on_leave(self, event: events.Leave) -> None:
        if self._hover is not None:
            self._hover = None
            self.tooltip = None
            self.refresh()

    def on_mouse_down(self, event: events.MouseDown) -> None:
        item = self._at(event.x)
        if item is None or item.key is None:
            return
        if item.enabled:
            self.app.simulate_key(item.key.key)
        else:
            self.app.bell()

    def _overflow(self) -> int:
        left, right = self._line
        return max(0, sum(cell_len(i.text) for i in (*left, *right)) - self.size.width)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._scroll_by(event, 1)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._scroll_by(event, -1)

    def _scroll_by(self, event: events.MouseEvent, cells: int) -> None:
        scroll = min(self._overflow(), max(0, self._scroll + cells))
        if scroll != self._scroll:
            self._scroll = scroll
            self.refresh()
            event.stop()
