"""The clock plan module (plugins/modules/gpuprep_clock_plan.py) run by real Ansible on this machine, fed the
GPUs of real captures: `-lgc` takes any clock in the supported range (a value between two steps is planned at
the step below), `-ac` only an exact supported pair, and a GPU held below its lock by the power cap is no drift."""
import json
import os
import subprocess
import sys

from conftest import REPO, corpus
from gpuprep.parsers.nvsmi import parse_xml
from gpuprep.resources import collections_path


def gpus_of(capture, **changes):
    _header, entries = parse_xml(open(corpus(capture)).read())
    out = []
    for index, (bus, f, _element) in enumerate(entries):
        gpu = {"index": index, "bus_id": bus, "name": f.get("name"), "architecture": f.get("architecture"),
               "supported_clocks": f.get("supported_clocks") or [], "max_graphics": f.get("max_clock_graphics_mhz"),
               "max_memory": f.get("max_clock_mem_mhz"), "app_graphics": f.get("app_clock_graphics_mhz"),
               "clock_graphics": f.get("clock_graphics_mhz"), "clock_event_reasons": f.get("clock_event_reasons"),
               "persistence": bool(f.get("persistence_mode")), "uuid": f.get("uuid")}
        gpu.update(changes)
        out.append(gpu)
    return out


def plan(gpus, **args):
    params = json.dumps({"gpus": gpus, "gpu_table": (REPO / "gpuprep" / "data" / "gpus.csv").read_text(), **args})
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path()), ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    done = subprocess.run([os.path.join(bindir, "ansible"), "localhost", "-c", "local", "-m", "gpuprep.node.gpuprep_clock_plan",
                           "-a", params], capture_output=True, text=True, env=env, timeout=120)
    return json.loads(done.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_locked_clocks_take_the_range_and_application_clocks_an_exact_pair():
    a5000 = gpus_of("dual-rtx-a5000.nvidia-smi-q.xml")           # Ampere: locked clocks
    steps = sorted(a5000[0]["supported_clocks"][0]["graphics"])
    between = next(g + 1 for g, nxt in zip(steps, steps[1:]) if nxt - g > 1)
    result = plan(a5000, graphics_mhz=between)
    assert not result.get("failed") and {p["method"] for p in result["plan"]} == {"locked"}
    assert result["plan"][0]["graphics"] == between - 1              # the step below
    too_high = plan(a5000, graphics_mhz=steps[-1] + 1)
    assert too_high["failed"] and f"locked clocks take {steps[0]}..{steps[-1]} MHz" in too_high["msg"]
    p2000 = gpus_of("quadro-p2000.nvidia-smi-q.xml")               # Pascal: application clocks only
    pairs = p2000[0]["supported_clocks"]
    graphics = sorted(pairs[0]["graphics"])
    if len(graphics) > 1 and graphics[1] - graphics[0] > 1:
        off_step = plan(p2000, graphics_mhz=graphics[0] + 1, memory_mhz=pairs[0]["memory"])
        assert off_step["failed"] and "is not supported" in off_step["msg"]
    exact = plan(p2000, graphics_mhz=graphics[0], memory_mhz=pairs[0]["memory"])
    assert not exact.get("failed") and exact["plan"][0]["method"] == "app"


def test_a_gpu_held_below_its_lock_by_a_named_reason_is_not_drift():
    lock = max(gpus_of("dual-rtx-a5000.nvidia-smi-q.xml")[0]["supported_clocks"][0]["graphics"])
    held = plan(gpus_of("dual-rtx-a5000.nvidia-smi-q.xml", clock_graphics=lock - 300,
                        clock_event_reasons=["sw_power_cap"]))
    assert held["drifted"] == [] and held["drift_reasons"] == []
    lost = plan(gpus_of("dual-rtx-a5000.nvidia-smi-q.xml", clock_graphics=lock - 300, clock_event_reasons=["gpu_idle"]))
    assert lost["drifted"] == [0, 1] and "no power or thermal reason holds it below" in lost["drift_reasons"][0]


def test_the_plan_names_each_gpu_by_uuid_for_the_boot_script():
    """The boot script applies each line with `nvidia-smi -i <id>`: a UUID stays with its GPU when another falls
    off the bus and the indexes shift."""
    a5000 = gpus_of("dual-rtx-a5000.nvidia-smi-q.xml")
    result = plan(a5000)
    assert [p["uuid"] for p in result["plan"]] == [g["uuid"] for g in a5000] and all(g["uuid"] for g in a5000)
    template = (REPO / "collection" / "roles" / "gpu_clocks" / "templates" / "clocks.conf.j2").read_text()
    import jinja2
    text = jinja2.Environment().from_string(template).render(gpu_clocks_plan=result)
    assert [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith("#")] == [g["uuid"] for g in a5000]
