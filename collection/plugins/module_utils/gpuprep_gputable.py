# Built by tools/build_collection.py from gpuprep/common/gputable.py, gpuprep's one copy: edit that file, not this one.
"""gpuprep/data/gpus.csv, the one table of GPU models and what each supports, read the same way by the
package (gpuprep.knowledge) and by the gpu_clocks role's module, which gets the table's text from the role.

Standard library only."""
import csv
import io
import re


def read_table(text):
    """Rows of a CSV whose '#' lines are comments."""
    body = "\n".join(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(body)))


def model_row(rows, name):
    """The first row whose name_regex matches nvidia-smi's product name, or None."""
    if not name:
        return None
    return next((row for row in rows if re.search(row["name_regex"], name)), None)


def clock_locks(rows, name, architecture):
    """(locked graphics clocks, locked memory clocks) the GPU supports: its model's row, else what every row
    of its architecture says; (False, False) when neither is known."""
    row = model_row(rows, name)
    if row is None:
        same = [r for r in rows if architecture and r["architecture"].lower() == architecture.lower()]
        answers = {(r["locked_clocks"], r["locked_memory_clocks"]) for r in same}
        row = dict(zip(("locked_clocks", "locked_memory_clocks"), answers.pop())) if len(answers) == 1 else None
    if row is None:
        return False, False
    return row["locked_clocks"] == "yes", row["locked_memory_clocks"] == "yes"


def nvswitch_board(rows, names):
    """Why GPUs of these nvidia-smi names are an NVSwitch board ('8 NVIDIA H100 80GB HBM3 baseboard GPUs
    (HGX/DGX)'), or None: 8 or more SXM baseboard GPUs of NVLink 3 or later (HGX/DGX A100 on; the 8-GPU V100 SXM2
    boards, DGX-1, are a cube mesh without NVSwitches). Blackwell's switches are no PCIe devices of the host, so
    their boards are told by their GPUs."""
    if len(names) < 8 or not all(names):
        return None
    models = [model_row(rows, name) or {} for name in names]
    if all(m.get("nvlink_form") == "baseboard" and (m.get("nvlink_generation") or "").isdigit()
           and int(m["nvlink_generation"]) >= 3 for m in models):
        return "%d %s baseboard GPUs (HGX/DGX)" % (len(names), names[0])
    return None
