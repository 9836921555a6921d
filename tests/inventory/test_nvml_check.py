"""scripts/nvml_check.py, the GPU-machine check, run here against the fake NVML and a fake 570.x driver root:
it prints the CDI spec the daemon would write for GPU 0 (the same code path as prepare) and validates it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from bridge.cdi import validate_spec
from fake_pynvml import FakeNvml, hgx_h100
from tests.fakedriver import LIBDIR, VERSION, make_host

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nvml_check.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nvml_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nvml_check_prints_gpu_0s_cdi_spec_from_the_driver_root(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    host = make_host(tmp_path, range(8))
    rc = load_script().main(["--seconds", "0", "--host-root", str(host)],
                            nvml_module=FakeNvml(hgx_h100(), driver=VERSION))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"INFO CDI: driver {VERSION} at driver root / (read at {host})" in out
    head, _, body = out.partition("--- CDI spec for GPU 0 (GPU-00000000-1111-2222-3333-444455556666)")
    doc = json.loads(body[body.index("\n") + 1:body.index("\nclose() took")])
    validate_spec(doc)
    paths = {m["containerPath"] for m in doc["containerEdits"]["mounts"]}
    assert {f"/{LIBDIR}/libcuda.so.{VERSION}", f"/{LIBDIR}/libnvidia-ml.so.{VERSION}"} <= paths
    assert doc["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]


def test_nvml_check_fails_when_the_driver_root_has_another_version(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    host = make_host(tmp_path, range(8))  # 570 files, NVML says 550: the spec is built, the log says why
    load_script().main(["--seconds", "0", "--host-root", str(host)], nvml_module=FakeNvml(hgx_h100()))
    assert "holds driver 570.124.06, but the GPUs report driver 550.54.15" in capsys.readouterr().out


def test_nvml_check_says_when_the_libraries_were_found_through_the_ld_so_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The H200 finding: `--driver-root /` with the driver in /lib, which only /etc/ld.so.cache names."""
    from tests.fakedriver import make_dev
    from tests.fakeldcache import H200_VERSION, make_cache_only_driver

    make_cache_only_driver(tmp_path)
    make_dev(tmp_path, [0])
    rc = load_script().main(["--seconds", "0", "--host-root", str(tmp_path), "--cdi-source", "own"],
                            nvml_module=FakeNvml(hgx_h100(1), driver=H200_VERSION))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert (f"4 libraries in /lib (found through /etc/ld.so.cache: the standard library directories hold no "
            f"lib*.so.{H200_VERSION})") in out
    doc = json.loads(out[out.index("\n", out.index("--- CDI spec for GPU 0")) + 1:out.index("\nclose() took")])
    assert {m["containerPath"] for m in doc["containerEdits"]["mounts"]} >= {
        f"/lib/libcuda.so.{H200_VERSION}", f"/lib/libnvidia-ml.so.{H200_VERSION}"}
