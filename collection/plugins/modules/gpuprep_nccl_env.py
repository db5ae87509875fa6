#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module (read-only): the NCCL/OpenMP environment for this host and the exact file content,
computed by gpuprep's one implementation (module_utils/gpuprep_ncclenv.py), which `gpuprep nccl-env`
also uses."""

DOCUMENTATION = r"""
module: gpuprep_nccl_env
short_description: Compute the NCCL/OpenMP environment gpuprep writes to /etc/gpuprep/env
version_added: 0.1.0
description:
  - Reads the default route's interface, the physical core count and the RDMA ports' states below O(root),
    and computes NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE, NCCL_IB_HCA, OMP_NUM_THREADS and MKL_NUM_THREADS with the same code
    as C(gpuprep nccl-env).
  - Every value is validated before anything is written; the file quotes values for systemd and POSIX sh.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Read-only.
  diff_mode:
    support: none
    description: Changes nothing; the role writes the returned content.
options:
  gpu_count:
    description: GPUs on the host (from M(gpuprep.node.gpuprep_gpu_facts)); OMP threads = physical cores // GPUs.
    type: int
    required: true
  socket_ifname:
    description: Interface for NCCL's sockets instead of the default route's.
    type: str
  overrides:
    description: Variables set last, over the computed ones.
    type: dict
    default: {}
  env_file:
    description: Path of the environment file, named in the profile script.
    type: path
    default: /etc/gpuprep/env
  root:
    description: Read /proc and /sys below this directory (a chroot or an image being prepared).
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Compute the environment
  gpuprep.node.gpuprep_nccl_env:
    gpu_count: "{{ gpuprep_gpus | length }}"
    overrides: {NCCL_DEBUG: WARN}
  register: nccl
"""

RETURN = r"""
env:
  description: The variables.
  type: dict
  returned: success
content:
  description: The environment file.
  type: str
  returned: success
profile_script:
  description: The /etc/profile.d script that exports it to login shells.
  type: str
  returned: success
facts:
  description: The host facts the variables come from.
  type: dict
  returned: success
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_ncclenv import (
    compute_env, host_facts, render_env_file, render_profile_script,
)


def main():
    module = AnsibleModule(argument_spec={
        "gpu_count": {"type": "int", "required": True},
        "socket_ifname": {"type": "str"},
        "overrides": {"type": "dict", "default": {}},
        "env_file": {"type": "path", "default": "/etc/gpuprep/env"},
        "root": {"type": "path", "default": "/"},
    }, supports_check_mode=True)
    facts = host_facts(module.params["root"])
    try:
        env = compute_env(facts, module.params["gpu_count"], module.params["socket_ifname"],
                          module.params["overrides"])
    except ValueError as exc:
        module.fail_json(msg="nccl_env: %s (check nccl_env_socket_ifname and nccl_env_overrides)" % exc)
    module.exit_json(changed=False, env=env, content=render_env_file(env), facts=facts,
                     profile_script=render_profile_script(module.params["env_file"]))


if __name__ == "__main__":
    main()
