"""`bridge demo --fast` end to end, as a user (or CI) runs it: a child process, its printed story, its exit status
and the files it leaves (issue 12, "What it must show": pods per API, no GPU on both sides, the report's exit code
before and after).

One run serves every test here (a whole cluster and the story take about a minute on a loaded 2-core machine). It
runs with `--keep`, so the tests can also look at the live sandbox it leaves and then stop it with Ctrl-C (SIGINT),
which is when the demo exits with its verdict. The bound on the run is generous; how long it takes is measured and
printed, not asserted (speed is for benchmarks and the closing note).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bridge.cli import main
from bridge.kube import NODES, PODS, connect
from bridge.kube.errors import KubeError
from bridge.kube.retry import RetryPolicy
from tests.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
BOUND = 300.0  # seconds: far above the ~1 minute it takes, so only a hang fails it

pytestmark = [pytest.mark.slow, pytest.mark.timeout(BOUND + 60)]  # the shared run counts against the first test


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    out_dir: Path
    lines: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    kept_after: float = 0.0
    code: int | None = None

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> int:
        if self.code is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
            self.code = self.proc.wait(60)
        return self.code


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    out_dir = tmp_path_factory.mktemp("demo")
    proc = subprocess.Popen([sys.executable, "-m", "bridge", "demo", "--fast", "--keep", "--out-dir", str(out_dir)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    d = Demo(proc, out_dir)
    reader = threading.Thread(target=d.read, daemon=True)
    reader.start()
    try:
        while "Ctrl-C stops it" not in d.text and proc.poll() is None:
            assert time.monotonic() - d.started < BOUND, f"the demo did not finish within {BOUND:.0f}s:\n{d.text}"
            time.sleep(0.2)
        d.kept_after = time.monotonic() - d.started
        print(f"bridge demo --fast: story and summary in {d.kept_after:.1f}s")
        yield d
    finally:
        d.stop()
        reader.join(10)


def summary(demo: Demo) -> dict[str, Any]:
    path = demo.out_dir / "summary.json"
    assert path.exists(), demo.text
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_every_step_checks_out_and_the_story_is_told_in_order(demo: Demo) -> None:
    doc = summary(demo)
    assert doc["ok"] and doc["failure"] == "", doc["failure"]
    titles = [s["title"] for s in doc["steps"]]
    assert len(titles) == 8 and titles[2].startswith("The migration report")
    assert titles[6].startswith("The report again") and titles[7].startswith("Finishing team-a")
    assert all(c["ok"] for s in doc["steps"] for c in s["checks"]) and all(s["checks"] for s in doc["steps"])
    positions = [demo.text.index(f"Step {i}/8") for i in range(1, 9)]
    assert positions == sorted(positions)
    assert "FAILED" not in demo.text
    assert "Every outcome the demo told was checked" in demo.text


def test_pods_per_api_in_the_summary_are_the_story_s_end(demo: Demo) -> None:
    pods = summary(demo)["pods"]
    # legacy: team-b's train-b, infer-b and 6 sweep pods run, team-a's shadow probe finished;
    # DRA: team-a's train-a-v2 and its two replaced pods run, its two batch jobs finished.
    assert pods == {"legacy": {"Running": 8, "Succeeded": 1}, "dra": {"Running": 3, "Succeeded": 2}}
    assert "device plugin  8        1         0" in demo.text and "DRA            3        2         0" in demo.text


def test_gpus_per_side_add_up_and_no_gpu_was_ever_on_both_sides(demo: Demo) -> None:
    doc = summary(demo)
    gpus = doc["gpus"]
    assert sorted(gpus) == ["gpu-node-1", "gpu-node-2"]
    assert all(s["legacy"] + s["dra"] == 8 and s["withdrawn"] == 0 for s in gpus.values())
    assert sum(s["dra"] for s in gpus.values()) == 5  # train-a-v2 (2) + train-a (2) + infer-a (1)
    both = doc["noGpuOnBothSides"]
    assert both["checked"] and both["samples"] >= 20 and both["violations"] == []
    assert "No GPU on both sides: checked" in demo.text


def test_no_pod_start_waited_for_a_refused_prepare(demo: Demo) -> None:
    # each refused NodePrepareResources leaves its pod Pending until the kubelet's next resync, 60-90 s
    assert summary(demo)["prepareFailures"] == []


def test_the_report_exits_0_before_and_after_and_team_a_ends_ready_on_dra(demo: Demo) -> None:
    reports = summary(demo)["reports"]
    before, after = reports["report-before"], reports["report-after"]
    assert (before["exitCode"], after["exitCode"]) == (0, 0)
    assert before["namespaces"] == {"team-a": "needs-config", "team-b": "needs-config"}
    assert after["namespaces"]["team-a"] == "ready"
    # The second report runs while team-a's old pods still hold device-plugin GPUs and every other GPU is busy: it
    # counts on the controller it sees acting, and on the 3 GPUs those pods free when they are replaced.
    after_doc = json.loads(Path(after["json"]).read_text())
    assert after_doc["splitController"]["state"] == "acting"
    (team_a,) = [f for f in after_doc["findings"] if f["rule"] == "DRB032" and f["object"]["name"] == "team-a"]
    assert team_a["severity"] == "info" and team_a["details"]["freedByNamespace"] == 3
    before_doc = json.loads(Path(before["json"]).read_text())
    assert before_doc["splitController"]["state"] == "absent"  # it had decided nothing yet
    for r in (before, after):
        report = json.loads(Path(r["json"]).read_text())
        assert report["status"] == r["status"] and not report["summary"]["findings"]["blocker"]
        assert Path(r["html"]).read_text().lstrip().lower().startswith("<!doctype html")
    assert f"HTML report: {after['html']}" in demo.text
    assert "Migration report: before exit 0 (needs-config), after exit 0 (ready)" in demo.text


def test_the_narration_says_what_happened(demo: Demo) -> None:
    """Where the story names nodes, counts and plans, they are the ones the cluster and the report show."""
    import re

    after = json.loads(Path(summary(demo)["reports"]["report-after"]["json"]).read_text())
    flat = " ".join(demo.text.split())  # the narrator wraps lines
    planned = [s for s in after["wavePlan"] if s["namespace"] == "team-b"]
    if planned:
        assert "The wave plan has team-b too (" in flat
        assert f"wave {planned[0]['wave']} to {planned[0]['mode']}" in flat
    else:
        assert "The wave plan has no wave for team-b: it stays on the device plugin." in flat
    ran_on = {m.group(1): m.group(2) for m in re.finditer(r"team-a/(train-a|infer-a)\s+(\S+)\s+device plugin",
                                                          demo.text)}
    named = re.search(r"Its first pods \(infer-a, train-a, on ([^)]+)\)", flat)
    assert named is not None and set(named.group(1).split(", ")) == set(ran_on.values()), (named, ran_on)
    decided = {n["name"] for n in after["nodes"]}
    shown = re.search(r"bridge node status (\S+)", demo.text)
    assert shown is not None and shown.group(1) in decided


def test_the_shadow_step_shows_the_recorded_translation(demo: Demo) -> None:
    assert '"target": "claims"' in demo.text and "probe-a carries the dra-bridge.io/shadow-translation" in demo.text


def test_with_keep_the_sandbox_stays_up_for_kubectl_and_ctrl_c_stops_it_with_the_verdict(demo: Demo) -> None:
    kubeconfig = demo.out_dir / "kubeconfig"
    assert f"export KUBECONFIG={kubeconfig}" in demo.text
    api = connect(str(kubeconfig), timeout=5, retry=RetryPolicy(deadline=5))
    assert sorted(n["metadata"]["name"] for n in api.list(NODES)["items"]) == ["gpu-node-1", "gpu-node-2"]
    assert {p["metadata"]["name"] for p in api.list(PODS, "team-a")["items"]} >= {"train-a", "infer-a", "train-a-v2"}
    assert demo.stop() == 0, demo.text[-3000:]
    # The process has exited; its last lines reach `demo.text` through the reader thread in its own time.
    wait_until(lambda: "Stopping the sandbox cluster" in demo.text, 30, "the demo's last lines")
    with pytest.raises(KubeError):
        api.list(NODES)


def test_an_out_dir_that_cannot_be_written_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["demo", "--out-dir", "/proc/no-such-place/demo"])
    assert result.exit_code == 2 and "--out-dir" in result.output and "cannot write there" in result.output
