"""Find the NVIDIA driver's user space under a driver root, for the driver version NVML reports (filesystem I/O only).

Input: a driver root and a dev root (`bridge.cdi.driver.Root`: host path + where this process reads it), the
driver version, the kernel release and the firmware-class search path. Output: `DriverFiles`, `HostFile`s and
`DeviceNode`s (pure values). Nothing here builds a spec.

The rules follow NVIDIA's own CDI generation (NVIDIA/nvidia-container-toolkit, cited per rule below), so a
container gets what `nvidia-ctk cdi generate` would give it:

* **Libraries** (`pkg/nvcdi/driver-nvml.go` `getVersionLibs`, `internal/lookup/root/root.go` `updateInfo`,
  `pkg/lookup/library.go` `NewLibraryLocator`): the driver's library directories are those of the standard search
  dirs (below) that hold a `lib*.so.<version>` file, symlinks resolved; every `*.so.<version>` in them and in their
  `vdpau/` subdirectories is mounted, plus the legacy `libnvidia-nvvm70.so.*`. There is no fixed name list: what
  the installer put there for this version is what the container gets (`libcuda`, `libnvidia-ml`,
  `libnvidia-ptxjitcompiler`, `libnvidia-nvvm`, `libcudadebugger`, `libnvidia-gpucomp`, the graphics libraries, …).
  When the search dirs hold no `lib*.so.<version>`, NVIDIA falls back to the root's `/etc/ld.so.cache`
  (`library.go`: `First(symlink locator, ldcache locator)`; `pkg/lookup/ldcache.go`), and so do we
  (`bridge.cdi.ldcache` reads it): every link on the way from each 64-bit cache entry to its file is matched
  against `lib*.so.<version>` (`symlinks.ResolveChain`), and the directories of the matching files are the
  driver's library directories. On the H200 machine that showed the need, `ldconfig -p` says `libcuda.so.1 =>
  /lib/libcuda.so.1` (and `=> /usr/local/nvidia/lib64/libcuda.so.1`, from `/etc/ld.so.conf.d`), `/lib/libcuda.so.1`
  links to `/usr/local/nvidia/lib64/libcuda.so.580.159.04`, so the directory is `/usr/local/nvidia/lib64`.
  Unlike NVIDIA, which resolves those links with the kernel, the cache's paths are resolved inside the root like
  every other path here.
* **Soname links** (`internal/discover/symlinks.go`): NVIDIA reads each library's ELF `SONAME` and recreates the
  soname and `.so` links that exist on the host. We take the same links from the host directly: every symlink
  next to a mounted library that resolves to it (`libcuda.so.1 -> libcuda.so.<v>`, `libcuda.so -> libcuda.so.1`),
  plus `libcuda.so -> libcuda.so.1`, which NVIDIA always adds ("many applications wrongly assume that libcuda.so
  exists").
* **Binaries** (`driver-nvml.go` `newDriverBinariesDiscoverer`, `pkg/lookup/executable.go`, `pkg/lookup/path.go`):
  `nvidia-smi`, `nvidia-debugdump`, `nvidia-persistenced`, `nvidia-cuda-mps-control`, `nvidia-cuda-mps-server`,
  `nvidia-imex`, `nvidia-imex-ctl`, the first executable file found in `/usr/local/sbin`, `/usr/local/bin`,
  `/usr/sbin`, `/usr/bin`, `/sbin`, `/bin` under the root (this process's own `PATH` is not used: it describes
  the daemon's image, not the driver root).
* **GSP firmware** (`driver-nvml.go` `newDriverFirmwareDiscoverer`, `getFirmwareSearchPaths`): `nvidia/<version>/
  gsp*.bin` under the custom firmware-class path, `/lib/firmware/updates/<uname -r>`, `/lib/firmware/updates`,
  `/lib/firmware/<uname -r>`, `/lib/firmware`, all inside the driver root.
* **IPC sockets** (`internal/discover/ipc.go`): `nvidia-persistenced/socket` and `nvidia-fabricmanager/socket`
  under `/run`, else `/var/run`, when they exist now. NVIDIA also lists `/tmp/nvidia-mps`, but its locator only
  accepts non-directories (`pkg/lookup/file.go` `assertFile`) and that path is the MPS pipe directory, so NVIDIA's
  specs never carry it; neither do ours (sharing a host MPS daemon is a sharing decision, not a default).
* **Device nodes** (`pkg/nvcdi/common-nvml.go` `controlDeviceNodeDiscoverer`, `pkg/lookup/device.go`): only
  character devices that exist under the dev root; a missing candidate is left out (a CDI device node whose host
  path does not exist makes the runtime refuse the container: "failed to stat CDI host device",
  cncf-tags/container-device-interface `pkg/cdi/container-edits_unix.go` `fillMissingInfo`).

Symlinks inside a driver root are resolved as if the root were `/` (`resolve_in_root`): under the GPU Operator
the driver container's rootfs has absolute links, which must not be followed into the daemon's own filesystem.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from bridge.cdi.driver import CONTROL_DEVICE_NODES, DeviceNode, DriverFiles, HostFile, Root, Symlink, join_host
from bridge.cdi.ldcache import LD_SO_CACHE, LdCache, load_ld_cache

# pkg/lookup/library.go NewLibraryLocator (order kept: the first directory holding a library wins on duplicates)
LIBRARY_SEARCH_DIRS = (
    "/",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
)
BINARY_SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
DRIVER_BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
                   "nvidia-cuda-mps-server", "nvidia-imex", "nvidia-imex-ctl")
IPC_SOCKETS = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
IPC_SOCKET_DIRS = ("/run", "/var/run")
FIRMWARE_CLASS_PATH_FILE = "/sys/module/firmware_class/parameters/path"
LEGACY_NVVM_PREFIX = "libnvidia-nvvm70.so."
_MAX_SYMLINKS = 40  # Linux's MAXSYMLINKS
_VERSION_RE = re.compile(r"\d+(\.\d+)+")


def resolve_in_root(view: Path, path: str) -> str | None:
    """The real path of `path` inside the tree at `view`, following symlinks as if `view` were `/` (absolute link
    targets and `..` never leave it). None when a component is missing or the links loop."""
    todo = [p for p in reversed(path.split("/")) if p]
    done: list[str] = []
    hops = 0
    while todo:
        part = todo.pop()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = view.joinpath(*done, part)
        try:
            st = os.lstat(here)
        except OSError:
            return None
        if not stat.S_ISLNK(st.st_mode):
            done.append(part)
            continue
        hops += 1
        if hops > _MAX_SYMLINKS:
            return None
        try:
            target = os.readlink(here)
        except OSError:
            return None
        if target.startswith("/"):
            done = []
        todo.extend(p for p in reversed(target.split("/")) if p)
    return "/" + "/".join(done)


def host_root_path(host_root_view: Path | str, host: str) -> Root:
    """The host directory `host` as this process can read it through a view of the host's `/` (e.g. a hostPath
    mount at /host). Symlinks on the way are resolved inside the view: on most hosts `/var/run` is a link to
    `/run`, which the kernel would follow to the DAEMON's /run, not the host's. The host path stays as given."""
    root = Root.on_host(host, host_root_view)
    if str(host_root_view) in ("", "/"):
        return root
    resolved = resolve_in_root(Path(host_root_view), root.host)
    return root if resolved is None else Root(root.host, Path(join_host(str(host_root_view), resolved)))


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _is_executable(path: Path) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111)


def _join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


def _is_lib_name(name: str) -> bool:
    """`lib?*.so` or `lib?*.so.<anything>` (NVIDIA's `isLibName` in internal/discover/ldconfig.go)."""
    if not name.startswith("lib") or ".so" not in name[4:]:
        return False
    rest = name.rsplit(".so", 1)[1]
    return rest == "" or rest.startswith(".")


def _library_search_entries(root: Root) -> Iterator[tuple[str, str]]:
    """(directory, file name) for every entry of the library search dirs that exist, directories resolved."""
    for search in LIBRARY_SEARCH_DIRS:
        real = resolve_in_root(root.view, search)
        if real is not None:
            for name in _listdir(root.view_path(real)):
                yield real, name


def read_ld_cache(root: Root) -> LdCache:
    """The root's `/etc/ld.so.cache` (the path resolved inside the root: a link out of it is not followed)."""
    real = resolve_in_root(root.view, LD_SO_CACHE)
    return load_ld_cache(None if real is None else root.view_path(real), shown_as=root.host_path(LD_SO_CACHE))


def ld_cache_entries(root: Root, cache: LdCache) -> list[tuple[str, str]]:
    """(directory, file name) of every link on the way from each 64-bit cache entry to its file, directories
    resolved inside the root: `/lib/libcuda.so.1` gives `("/usr/lib", "libcuda.so.1")` and `("/usr/lib",
    "libcuda.so.580.159.04")` where `/lib -> usr/lib` and `libcuda.so.1 -> libcuda.so.580.159.04`."""
    real_dirs: dict[str, str | None] = {}
    seen: set[tuple[str, str]] = set()
    out: list[tuple[str, str]] = []
    for path in cache.library_paths():
        for _ in range(_MAX_SYMLINKS):
            directory, name = posixpath.split(posixpath.normpath("/" + path.lstrip("/")))
            if directory not in real_dirs:
                real_dirs[directory] = resolve_in_root(root.view, directory)
            real = real_dirs[directory]
            if real is None or not name or (real, name) in seen:
                break
            seen.add((real, name))
            out.append((real, name))
            try:
                target = os.readlink(root.view_path(_join(real, name)))
            except OSError:  # not a link (or gone): the chain ends here
                break
            path = target if target.startswith("/") else _join(real, target)
    return out


def driver_library_dirs(root: Root, version: str) -> list[str]:
    """The directories (container paths, symlinks resolved) of the search dirs holding a `lib*.so.<version>`."""
    return _dirs_holding(root, _library_search_entries(root), version)


def _dirs_holding(root: Root, entries: Iterable[tuple[str, str]], version: str) -> list[str]:
    """The directories of the files `lib*.so.<version>` among `entries` ((directory, name) pairs), resolved."""
    suffix = ".so." + version
    dirs: list[str] = []
    for real, name in entries:
        if not (name.startswith("lib") and name.endswith(suffix)):
            continue
        resolved = resolve_in_root(root.view, _join(real, name))
        if resolved is None or not _is_file(root.view_path(resolved)):
            continue
        parent = resolved.rsplit("/", 1)[0] or "/"
        if parent not in dirs:
            dirs.append(parent)
    return dirs


def installed_versions(root: Root, more: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Driver versions whose `libcuda.so.<v>` / `libnvidia-ml.so.<v>` exist in the search dirs or among `more`
    ((directory, name) pairs, e.g. from the ld.so.cache), for error messages."""
    found: list[str] = []
    for _, name in (*_library_search_entries(root), *more):
        for stem in ("libcuda.so.", "libnvidia-ml.so."):
            version = name[len(stem):] if name.startswith(stem) else ""
            if _VERSION_RE.fullmatch(version) and version not in found:
                found.append(version)
    return found


def _libraries(root: Root, dirs: Sequence[str], version: str) -> list[HostFile]:
    suffix = ".so." + version
    seen: set[str] = set()
    out: list[HostFile] = []

    def add(directory: str, name: str) -> None:
        resolved = resolve_in_root(root.view, _join(directory, name))
        if resolved is None or resolved in seen or not _is_file(root.view_path(resolved)):
            return
        seen.add(resolved)
        out.append(HostFile(root.host_path(resolved), resolved))

    for directory in dirs:
        for sub in (directory, _join(directory, "vdpau")):
            for name in _listdir(root.view_path(sub)):
                if name.endswith(suffix):
                    add(sub, name)
    for directory in dirs:
        for name in _listdir(root.view_path(directory)):
            if name.startswith(LEGACY_NVVM_PREFIX):
                add(directory, name)
    return out


def _symlinks(root: Root, dirs: Sequence[str], libraries: Sequence[HostFile]) -> list[Symlink]:
    mounted = {lib.container_path for lib in libraries}
    links: dict[str, Symlink] = {}
    for directory in dirs:
        for sub in (directory, _join(directory, "vdpau")):
            for name in _listdir(root.view_path(sub)):
                if not _is_lib_name(name):
                    continue
                here = root.view_path(_join(sub, name))
                try:
                    if not stat.S_ISLNK(os.lstat(here).st_mode):
                        continue
                    target = os.readlink(here)
                except OSError:
                    continue
                if resolve_in_root(root.view, _join(sub, name)) in mounted:
                    link = _join(sub, name)
                    links[link] = Symlink(target, link)
    for lib in libraries:
        directory, name = lib.container_path.rsplit("/", 1)
        if name.startswith("libcuda.so.") and name.count(".") > 2:  # libcuda.so.<version>, not libcuda.so.1
            link = _join(directory or "/", "libcuda.so")
            links.setdefault(link, Symlink("libcuda.so.1", link))
    return list(links.values())


def _binaries(root: Root) -> list[HostFile]:
    out: list[HostFile] = []
    for name in DRIVER_BINARIES:
        for directory in BINARY_SEARCH_DIRS:
            located = _join(directory, name)
            resolved = resolve_in_root(root.view, located)
            if resolved is not None and _is_executable(root.view_path(resolved)):
                out.append(HostFile(root.host_path(resolved), located))
                break
    return out


def firmware_search_dirs(kernel_release: str, firmware_class_path: str = "") -> list[str]:
    dirs = [firmware_class_path.strip()] if firmware_class_path.strip() else []
    return dirs + [f"/lib/firmware/updates/{kernel_release}", "/lib/firmware/updates",
                   f"/lib/firmware/{kernel_release}", "/lib/firmware"]


def _firmware(root: Root, version: str, kernel_release: str, firmware_class_path: str) -> list[HostFile]:
    seen: set[str] = set()
    out: list[HostFile] = []
    for search in firmware_search_dirs(kernel_release, firmware_class_path):
        located_dir = _join(search, f"nvidia/{version}")
        real = resolve_in_root(root.view, located_dir)
        if real is None:
            continue
        for name in _listdir(root.view_path(real)):
            if not (name.startswith("gsp") and name.endswith(".bin")):
                continue
            resolved = resolve_in_root(root.view, _join(real, name))
            if resolved is None or resolved in seen or not _is_file(root.view_path(resolved)):
                continue
            seen.add(resolved)
            out.append(HostFile(root.host_path(resolved), _join(located_dir, name)))
    return out


def discover_driver_files(root: Root, version: str, *, kernel_release: str,
                          firmware_class_path: str = "") -> DriverFiles:
    """The libraries, binaries and GSP firmware of driver `version` under `root`. Never raises for a missing or
    mismatched root: the result is empty and `problems` says why (the caller logs it)."""
    if not version or any(c in version for c in "/*?[") or version.startswith("."):
        return DriverFiles(root.host, version, problems=(f"unusable driver version {version!r} from the GPU "
                                                         "source: no driver files can be matched to it",))
    if not root.view.is_dir():
        where = "" if str(root.view) == root.host else f" (looked at {root.view})"
        return DriverFiles(root.host, version, problems=(f"driver root {root.host} does not exist{where}",))
    dirs = driver_library_dirs(root, version)
    cache: LdCache | None = None
    cached: list[tuple[str, str]] = []
    if not dirs:  # NVIDIA's order: the ld.so.cache only when the search dirs hold nothing of this version
        cache = read_ld_cache(root)
        cached = ld_cache_entries(root, cache)
        dirs = _dirs_holding(root, cached, version)
    libraries = _libraries(root, dirs, version) if dirs else []
    names = {lib.container_path.rsplit("/", 1)[1] for lib in libraries}
    problems: list[str] = []
    if not ({f"libcuda.so.{version}", f"libnvidia-ml.so.{version}"} & names):
        others = [v for v in installed_versions(root, cached) if v != version]
        if others:
            problems.append(f"driver root {root.host} holds driver {', '.join(others)}, but the GPUs report driver "
                            f"{version}: --driver-root points at another install, or the driver was upgraded "
                            "without reloading the kernel module")
        else:
            searched = ", ".join(LIBRARY_SEARCH_DIRS[1:])
            if cache is not None:
                searched += f", and the libraries of {cache.summary()}"
            problems.append(f"no libcuda.so.{version} or libnvidia-ml.so.{version} under driver root {root.host} "
                            f"(searched {searched}): is --driver-root right?")
        return DriverFiles(root.host, version, problems=tuple(problems))
    if cache is not None and cache.skipped:
        problems.append(f"{cache.summary()} (the driver's libraries were found through it all the same)")
    firmware = _firmware(root, version, kernel_release, firmware_class_path)
    if not firmware:
        problems.append(f"no GSP firmware nvidia/{version}/gsp*.bin under driver root {root.host} (fine for GPUs "
                        "that do not use GSP)")
    return DriverFiles(
        root=root.host, version=version, libraries=tuple(libraries), library_dirs=tuple(dirs),
        ld_cache=cache.path if cache is not None else "",
        symlinks=tuple(_symlinks(root, dirs, libraries)), binaries=tuple(_binaries(root)), firmware=tuple(firmware),
        problems=tuple(problems))


def discover_ipc_sockets(root: Root) -> tuple[HostFile, ...]:
    """The IPC sockets that exist now (the first of /run, /var/run for each)."""
    out: list[HostFile] = []
    for rel in IPC_SOCKETS:
        for directory in IPC_SOCKET_DIRS:
            located = _join(directory, rel)
            resolved = resolve_in_root(root.view, located)
            if resolved is None:
                continue
            try:
                if stat.S_ISDIR(os.stat(root.view_path(resolved)).st_mode):
                    continue
            except OSError:
                continue
            out.append(HostFile(root.host_path(resolved), located))
            break
    return tuple(out)


def is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def discover_device_nodes(dev_root: Root, minors: Iterable[int], *, check: bool = True
                          ) -> tuple[tuple[DeviceNode, ...], tuple[tuple[int, DeviceNode], ...]]:
    """(control nodes, (minor, GPU node) pairs) that exist as character devices under `dev_root`; with
    `check=False` (simulated GPUs, whose nodes exist nowhere) every candidate is listed."""
    def node(path: str) -> DeviceNode:
        return DeviceNode(path, dev_root.host_path(path))

    def present(path: str) -> bool:
        return not check or is_char_device(dev_root.view_path(path))

    control = tuple(node(p) for p in CONTROL_DEVICE_NODES if present(p))
    gpus = tuple((m, node(f"/dev/nvidia{m}")) for m in dict.fromkeys(minors) if present(f"/dev/nvidia{m}"))
    return control, gpus


def find_hook(candidates: Sequence[str], host_root_view: Path | str = "/") -> str | None:
    """The host path of the first candidate that is an executable file (seen through the host-root view)."""
    for host_path in candidates:
        if _is_executable(host_root_path(host_root_view, host_path).view):
            return host_path
    return None


def read_firmware_class_path(path: str = FIRMWARE_CLASS_PATH_FILE) -> str:
    """The kernel's custom firmware search path (empty when unset or unreadable, as NVIDIA treats it)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""
