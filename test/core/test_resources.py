"""resources: the install's share/simreal_ros where installed, the checkout otherwise."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from simreal_ros import resources
from simreal_ros.episodes import typestore
from simreal_ros.graph import description, processes
from simreal_ros.policy import checkpoint as ckpt
from simreal_ros.sim import profiles

ROOT = Path(__file__).resolve().parents[2]


def copy_of_resources(package_dir: Path):
    """resources.py loaded from ``package_dir`` (as if the package lived there)."""
    package_dir.mkdir(parents=True)
    shutil.copy(resources.__file__, package_dir / "resources.py")
    spec = importlib.util.spec_from_file_location(
        f"resources_copy_{abs(hash(package_dir))}", package_dir / "resources.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_prefix(prefix: Path) -> Path:
    share = prefix / "share" / "simreal_ros"
    share.mkdir(parents=True)
    (share / "package.xml").write_text("<package/>")
    # What ament_index_python looks up.
    index = prefix / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / "simreal_ros").write_text("")
    return share


def test_the_checkout_finds_its_own_files_and_every_path_goes_through_it(monkeypatch, tmp_path):
    # The dev venv has a share/simreal_ros (generated interfaces only); it must not win.
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path))
    make_prefix(tmp_path)
    monkeypatch.delenv("SIMREAL_PROFILES_DIR", raising=False)
    assert resources.data_root() == ROOT and not resources.is_installed()
    assert resources.checkout_root() == ROOT == processes.PACKAGE_ROOT
    assert ckpt.shipped_checkpoint("reach") == ROOT / "checkpoints" / "reach"
    assert profiles.profiles_dir() == ROOT / "config" / "profiles"
    assert description.config_directory() == ROOT / "config"
    assert typestore._msg_dirs() == [ROOT / "msg"]


@pytest.mark.parametrize("site", ["lib/python3.11/site-packages", "lib/python3/dist-packages"])
def test_an_install_prefix_with_package_xml_is_installed(tmp_path, site):
    share = make_prefix(tmp_path / "install")
    module = copy_of_resources(tmp_path / "install" / site / "simreal_ros")
    assert module.is_installed() and module.checkout_root() is None
    assert module.data_root() == share
    assert module.data_path("checkpoints", "reach") == share / "checkpoints" / "reach"


def test_a_site_packages_without_the_share_directory_is_not_an_install(monkeypatch, tmp_path):
    # e.g. a venv whose share/simreal_ros holds no package.xml; the ament index decides.
    elsewhere = make_prefix(tmp_path / "other")
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "other"))
    module = copy_of_resources(tmp_path / "venv" / "lib/python3.11/site-packages/simreal_ros")
    assert not module.is_installed()
    assert module.data_root() == elsewhere


def test_nothing_found_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    module = copy_of_resources(tmp_path / "copied" / "simreal_ros")
    with pytest.raises(FileNotFoundError, match=r"source install/setup\.bash"):
        module.data_root()
