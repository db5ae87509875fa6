"""The formats fleets read, on real captures: drift across a saved fleet (real machines, and hand-edited
copies of one), Prometheus text through prometheus_client's parser, JUnit XML against Jenkins' schema,
and the HTML page rendered by a real headless chromium (screenshot checked)."""
import copy
import json
import re
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import corpus, run_cli

H100_Q = "h100-sxm-x8.nvidia-smi-q.txt"
ASUS = ["asus-esc8000a-e12-4x-rtx6000ada." + s for s in ("nvidia-smi.txt", "topo-m.txt", "numactl-H.txt", "lscpu.txt")]
XSD = Path(__file__).parent / "data" / "junit" / "junit-10.xsd"


def snapshot_of(*captures) -> dict:
    from gpuprep.parsers import import_files
    return json.loads(import_files([corpus(c) for c in captures]).to_json())


def edited_fleet(directory: Path) -> Path:
    """Five copies of one real 8x H100 capture: node1 another driver, node2 a GPU missing, node3 one GPU's
    application clock lowered, node4 another VBIOS on one GPU; node0 cannot tell its CUDA version (unknown is
    not drift) and every host's memory differs by a few MiB (not drift)."""
    base = snapshot_of(H100_Q)
    for i in range(5):
        doc = copy.deepcopy(base)
        doc["system"].update(hostname=f"node{i}", memory_total_mib=2063000 + 7 * i)
        if i == 0:
            doc["software"]["cuda_driver_version"] = None
        if i == 1:
            doc["software"]["driver_version"] = "550.54.15"
        if i == 2:
            doc["gpus"] = doc["gpus"][:7]
        if i == 3:
            doc["gpus"][5]["app_clock_graphics_mhz"] = 1500
        if i == 4:
            doc["gpus"][0]["vbios_version"] = "96.00.99.00.01"
        (directory / f"node{i}.json").write_text(json.dumps(doc))
    return directory


def check_fleet(directory, *args):
    done = run_cli("check", "--from", str(directory), *args)
    assert done.returncode in (0, 1), done.stderr
    return done


def test_drift_names_exactly_the_hosts_and_facts_that_differ(tmp_path):
    doc = json.loads(check_fleet(edited_fleet(tmp_path), "--json").stdout)
    odd = {f["id"]: f["odd_hosts"] for f in doc["drift"]["facts"]}
    assert odd == {"drift.driver": ["node1"], "drift.gpu-count": ["node2"], "drift.app-clocks": ["node3"],
                   "drift.vbios": ["node4"]}
    severities = {f["id"]: f["severity"] for f in doc["drift"]["facts"]}
    assert severities == {"drift.driver": "fail", "drift.gpu-count": "fail", "drift.app-clocks": "warn",
                          "drift.vbios": "warn"}
    assert doc["verdict"] == "fail" and doc["hosts"]["node1"]["drift"] == ["drift.driver"]


def test_drift_between_different_real_machines_has_no_majority(tmp_path):
    for name, capture in (("h100", H100_Q), ("a100", "a100-sxm4-x4.nvidia-smi-q.txt"), ("l40s", "l40s.nvidia-smi-q.txt")):
        doc = snapshot_of(capture)
        doc["system"]["hostname"] = name
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    doc = json.loads(check_fleet(tmp_path, "--json").stdout)
    model = next(f for f in doc["drift"]["facts"] if f["id"] == "drift.gpu-model")
    assert model["reference"] is None and len(model["groups"]) == 3 and model["odd_hosts"] == ["a100", "h100", "l40s"]
    split = [f for f in doc["drift"]["findings"] if f["id"] == "drift.gpu-model"]
    assert len(split) == 1 and split[0]["subject"] == "fleet" and split[0]["severity"] == "fail"


