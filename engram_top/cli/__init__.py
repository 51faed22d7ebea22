"""The commands: arguments, their checks, and how each command ends."""
