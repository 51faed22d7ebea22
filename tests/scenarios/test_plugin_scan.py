"""The look for engine plugins before importlib.metadata is loaded: it may say yes where
there is none (metadata then decides), never no where a package declares one."""

from __future__ import annotations

import sys
import zipfile
from importlib.machinery import PathFinder
from pathlib import Path

import pytest

from scenarios import engines


def dist(where: Path, name: str, entry_points: str | None) -> None:
    info = where / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing.zip"), str(site)])
    monkeypatch.setattr(sys, "meta_path", [PathFinder])
    dist(site, "plain", None)
    dist(site, "tool", "[console_scripts]\ntool = tool:main\n")
    (site / "single.egg-info").write_text("Metadata-Version: 1.0\nName: single\n")
    return site


def test_no_package_declares_the_group(path: Path) -> None:
    assert engines._may_declare_plugins() is False


def test_a_package_that_declares_it_is_found(path: Path) -> None:
    dist(path, "toy", f"[{engines.PLUGIN_GROUP}]\ntoy = toy_engine:ENGINE\n")
    assert engines._may_declare_plugins() is True
    # and importlib.metadata, reading the same files, finds the same entry point
    from importlib.metadata import entry_points
    assert [ep.name for ep in entry_points(group=engines.PLUGIN_GROUP)] == ["toy"]


def test_an_egg_info_folder_counts(path: Path) -> None:
    (path / "old.egg-info").mkdir()
    (path / "old.egg-info" / "entry_points.txt").write_text(f"[ {engines.PLUGIN_GROUP} ]\n")
    assert engines._may_declare_plugins() is True


def test_a_zip_on_the_path_is_left_to_importlib(path: Path, tmp_path: Path) -> None:
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("x.py", "")
    sys.path.append(str(archive))
    assert engines._may_declare_plugins() is True


def test_another_finder_of_distributions_is_left_to_importlib(path: Path) -> None:
    class Finder:
        @staticmethod
        def find_distributions(*args: object, **kwargs: object) -> list[object]:
            return []

    sys.meta_path.append(Finder)  # type: ignore[arg-type]
    assert engines._may_declare_plugins() is True