def test_baseline_snapshot_is_the_reference(tmp_path):
    (tmp_path / "fleet").mkdir()
    fleet = edited_fleet(tmp_path / "fleet")
    reference = tmp_path / "golden.json"
    golden = json.loads((fleet / "node1.json").read_text())      # the node with the other driver is the golden one
    golden["system"]["hostname"] = "golden"
    reference.write_text(json.dumps(golden))
    doc = json.loads(check_fleet(fleet, "--baseline", str(reference), "--json").stdout)
    driver = next(f for f in doc["drift"]["facts"] if f["id"] == "drift.driver")
    assert driver["reference"] == "550.54.15" and driver["odd_hosts"] == ["node0", "node2", "node3", "node4"]
    bad = run_cli("check", "--from", str(fleet), "--baseline", "nosuchhost")
    assert bad.returncode == 2 and "neither a checked host" in bad.stderr


def test_prometheus_textfile_parses_and_says_what_the_report_says(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families
    out = tmp_path / "textfile" / "gpuprep.prom"
    out.parent.mkdir()
    check_fleet(edited_fleet(tmp_path), "--format", "prometheus", "-o", str(out))
    assert os.listdir(out.parent) == ["gpuprep.prom"]            # written through a temp file and a rename
    samples = {}
    for family in text_string_to_metric_families(out.read_text()):
        assert family.name.startswith("gpuprep_")
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert samples[("gpuprep_gpu_count", (("host", "node2"),))] == 7
    assert samples[("gpuprep_gpu_count", (("host", "node0"),))] == 8
    assert samples[("gpuprep_drift_hosts", (("id", "drift.driver"), ("severity", "fail")))] == 1
    assert samples[("gpuprep_host_checked", (("host", "node3"),))] == 1
    assert samples[("gpuprep_check_verdict", (("host", "node3"), ("verdict", "warn")))] == 1
    assert samples[("gpuprep_check_findings", (("host", "node3"), ("id", "gpu.app-clocks-below-max"),
                                               ("severity", "warn")))] == 1
    assert samples[("gpuprep_last_run_timestamp_seconds", (("command", "check"),))] > 1.7e9


def test_junit_validates_against_the_schema_ci_tools_use(tmp_path):
    import junitparser
    import xmlschema
    out = tmp_path / "report.xml"
    check_fleet(edited_fleet(tmp_path), "--skip", "gpu.temperature", "-o", str(out))     # .xml -> junit
    xmlschema.XMLSchema(str(XSD)).validate(str(out))
    xml = junitparser.JUnitXml.fromfile(str(out))
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"node0", "node1", "node2", "node3", "node4", "fleet drift"}
    drift_cases = {case.name: case for case in suites["fleet drift"]}
    assert isinstance(drift_cases["drift.driver"].result[0], junitparser.Failure)
    assert drift_cases["drift.vbios"].is_passed and "node4" in drift_cases["drift.vbios"].system_out
    node3 = {case.name: case for case in suites["node3"]}
    assert node3["gpu.app-clocks-below-max"].is_passed and "WARN" in node3["gpu.app-clocks-below-max"].system_out
    assert isinstance(node3["gpu.temperature"].result[0], junitparser.Skipped)       # waived by --skip
    assert int(suites["node3"].skipped) == 1


def test_single_host_junit_fails_the_failing_check():
    import junitparser
    import xmlschema
    done = run_cli("check", "--from", corpus("xid119-dell-xe9680.dmesg.txt"), "--format", "junit")
    assert done.returncode == 1
    xmlschema.XMLSchema(str(XSD)).validate(done.stdout)
    suite = next(iter(junitparser.JUnitXml.fromstring(done.stdout)))
    failing = [case.name for case in suite if case.result and isinstance(case.result[0], junitparser.Failure)]
    assert "gpu.xid" in failing


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(html: Path, png: Path, height: int = 1800):
    done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--screenshot={png}", f"--window-size=1300,{height}", html.as_uri()],
                          capture_output=True, text=True, timeout=120, cwd=png.parent)
    assert png.exists(), done.stderr[-2000:]
    dom = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", html.as_uri()],
                         capture_output=True, text=True, timeout=120, cwd=png.parent).stdout
    return dom


def colour_share(png: Path, rgb) -> float:
    from PIL import Image
    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 24)
    near = sum(count for count, p in colours if all(abs(a - b) <= 6 for a, b in zip(p, rgb)))
    return near / (image.width * image.height)


