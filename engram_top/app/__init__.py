"""The Textual dashboard: screens, panels, widgets; it reads the store, the session does I/O."""
