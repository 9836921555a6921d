"""Finding the NVIDIA Container Toolkit's spec on a node, resolved with the CDI cache's rules
(cncf-tags/container-device-interface pkg/cdi/cache.go `refresh`, pkg/cdi/spec-dirs.go `scanSpecDirs`)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from bridge.cdi.toolkit import ToolkitSpecs
from bridge.inventory import devices_from_spec
from tests.fakedriver import put_spec as put
from tests.fakedriver import toolkit_spec

GPUS = devices_from_spec("4xH100-80GB", "node-a")


def scan(host: Path):  # type: ignore[no-untyped-def]
    return ToolkitSpecs(host_root=host).scan()


def test_the_toolkits_uuid_names_are_used_for_gpus_it_names(tmp_path: Path) -> None:
    put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS))
    result = scan(tmp_path)
    assert result.files == ("/var/run/cdi/nvidia.yaml",)
    assert result.names_for(GPUS[:2]) == {g.uuid: f"nvidia.com/gpu={g.uuid}" for g in GPUS[:2]}


def test_an_index_name_counts_only_when_it_is_that_gpus_device_node(tmp_path: Path) -> None:
    spec = toolkit_spec(GPUS, names=("index",))
    spec["devices"][0]["containerEdits"]["deviceNodes"] = [{"path": "/dev/nvidia7"}]  # "0" is another GPU here
    put(tmp_path, "/etc/cdi/nvidia.json", spec)
    result = scan(tmp_path)
    assert result.name_for(GPUS[0]) is None
    assert result.name_for(GPUS[1]) == "nvidia.com/gpu=1"


def test_a_container_gets_the_toolkits_names_only_when_it_names_every_gpu_of_it(tmp_path: Path) -> None:
    put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS[:3]))
    assert scan(tmp_path).names_for([GPUS[0], GPUS[3]]) is None


def test_the_same_name_in_two_files_of_one_directory_resolves_to_nothing(tmp_path: Path) -> None:
    put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS))
    put(tmp_path, "/var/run/cdi/nvidia-copy.json", toolkit_spec(GPUS[:1]))
    result = scan(tmp_path)
    assert result.name_for(GPUS[0]) is None  # the cache drops a conflicting name from both files
    assert result.name_for(GPUS[1]) == f"nvidia.com/gpu={GPUS[1].uuid}"


def test_a_later_directory_wins_but_cannot_revive_a_conflicting_name(tmp_path: Path) -> None:
    put(tmp_path, "/etc/cdi/nvidia.yaml", toolkit_spec(GPUS))
    put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS))  # higher priority: no conflict
    assert scan(tmp_path).name_for(GPUS[0]) == f"nvidia.com/gpu={GPUS[0].uuid}"
    put(tmp_path, "/etc/cdi/nvidia-old.yaml", toolkit_spec(GPUS[:1]))  # now a conflict inside /etc/cdi
    assert scan(tmp_path).name_for(GPUS[0]) is None  # deleted after the scan, /var/run/cdi notwithstanding


def test_specs_the_runtime_would_skip_are_skipped_and_reported(tmp_path: Path) -> None:
    bad = toolkit_spec(GPUS)
    bad["devices"][0]["containerEdits"]["unknownField"] = 1
    put(tmp_path, "/var/run/cdi/nvidia.yaml", bad)
    put(tmp_path, "/etc/cdi/newer.yaml", toolkit_spec(GPUS, version="1.2.0"))
    put(tmp_path, "/etc/cdi/broken.yaml", "cdiVersion: [unclosed")
    put(tmp_path, "/etc/cdi/sub/nvidia.yaml/inner.yaml", toolkit_spec(GPUS))  # a directory with a spec name
    put(tmp_path, "/etc/cdi/nvidia.yml", toolkit_spec(GPUS))  # .yml is not read by the runtime
    result = scan(tmp_path)
    assert result.names_for(GPUS) is None and result.files == ()
    problems = " | ".join(result.problems)
    assert "/var/run/cdi/nvidia.yaml: skipped, as the runtime would skip it" in problems
    assert "/etc/cdi/newer.yaml: skipped" in problems and "1.2.0" in problems
    assert "/etc/cdi/broken.yaml: not readable as a CDI spec" in problems


def test_other_kinds_and_unquoted_yaml_index_names(tmp_path: Path) -> None:
    other = toolkit_spec(GPUS)
    other["kind"] = "management.nvidia.com/gpu"
    put(tmp_path, "/var/run/cdi/management.nvidia.com-gpu.yaml", other)
    assert scan(tmp_path).files == ()
    text = yaml.safe_dump(toolkit_spec(GPUS[:1], names=("index",))).replace("name: '0'", "name: 0")
    assert "name: 0\n" in text
    put(tmp_path, "/etc/cdi/nvidia.yaml", text)
    assert scan(tmp_path).name_for(GPUS[0]) == "nvidia.com/gpu=0"  # the Go loader reads 0 as the string "0"


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    specs = ToolkitSpecs(host_root=tmp_path)
    path = put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS[:1]))
    assert specs.scan().name_for(GPUS[1]) is None
    put(tmp_path, "/var/run/cdi/nvidia.yaml", toolkit_spec(GPUS))
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    assert specs.scan().name_for(GPUS[1]) == f"nvidia.com/gpu={GPUS[1].uuid}"
    path.unlink()
    assert specs.scan().files == ()


def test_through_a_host_root_mount_var_run_is_the_hosts_run_not_the_daemons(tmp_path: Path) -> None:
    """On most hosts /var/run is an absolute link to /run; read through a hostPath mount of / at /host, the
    kernel would follow it into the daemon's own /run. The scan resolves it inside the host's tree."""
    (tmp_path / "var").mkdir()
    (tmp_path / "var/run").symlink_to("/run")
    put(tmp_path, "/run/cdi/nvidia.yaml", toolkit_spec(GPUS))
    result = scan(tmp_path)
    assert result.files == ("/var/run/cdi/nvidia.yaml",)  # named by the host path the runtime reads
    assert result.name_for(GPUS[0]) == f"nvidia.com/gpu={GPUS[0].uuid}"