@pytest.mark.skipif(not chromium(), reason="needs chromium (apt-get install chromium)")
def test_html_fleet_report_renders_in_headless_chromium(tmp_path):
    fleet = edited_fleet(tmp_path)
    asus = snapshot_of(*ASUS)
    asus["system"]["hostname"] = "asus"
    (fleet / "asus.json").write_text(json.dumps(asus))
    page = tmp_path / "fleet.html"
    check_fleet(fleet, "-o", str(page))
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    dom = screenshot(page, tmp_path / "fleet.png", 3000)
    assert 'id="fleet"' in dom and 'id="drift"' in dom and dom.count('class="host"') == 6
    assert dom.count('class="gpu"') == 8 * 4 + 7 + 4 and 'class="nic"' in dom   # topology of every checked host
    png = tmp_path / "fleet.png"
    assert colour_share(png, (0xc0, 0x39, 0x2b)) > 0.0005      # the red FAIL badges were painted
    assert colour_share(png, (0xd9, 0xf2, 0xd9)) > 0.001       # and the green GPU boxes of the topology


@pytest.mark.skipif(not chromium(), reason="needs chromium (apt-get install chromium)")
def test_html_single_host_topology_places_gpus_and_nics_on_their_numa_nodes(tmp_path):
    page = tmp_path / "asus.html"
    args = [a for c in ASUS for a in ("--from", corpus(c))]
    assert run_cli("check", *args, "--format", "html", "-o", str(page)).returncode in (0, 1)
    dom = screenshot(page, tmp_path / "asus.png")
    svg = dom[dom.index('<svg class="topology"'):dom.index("</svg>")]
    # NUMA node 0 holds GPU0, GPU1 and mlx5_0, mlx5_1 (topo -m: NODE/PIX), node 1 the others; none is unknown
    def x_of(label):
        return float(re.search(rf'<text x="([0-9.]+)"[^>]*>{re.escape(label)}<', svg).group(1))
    node0, node1 = x_of("NUMA node 0"), x_of("NUMA node 1")
    assert node0 < x_of("GPU1") < node1 and node0 < x_of("mlx5_1") < node1
    assert node1 < x_of("GPU2") and node1 < x_of("mlx5_3")
    assert "NUMA node unknown" not in svg
    assert colour_share(tmp_path / "asus.png", (0xd9, 0xf2, 0xd9)) > 0.001


def dark_green_share(png: Path) -> float:
    """The share of pixels in the NVLink stroke's dark green (#2a7, drawn at 0.7 opacity): the GPU boxes' light
    green fill and the page's grey and white do not count."""
    from PIL import Image
    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 24)
    near = sum(count for count, (r, g, b) in colours if g > 140 and r < 130 and b < 170 and g - r > 60)
    return near / (image.width * image.height)


@pytest.mark.skipif(not chromium(), reason="needs chromium (apt-get install chromium)")
def test_html_shows_every_nvlink_of_an_8_gpu_mesh_with_whole_names_a_gpu_table_and_the_xids(tmp_path):
    """The links were drawn under the opaque NUMA boxes (an NV18 mesh showed as one green stub), GPU names were
    cut ("H100 80GB HB"), and the page had no GPU table and no Xid list."""
    page = tmp_path / "h100.html"
    args = ["--from", corpus("h100-sxm-x8.nvidia-smi-q.txt"), "--from", corpus("h100-x8-stas.topo-m.txt"),
            "--from", corpus("xid64-xid94-imbue-h100.dmesg-lines.txt"), "--allow-mixed"]
    assert run_cli("check", *args, "--format", "html", "-o", str(page)).returncode in (0, 1)
    dom = screenshot(page, tmp_path / "h100.png", 2400)
    svg = dom[dom.index('<svg class="topology"'):dom.index("</svg>")]
    assert svg.count('class="nvlink"') == 28                      # every pair of 8 GPUs (NV18)
    assert svg.index('class="numa"') < svg.index('class="nvlink"') < svg.index('class="gpu"')   # drawn above
    assert ">H100 80GB HBM3<" in svg
    gpus = dom[dom.index('class="gpus"'):]
    gpus = gpus[:gpus.index("</table>")]
    assert gpus.count("H100 80GB HBM3</td>") == 8 and 'class="xids"' in dom
    assert dark_green_share(tmp_path / "h100.png") > 0.002        # the links are visible in the picture
