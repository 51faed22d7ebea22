"""Exports: a snapshot folder and its charts."""
