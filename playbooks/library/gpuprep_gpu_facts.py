#!/usr/bin/python
"""Ansible module: the host's NVIDIA GPUs as facts, read from `nvidia-smi -q -x` (or `-q` text
when XML is unavailable), and whether nvidia-persistenced and its unit are installed. One call for
what the GPU roles need to know, so a play reads it once. Read-only; safe in check mode."""
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: gpuprep_gpu_facts
short_description: NVIDIA GPU facts from nvidia-smi
description: Sets C(gpuprep_gpus) (a list), C(gpuprep_gpu_present) and C(gpuprep_persistenced)
  (C(daemon) and C(unit) booleans).
options:
  nvidia_smi:
    description: Path or name of nvidia-smi.
    type: str
    default: nvidia-smi
  persistenced:
    description: Path of nvidia-persistenced.
    type: path
    default: /usr/bin/nvidia-persistenced
"""

PERSISTENCED_UNITS = ("/lib/systemd/system/nvidia-persistenced.service",
                      "/usr/lib/systemd/system/nvidia-persistenced.service")

LOCKED_CLOCK_ARCHS = ("Volta", "Turing", "Ampere", "Ada", "Ada Lovelace", "Hopper", "Blackwell")
LOCKED_MEMORY_ARCHS = ("Ampere", "Ada", "Ada Lovelace", "Hopper", "Blackwell")


def mhz(text):
    match = re.match(r"\s*(\d+(?:\.\d+)?)\s*(MHz|W)?", text or "")
    return float(match.group(1)) if match and match.group(2) == "W" else (int(match.group(1)) if match else None)


def from_xml(text):
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1))
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        pairs = []
        for mem in gpu.findall("supported_clocks/supported_mem_clock"):
            pairs.append({"memory": mhz(mem.findtext("value")),
                          "graphics": [mhz(g.text) for g in mem.findall("supported_graphics_clock")]})
        gpus.append({
            "index": index, "bus_id": gpu.get("id"), "name": gpu.findtext("product_name"),
            "architecture": gpu.findtext("product_architecture"),
            "persistence": gpu.findtext("persistence_mode") == "Enabled",
            "max_graphics": mhz(gpu.findtext("max_clocks/graphics_clock")),
            "max_memory": mhz(gpu.findtext("max_clocks/mem_clock")),
            "clock_graphics": mhz(gpu.findtext("clocks/graphics_clock")),
            "clock_memory": mhz(gpu.findtext("clocks/mem_clock")),
            "app_graphics": mhz(gpu.findtext("applications_clocks/graphics_clock")),
            "app_memory": mhz(gpu.findtext("applications_clocks/mem_clock")),
            "power_limit": mhz(gpu.findtext("gpu_power_readings/current_power_limit")
                               or gpu.findtext("power_readings/power_limit")),
            "power_min": mhz(gpu.findtext("gpu_power_readings/min_power_limit")
                             or gpu.findtext("power_readings/min_power_limit")),
            "power_max": mhz(gpu.findtext("gpu_power_readings/max_power_limit")
                             or gpu.findtext("power_readings/max_power_limit")),
            "supported_clocks": pairs,
        })
    return gpus


def from_text(text):
    gpus, current, section = [], None, None
    for line in text.splitlines():
        header = re.match(r"^GPU ([0-9A-Fa-f]{8}:\S+)", line)
        if header:
            current = {"index": len(gpus), "bus_id": header.group(1), "supported_clocks": []}
            gpus.append(current)
            continue
        if current is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = (part.strip() for part in line.partition(":"))
        if indent == 4:
            section = key if not value else None
            simple = {"Product Name": "name", "Product Architecture": "architecture"}
            if key in simple:
                current[simple[key]] = value
            elif key == "Persistence Mode":
                current["persistence"] = value == "Enabled"
        elif indent == 8 and section:
            table = {("Max Clocks", "Graphics"): "max_graphics", ("Max Clocks", "Memory"): "max_memory",
                     ("Clocks", "Graphics"): "clock_graphics", ("Clocks", "Memory"): "clock_memory",
                     ("Applications Clocks", "Graphics"): "app_graphics",
                     ("Applications Clocks", "Memory"): "app_memory",
                     ("GPU Power Readings", "Current Power Limit"): "power_limit",
                     ("GPU Power Readings", "Min Power Limit"): "power_min",
                     ("GPU Power Readings", "Max Power Limit"): "power_max"}
            if (section, key) in table:
                current[table[(section, key)]] = mhz(value)
    return gpus


def main():
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"},
                                          "persistenced": {"type": "path", "default": "/usr/bin/nvidia-persistenced"}},
                           supports_check_mode=True)
    persistenced = {"daemon": os.path.exists(module.params["persistenced"]),
                    "unit": any(os.path.exists(path) for path in PERSISTENCED_UNITS)}
    exe = shutil.which(module.params["nvidia_smi"])
    if exe is None:
        module.exit_json(changed=False, ansible_facts={"gpuprep_gpu_present": False, "gpuprep_gpus": [],
                                                       "gpuprep_persistenced": persistenced},
                         msg="nvidia-smi not found: no NVIDIA driver on this host")
    gpus = None
    xml_run = subprocess.run([exe, "-q", "-x"], capture_output=True, text=True, timeout=60)
    if xml_run.returncode == 0 and "<nvidia_smi_log" in xml_run.stdout:
        gpus = from_xml(xml_run.stdout)
    else:
        text_run = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=60)
        if text_run.returncode != 0:
            module.fail_json(msg="nvidia-smi failed: " + (text_run.stdout + text_run.stderr).strip().splitlines()[0])
        gpus = from_text(text_run.stdout)
    for gpu in gpus:
        arch = gpu.get("architecture") or ""
        gpu["locked_clocks"] = arch in LOCKED_CLOCK_ARCHS
        gpu["locked_memory_clocks"] = arch in LOCKED_MEMORY_ARCHS
        gpu["app_clocks"] = gpu.get("app_graphics") is not None
    module.exit_json(changed=False, ansible_facts={"gpuprep_gpu_present": bool(gpus), "gpuprep_gpus": gpus,
                                                   "gpuprep_persistenced": persistenced})


if __name__ == "__main__":
    main()
