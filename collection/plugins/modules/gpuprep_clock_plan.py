#!/usr/bin/python
# Copyright: gpuprep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ansible module (pure, no side effects): decide each GPU's clocks from gpuprep_gpu_facts and
the requested values, or fail with the supported list before anything on the host changes.
Also names the GPUs that do not run their plan now (`drifted`), so the role re-applies it."""

DOCUMENTATION = r"""
module: gpuprep_clock_plan
short_description: Validate requested GPU clocks and power limits and plan how to set them
version_added: 0.1.0
description:
  - Pure computation on the controller's data, no change to the host. For each GPU from M(gpuprep.node.gpuprep_gpu_facts)
    it decides how the requested clocks are set (locked clocks where the GPU supports them, application clocks otherwise)
    and checks every value against the GPU's supported clocks and power limits.
  - Fails with the supported values before anything on the host changes when a request cannot be met.
  - Also names the GPUs that do not run their plan now (O(gpus) state versus plan), so a role re-applies it.
author: gpuprep contributors (@gpuprep)
attributes:
  check_mode:
    support: full
    description: Reads its arguments only.
  diff_mode:
    support: none
    description: Changes nothing.
options:
  gpus:
    description: The GPUs as M(gpuprep.node.gpuprep_gpu_facts) sets them in C(gpuprep_gpus).
    type: list
    elements: dict
    required: true
  graphics_mhz:
    description: Graphics clock for every GPU; unset means the highest supported one.
    type: int
  memory_mhz:
    description: Memory clock for every GPU; unset means the highest supported one.
    type: int
  by_model:
    description: Per GPU model (as nvidia-smi names it) C(graphics_mhz), C(memory_mhz) and C(power_limit_w), over the values for every GPU.
    type: dict
    default: {}
  power_limit_w:
    description: Power limit in watts for every GPU; unset leaves the limit alone.
    type: float
  gpu_table:
    description: Content of the role's C(files/gpus.csv), which says which GPU models support locked clocks.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Plan the clocks from the GPU facts
  gpuprep.node.gpuprep_clock_plan:
    gpus: "{{ gpuprep_gpus }}"
    graphics_mhz: 1980
    gpu_table: "{{ lookup('ansible.builtin.file', 'gpus.csv') }}"
  register: clock_plan
"""

RETURN = r"""
plan:
  description: One entry per GPU, C(index), C(uuid), C(name), C(method) (locked or application), C(graphics), C(memory), C(lock_memory) and C(power).
  type: list
  elements: dict
  returned: success
drifted:
  description: Indexes of the GPUs that do not run their plan now.
  type: list
  elements: int
  returned: success
drift_reasons:
  description: Why each drifted GPU does not run its plan.
  type: list
  elements: str
  returned: success
needs_persistence:
  description: Indexes of the GPUs without persistence mode (the driver drops their clocks when idle).
  type: list
  elements: int
  returned: success
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_gputable import clock_locks, read_table
from ansible_collections.gpuprep.node.plugins.module_utils.gpuprep_nvsmi import HOLDING_REASONS


class Refused(ValueError):
    """A requested clock or power limit the GPU does not take; the message names the GPU and what it takes."""


def _who(gpu):
    return f"GPU {gpu['index']} ({gpu.get('name')})"


def _memory_clock(gpu, request, supported):
    memory = request.get("memory") or (max(supported) if supported else gpu.get("max_memory"))
    if supported and memory not in supported:
        raise Refused(f"{_who(gpu)}: memory clock {memory} MHz is not supported; "
                      f"supported: {sorted(supported, reverse=True)}")
    return memory


def _graphics_clock(gpu, graphics, memory, allowed, locked):
    """The graphics clock to set. `-lgc MIN,MAX` takes any clock in the supported range (the driver clamps to its
    steps: the step below, as reported); `-ac MEM,GR` only an exact supported pair."""
    if allowed and locked:
        if not allowed[0] <= graphics <= allowed[-1]:
            raise Refused(f"{_who(gpu)}: graphics clock {graphics} MHz is not supported with memory {memory} MHz; "
                          f"locked clocks take {allowed[0]}..{allowed[-1]} MHz")
        return max(g for g in allowed if g <= graphics)
    if allowed and graphics not in allowed:
        raise Refused(f"{_who(gpu)}: graphics clock {graphics} MHz is not supported with "
                      f"memory {memory} MHz; supported: {allowed[-1]}..{allowed[0]} MHz ({len(allowed)} steps: "
                      f"{', '.join(str(g) for g in sorted(allowed, reverse=True)[:8])}, ...)")
    if not allowed and gpu.get("max_graphics") and graphics > gpu["max_graphics"]:
        raise Refused(f"{_who(gpu)}: {graphics} MHz is above the maximum {gpu['max_graphics']} MHz")
    return graphics


