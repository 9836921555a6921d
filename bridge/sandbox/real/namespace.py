"""Each real sandbox node is a private mount namespace in which `/var/lib`, `/run` and `/var/log` are the node's
own directories, so that its kubelet, containerd, CNI plugins, containers and node daemon all use the paths a real
GPU node uses, while two nodes share one machine.

Why: the kubelet does not keep everything under its `--root-dir`. Its device-plugin socket is always
`/var/lib/kubelet/device-plugins/kubelet.sock` (kubernetes `staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/
v1beta1/constants.go` `DevicePluginPath`, used by `pkg/kubelet/cm/devicemanager/manager.go` whatever the root dir;
seen in the real kubelet's log: "Creating Device Plugin manager" path="/var/lib/kubelet/device-plugins/kubelet.sock"
under `--root-dir=/tmp/...`), container logs are linked in `/var/log/containers`, and a DaemonSet's `hostPath`
volumes (the chart's `/var/lib/kubelet/plugins_registry`, `/var/run/cdi`, ...) are resolved by containerd in its own
mount namespace. With one namespace per node, all of these are the node's, exactly as on separate machines.

The namespace is held by a small process (`unshare --mount --propagation private`, which bind-mounts the node's
directories and then sleeps); every other process of the node joins it with `nsenter --mount`. Mounts made inside
(container root filesystems, pod volumes) are invisible to the machine and disappear with the namespace's last
process. The host sees the same files through the node's directories (`<node>/var-lib`, `<node>/run`, `<node>/log`).
Only the mount namespace is private: the network (node IP, ports) and cgroups are the machine's.

The node's `/run` is a tmpfs of its own (`mount_run`, before anything is written there), as systemd mounts `/run` on
a real node (systemd/systemd `src/shared/mount-setup.c`, `mount_table`: tmpfs, `mode=0755`, with `nosuid,nodev`,
which we leave out because the fake GPUs' device nodes live under `/run/nvidia/driver`, where a real node has the
driver container's own mount): the CDI specs in `/var/run/cdi`, containerd's task state and sockets live in memory,
cost what they cost on a real node to write (a replace-by-rename on this machine's ext4 costs ten times one on
tmpfs), and are gone when the node is stopped, as at a reboot. It is mounted on the machine at the node's `run`
directory, so the host sees the same files, and bound into the namespace like the others.

Each node has a boot ID of its own (a file bound over `/proc/sys/kernel/random/boot_id` inside the namespace), so
that a node's reboot (`RealNode.reboot`) gives its kubelet and node daemon a new one, as a real boot does. A process
that mounts a fresh procfs (a container) reads the machine's.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from pathlib import Path

from bridge.sandbox.cluster.processes import ChildProcess

log = logging.getLogger(__name__)

BINDS = (("var-lib", "/var/lib"), ("run", "/run"), ("log", "/var/log"))


class NamespaceError(RuntimeError):
    pass


BOOT_ID = "/proc/sys/kernel/random/boot_id"


class NodeNamespace:
    def __init__(self, node_dir: Path, name: str) -> None:
        self.dir = node_dir
        self.name = name
        self.holder: ChildProcess | None = None

    @property
    def boot_id_file(self) -> Path:
        """The node's boot ID, bound over /proc/sys/kernel/random/boot_id inside the namespace: what the kubelet
        reports as the Node's bootID and what the node daemon keys its claim records to. `new_boot_id` changes it
        (a reboot); a process joining the namespace reads the current one."""
        return self.dir / "boot_id"

    def new_boot_id(self) -> str:
        import uuid

        value = str(uuid.uuid4())
        self.boot_id_file.write_text(value + "\n")
        return value

    def host_path(self, inside: str) -> Path:
        """Where the host sees a path of the node (`/var/lib/kubelet` -> `<node>/var-lib/kubelet`)."""
        if inside == "/var/run" or inside.startswith("/var/run/"):  # a link to /run, on the node as on Debian
            inside = "/run" + inside[len("/var/run"):]
        for sub, target in BINDS:
            if inside == target or inside.startswith(target + "/"):
                return self.dir / sub / inside[len(target):].lstrip("/")
        return Path(inside)

    @property
    def mnt(self) -> str:
        assert self.holder is not None and self.holder.pid is not None, "start() the namespace first"
        return f"/proc/{self.holder.pid}/ns/mnt"

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    def mount_run(self) -> None:
        """A tmpfs at the node's `run` directory (see the module docstring); nothing if one is mounted there."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if os.path.ismount(self.run_dir):
            return
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", f"run-{self.name}", str(self.run_dir)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise NamespaceError(f"could not mount a tmpfs for the /run of {self.name} at {self.run_dir}: "
                                 f"{done.stderr.strip() or f'mount exited with status {done.returncode}'}")

    def unmount_run(self) -> None:
        """Unmount the node's /run tmpfs (after `stop`: its files go, as at a reboot)."""
        if os.path.ismount(self.run_dir):
            subprocess.run(["umount", "-l", str(self.run_dir)], capture_output=True)

    def start(self, timeout: float = 10.0) -> NodeNamespace:
        script = []
        for sub, target in BINDS:
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
            script.append(f"mount --bind {shlex.quote(str(self.dir / sub))} {target}")
        # "/" shared inside the node, as systemd makes it on a real node: a hostPath volume mounted with
        # HostToContainer (the chart mounts the host's "/" so) needs a shared or slave source ("path "/" is mounted
        # on "/" but it is not a shared or slave mount", seen from containerd), and this machine's is private. The
        # peer group is the namespace's own: nothing propagates back to the machine.
        script.append("mount --make-rshared /")
        if not self.boot_id_file.exists():
            self.new_boot_id()
        script.append(f"mount --bind {shlex.quote(str(self.boot_id_file))} {BOOT_ID}")
        script.append("exec sleep infinity")
        self.holder = ChildProcess(f"namespace of {self.name}",
                                   ["unshare", "--mount", "--propagation", "private", "--", "sh", "-ec",
                                    " && ".join(script)], self.dir / "namespace.log").start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.holder.alive():
                raise NamespaceError(f"the mount namespace of {self.name} could not be set up:\n"
                                     f"{self.holder.log_tail()}")
            if self._mounted():
                return self
            time.sleep(0.05)
        raise NamespaceError(f"the mount namespace of {self.name} was not ready within {timeout:.0f}s")

    def _mounted(self) -> bool:
        assert self.holder is not None and self.holder.pid is not None
        try:
            info = Path(f"/proc/{self.holder.pid}/mountinfo").read_text()
        except OSError:
            return False
        points = {line.split()[4] for line in info.splitlines() if len(line.split()) > 4}
        return all(target in points for _, target in BINDS) and BOOT_ID in points and self._is_own(self.holder.pid)

    def _is_own(self, pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        except OSError:
            return False

    def enter(self, argv: list[str]) -> list[str]:
        """`argv` run inside the node's mount namespace."""
        return ["nsenter", f"--mount={self.mnt}", "--", *argv]

    def members(self) -> list[int]:
        """PIDs of every process in this namespace (containers and shims included), the holder last."""
        try:
            ns = os.readlink(self.mnt)
        except OSError:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.readlink(entry / "ns" / "mnt") == ns:
                        pids.append(int(entry.name))
                except OSError:
                    continue
        holder = self.holder.pid if self.holder is not None else None
        return sorted(pids, key=lambda p: p == holder)

    def stop(self) -> None:
        """End every process left in the namespace (shims and containers that outlived containerd), then the
        holder; the namespace and its mounts go with the last of them."""
        import signal

        killed = []
        for pid in self.members():
            if self.holder is not None and pid == self.holder.pid:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        # SIGKILL is asynchronous: wait until each has died (a zombie waiting for its reaper has left the namespace
        # and holds no mount), so that what the caller checks or removes next is no longer in use.
        deadline = time.monotonic() + 10.0
        while killed and time.monotonic() < deadline:
            killed = [pid for pid in killed if process_alive(pid)]
            if killed:
                time.sleep(0.02)
        if killed:
            log.warning("processes %s in node namespace %s outlived SIGKILL for 10 s", killed, self.mnt)
        if self.holder is not None:
            self.holder.stop(5.0)


def process_alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has: only its exit status waits for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split(" ", 1)[0] != "Z"
