"""Reference data taken from the seed thread (see seeds/dsv41_flash_4xb200.toml)."""

from pathlib import Path

SEED_FILE = Path(__file__).with_name("dsv41_flash_4xb200.toml")
