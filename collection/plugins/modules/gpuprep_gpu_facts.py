#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: the host's NVIDIA GPUs as facts, read from `nvidia-smi -q -x` (or `-q` text
when XML is unavailable) through gpuprep's one nvidia-smi parser (module_utils/gpuprep_nvsmi.py), and
whether nvidia-persistenced and its unit are installed. One call for
what the GPU roles need to know, so a play reads it once. Read-only; safe in check mode."""

DOCUMENTATION = r"""
module: gpuprep_gpu_facts
short_description: NVIDIA GPU facts from nvidia-smi, read with gpuprep's nvidia-smi parser
version_added: 0.1.0
description:
  - Reads C(nvidia-smi -q -x), or C(nvidia-smi -q) text where XML is unavailable, through gpuprep's one nvidia-smi parser
    and sets the facts the GPU roles need, so a play reads the GPUs once.
  - Also reports whether nvidia-persistenced and its packaged unit are installed, and what that unit runs.
  - A host without nvidia-smi is not an error; C(gpuprep_gpu_present) is false there.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Read-only.
  diff_mode:
    support: none
    description: Changes nothing.
  facts:
    support: full
    description: Sets C(gpuprep_gpus), C(gpuprep_gpu_present), C(gpuprep_driver_version) and C(gpuprep_persistenced).
options:
  nvidia_smi:
    description: Path or name (looked up on PATH) of nvidia-smi.
    type: str
    default: nvidia-smi
  persistenced:
    description: Path of nvidia-persistenced.
    type: path
    default: /usr/bin/nvidia-persistenced
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpuprep.node.gpuprep_gpu_facts:
- name: Show them
  ansible.builtin.debug:
    msg: "{{ gpuprep_gpus | map(attribute='name') | list }}"
  when: gpuprep_gpu_present
"""

RETURN = r"""
ansible_facts:
  description: The facts set.
  type: dict
  returned: always
  contains:
    gpuprep_gpu_present:
      description: Whether nvidia-smi answered with at least one GPU.
      type: bool
    gpuprep_driver_version:
      description: The driver version nvidia-smi reports; null without nvidia-smi.
      type: str
    gpuprep_gpus:
      description: One entry per GPU (index, name, uuid, bus id, persistence, clocks, supported clocks, power limits).
      type: list
      elements: dict
    gpuprep_persistenced:
      description:
        - Whether nvidia-persistenced (C(daemon)) and a unit for it (C(unit), C(unit_path)) exist.
        - What the unit runs (C(exec), C(user), C(static), C(stop_when_unneeded)).
      type: dict
"""

import os
import re
import shlex
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_nvsmi import parse_text, parse_xml


PERSISTENCED_UNITS = ("/lib/systemd/system/nvidia-persistenced.service",
                      "/usr/lib/systemd/system/nvidia-persistenced.service")

# the facts the roles read, under the names they use, from the shared parser's fields
FACT_NAMES = {"name": "name", "architecture": "architecture", "uuid": "uuid", "persistence_mode": "persistence",
              "max_clock_graphics_mhz": "max_graphics", "max_clock_mem_mhz": "max_memory",
              "clock_graphics_mhz": "clock_graphics", "clock_mem_mhz": "clock_memory",
              "app_clock_graphics_mhz": "app_graphics", "app_clock_mem_mhz": "app_memory",
              "power_limit_w": "power_limit", "power_min_limit_w": "power_min", "power_max_limit_w": "power_max",
              "power_default_limit_w": "power_default", "clock_event_reasons": "clock_event_reasons",
              "supported_clocks": "supported_clocks"}


def as_facts(index, bus_id, fields):
    gpu = {"index": index, "bus_id": bus_id, "supported_clocks": []}
    for field, fact in FACT_NAMES.items():
        if fields.get(field) is not None:
            gpu[fact] = fields[field]
    gpu["persistence"] = bool(gpu.get("persistence"))
    return gpu


def read_gpus(exe):
    """The GPUs from `nvidia-smi -q -x`, or `-q` text when XML is unavailable; (gpus, driver version, error)."""
    xml_run = subprocess.run([exe, "-q", "-x"], capture_output=True, text=True, timeout=60, check=False)
    if xml_run.returncode == 0 and "<nvidia_smi_log" in xml_run.stdout:
        header, entries = parse_xml(xml_run.stdout)
        return ([as_facts(i, bus, fields) for i, (bus, fields, _element) in enumerate(entries)],
                header.get("driver_version"), None)
    text_run = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=60, check=False)
    if text_run.returncode != 0:
        return None, None, "nvidia-smi failed: " + " ".join((text_run.stdout + text_run.stderr).split())[:500]
    header, blocks = parse_text(text_run.stdout)
    return [as_facts(i, bus, fields) for i, (bus, fields) in enumerate(blocks)], header.get("driver_version"), None


def vendor_unit(text):
    """What a packaged nvidia-persistenced unit says: the daemon it runs, the user it drops privileges to
    (--user; Ubuntu nvidia-persistenced, Debian nvpd, NVIDIA's RHEL packages nvidia-persistenced), whether it
    has an [Install] section (Ubuntu's is started by udev and has none) and StopWhenUnneeded."""
    exec_start = re.findall(r"^ExecStart=(\S.*)$", text, re.M)
    argv = shlex.split(exec_start[-1]) if exec_start else []
    user = argv[argv.index("--user") + 1] if "--user" in argv[:-1] else None
    return {"exec": argv[0] if argv else None, "user": user,
            "static": not re.search(r"^\[Install\]", text, re.M),
            "stop_when_unneeded": bool(re.search(r"^StopWhenUnneeded=(yes|true|1|on)\s*$", text, re.M | re.I))}


def persistenced_facts(daemon):
    facts = {"daemon": os.path.exists(daemon), "unit": False, "unit_path": None, "exec": None, "user": None,
             "static": False, "stop_when_unneeded": False}
    for path in PERSISTENCED_UNITS:
        if os.path.exists(path):
            with open(path) as fh:
                facts.update(vendor_unit(fh.read()), unit=True, unit_path=path)
            break
    if not facts["daemon"] and facts["exec"]:
        facts["daemon"] = os.path.exists(facts["exec"])       # e.g. /usr/sbin in NVIDIA's RHEL packages
    return facts


def main():
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"},
                                          "persistenced": {"type": "path", "default": "/usr/bin/nvidia-persistenced"}},
                           supports_check_mode=True)
    persistenced = persistenced_facts(module.params["persistenced"])
    exe = shutil.which(module.params["nvidia_smi"])
    if exe is None:
        module.exit_json(changed=False, ansible_facts={"gpuprep_gpu_present": False, "gpuprep_gpus": [],
                                                       "gpuprep_driver_version": None,
                                                       "gpuprep_persistenced": persistenced},
                         msg="nvidia-smi not found: no NVIDIA driver on this host")
    gpus, driver, error = read_gpus(exe)
    if error:
        module.fail_json(msg=error)
    module.exit_json(changed=False, ansible_facts={"gpuprep_gpu_present": bool(gpus), "gpuprep_gpus": gpus,
                                                   "gpuprep_driver_version": driver,
                                                   "gpuprep_persistenced": persistenced})


if __name__ == "__main__":
    main()