def _check_power(gpu, power):
    low, high = gpu.get("power_min"), gpu.get("power_max")
    if power is not None and low and high and not low <= power <= high:
        raise Refused(f"{_who(gpu)}: power limit {power} W outside {low}..{high} W")


def plan_gpu(gpu, request, power, table):
    """(the GPU's plan, None), or (None, why the request is refused)."""
    supported = {p["memory"]: sorted(p["graphics"]) for p in gpu.get("supported_clocks") or [] if p.get("memory")}
    locked, locked_memory = clock_locks(table, gpu.get("name"), gpu.get("architecture"))
    try:
        memory = _memory_clock(gpu, request, supported)
        allowed = supported.get(memory, [])
        graphics = request.get("graphics") or (max(allowed) if allowed else gpu.get("max_graphics"))
        graphics = _graphics_clock(gpu, graphics, memory, allowed, locked)
        _check_power(gpu, power)
    except Refused as exc:
        return None, str(exc)
    method = "locked" if locked else ("app" if gpu.get("app_graphics") is not None else "none")
    return {"index": gpu["index"], "uuid": gpu.get("uuid"), "name": gpu.get("name"), "method": method,
            "graphics": graphics, "memory": memory, "lock_memory": locked_memory and method == "locked",
            "power": power}, None


def main():
    module = AnsibleModule(argument_spec={
        "gpus": {"type": "list", "elements": "dict", "required": True},
        "graphics_mhz": {"type": "int"}, "memory_mhz": {"type": "int"},
        "by_model": {"type": "dict", "default": {}}, "power_limit_w": {"type": "float"},
        "gpu_table": {"type": "str", "required": True},
    }, supports_check_mode=True)
    table = read_table(module.params["gpu_table"])
    plans, errors = [], []
    for gpu in module.params["gpus"]:
        model = module.params["by_model"].get(gpu.get("name"), {}) or {}
        request = {"graphics": model.get("graphics_mhz", module.params["graphics_mhz"]),
                   "memory": model.get("memory_mhz", module.params["memory_mhz"])}
        power = model.get("power_limit_w", module.params["power_limit_w"])
        plan, error = plan_gpu(gpu, request, power, table)
        if error:
            errors.append(error)
        else:
            plans.append(plan)
    if errors:
        module.fail_json(msg="; ".join(errors))
    by_index = {gpu["index"]: gpu for gpu in module.params["gpus"]}
    reasons = {plan["index"]: drift(by_index[plan["index"]], plan) for plan in plans}
    module.exit_json(changed=False, plan=plans, drifted=[i for i, why in reasons.items() if why],
                     drift_reasons=[why for why in reasons.values() if why],
                     needs_persistence=[g["index"] for g in module.params["gpus"] if not g.get("persistence")])


def drift(gpu, plan):
    """Why the GPU does not run its plan, or None when it does. A locked GPU reporting less than its lock
    while a documented reason holds it there (power cap, thermal or power-brake slowdown) still runs it."""
    if plan["method"] == "locked":
        clock = gpu.get("clock_graphics")
        if clock == plan["graphics"]:
            return None
        held = [r for r in gpu.get("clock_event_reasons") or [] if r in HOLDING_REASONS]
        if clock is not None and clock < plan["graphics"] and held:
            return None
        return (f"GPU {plan['index']} reports {clock} MHz, locked at {plan['graphics']} MHz planned"
                + (" (no power or thermal reason holds it below)" if clock is not None and clock < plan["graphics"] else ""))
    if plan["method"] == "app" and gpu.get("app_graphics") != plan["graphics"]:
        return f"GPU {plan['index']} has application clocks {gpu.get('app_graphics')} MHz, planned {plan['graphics']} MHz"
    return None


if __name__ == "__main__":
    main()
