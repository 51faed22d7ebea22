"""The base the apps' mixins (KeysShown, QuitsAsking, SafeOutput ...) name: Textual's App,
which each is mixed into ahead of App, for the type checker; at run time a plain object, so
that a mixin is no App of its own (Textual sets up each App subclass it sees)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App

    AppMixin = App[int]
else:
    AppMixin = object
