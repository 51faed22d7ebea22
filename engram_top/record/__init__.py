"""Recordings: their format, the recorder, the reader, replay, and other tools' results."""
