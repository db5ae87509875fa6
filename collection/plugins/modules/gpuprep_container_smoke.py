#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module: the GPU container smoke test, with the same code as `gpuprep check --deep`
(module_utils/gpuprep_container_smoke.py)."""

DOCUMENTATION = r"""
module: gpuprep_container_smoke
short_description: Check that a container sees every GPU, and what /dev/shm and memlock containers get
version_added: 0.1.0
description:
  - Imports a tiny image from the host's own /bin/sh and its libraries (no registry), runs
    C(docker run --rm --network none --pull never --gpus all IMAGE nvidia-smi -L) (then C(--runtime nvidia) when
    that runtime is registered) and compares the GPUs listed with O(expected_gpus); fails, naming the cause from
    Docker's own words, when they differ or the container cannot start.
  - Also runs the image without options and reports its C(ulimit -l) and /dev/shm size against NCCL's needs
    (C(--shm-size=1g --ulimit memlock=-1)) as a warning.
  - The image is removed afterwards when this run imported it.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: none
    description: Starts containers; the role skips it in check mode.
  diff_mode:
    support: none
    description: Changes nothing that stays.
options:
  expected_gpus:
    description: GPUs on the host (from M(gpuprep.node.gpuprep_gpu_facts)).
    type: int
    required: true
  runtimes:
    description: Docker's registered runtimes (C(docker info)); with C(nvidia) among them the runtime is tried too.
    type: list
    elements: str
    default: []
  docker:
    description: The docker CLI.
    type: str
    default: docker
"""

EXAMPLES = r"""
- name: A container sees every GPU
  gpuprep.node.gpuprep_container_smoke:
    expected_gpus: 8
    runtimes: [nvidia, runc]
"""

RETURN = r"""
listed:
  description: "The GPUs the container listed, as C(GPU i: NAME)."
  type: list
  elements: str
  returned: always
limits:
  description: C(memlock_kib) (null is unlimited), C(shm_bytes) and C(shm_mounted) of a default container.
  type: dict
  returned: when the limits container ran
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_container_smoke import (
    judge_limits, judge_smoke, parse_gpu_list, parse_limits, smoke,
)


def main():
    module = AnsibleModule(argument_spec={
        "expected_gpus": {"type": "int", "required": True},
        "runtimes": {"type": "list", "elements": "str", "default": []},
        "docker": {"type": "str", "default": "docker"},
    }, supports_check_mode=False)
    docker = module.get_bin_path(module.params["docker"], required=True)
    result = smoke(docker, runtimes=module.params["runtimes"])
    if result["error"]:
        module.fail_json(msg="the GPU smoke test could not start: %s" % result["error"])
    ok, message = judge_smoke(result["gpu"], module.params["expected_gpus"])
    listed = ["GPU %d: %s" % (i, name) for i, name, _uuid in parse_gpu_list(result["gpu"]["stdout"])]
    limits = parse_limits(result["limits"]["stdout"]) if result["limits"]["rc"] == 0 else None
    for shortfall in judge_limits(limits) if limits else []:
        module.warn("a container started without options: %s" % shortfall)
    if not ok:
        module.fail_json(msg=message, command=" ".join(result["gpu"]["argv"]), listed=listed, limits=limits)
    module.exit_json(changed=False, msg=message, listed=listed, limits=limits)


if __name__ == "__main__":
    main()
