"""RDMA ports from `ibstat`, `ibstatus`, `ibv_devinfo [-v]` and `ibdev2netdev [-v]` captures: one RdmaDevice per
port, with the words each tool prints (the rules read them through rules/net.py's port_active/link_up)."""
from __future__ import annotations

import re
from typing import List, Optional

from ..errors import BadInput
from ..snapshot import RdmaDevice, Snapshot


def _rate(text: Optional[str]) -> Optional[float]:
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", text or "")
    return float(match.group(1)) if match else None


def _blocks(text: str, start: str) -> List[str]:
    """The text cut at each line that starts a device (`CA 'mlx5_0'`, `hca_id: mlx5_0`, ...)."""
    starts = [m.start() for m in re.finditer(start, text, re.M)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def _field(block: str, name: str) -> Optional[str]:
    match = re.search(rf"^\s*{re.escape(name)}\s*:\s*(.*?)\s*$", block, re.M | re.I)
    return match.group(1) if match else None


# ibstat ------------------------------------------------------------------------------------------------------

def looks_like_ibstat(text: str) -> bool:
    return bool(re.search(r"^CA '[^']+'\s*$", text, re.M)) and "Port 1:" in text and "CA type:" in text


def import_ibstat(text: str, origin: str) -> Snapshot:
    ports: List[RdmaDevice] = []
    for block in _blocks(text, r"^CA '"):
        name = re.match(r"CA '([^']+)'", block).group(1)
        head = block.split("Port ", 1)[0]
        model, firmware = _field(head, "CA type"), _field(head, "Firmware version")
        found = re.findall(r"^\s*Port (\d+):\s*$(.*?)(?=^\s*Port \d+:\s*$|\Z)", block, re.M | re.S)
        said = _field(head, "Number of ports")
        if said is None or not said.isdigit() or int(said) > len(found):
            raise BadInput(f"{origin}: cut short in CA '{name}' ({len(found)} of {said or 'its'} ports shown): "
                           "capture the whole ibstat output again")
        for number, body in found:
            if _field(body, "State") is None or _field(body, "Link layer") is None:
                # every port ibstat prints has State and Link layer (its last line): a port without them was cut
                raise BadInput(f"{origin}: cut short in CA '{name}' Port {number} (no State or Link layer): "
                               "capture the whole ibstat output again")
            ports.append(RdmaDevice(name=name, port=int(number), model=model or None, firmware=firmware or None,
                                    state=_field(body, "State"), phys_state=_field(body, "Physical state"),
                                    rate_gbps=_rate(_field(body, "Rate")), link_layer=_field(body, "Link layer")))
    return Snapshot(sources=[origin], rdma_devices=ports)


# ibstatus (the /sys words) ---------------------------------------------------------------------------------

def looks_like_ibstatus(text: str) -> bool:
    return bool(re.search(r"^Infiniband device '[^']+' port \d+ status:", text, re.M))


def import_ibstatus(text: str, origin: str) -> Snapshot:
    ports = []
    for block in _blocks(text, r"^Infiniband device '"):
        name, port = re.match(r"Infiniband device '([^']+)' port (\d+)", block).groups()
        ports.append(RdmaDevice(name=name, port=int(port), state=_field(block, "state"),
                                phys_state=_field(block, "phys state"), rate_gbps=_rate(_field(block, "rate")),
                                link_layer=_field(block, "link_layer"), gid=_field(block, "default gid")))
    return Snapshot(sources=[origin], rdma_devices=ports)


# ibv_devinfo -----------------------------------------------------------------------------------------------

def looks_like_ibv_devinfo(text: str) -> bool:
    return bool(re.search(r"^hca_id:\s*\S+", text, re.M)) and "port:" in text


_WIDTH = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}


def _devinfo_rate(body: str) -> Optional[float]:
    """active_width x active_speed (-v only): '4X' and '50.0 Gbps (64)' make 200 Gb/s."""
    width, speed = _field(body, "active_width"), _field(body, "active_speed")
    lanes = _WIDTH.get((width or "").split()[0] if width else "")
    per_lane = _rate(speed) if speed and "invalid" not in speed else None
    return lanes * per_lane if lanes and per_lane else None


def import_ibv_devinfo(text: str, origin: str) -> Snapshot:
    ports = []
    for block in _blocks(text, r"^hca_id:"):
        name = re.match(r"hca_id:\s*(\S+)", block).group(1)
        head = re.split(r"^\s*port:\s*\d+", block, maxsplit=1, flags=re.M)[0]
        part = _field(head, "vendor_part_id")
        for number, body in re.findall(r"^\s*port:\s*(\d+)\s*$(.*?)(?=^\s*port:\s*\d+\s*$|\Z)", block, re.M | re.S):
            ports.append(RdmaDevice(name=name, port=int(number), model=f"MT{part}" if part else None,
                                    firmware=_field(head, "fw_ver"), state=_field(body, "state"),
                                    phys_state=_field(body, "phys_state"), link_layer=_field(body, "link_layer"),
                                    rate_gbps=_devinfo_rate(body)))
    return Snapshot(sources=[origin], rdma_devices=ports)


# ibdev2netdev ----------------------------------------------------------------------------------------------

_IBDEV2NETDEV = re.compile(r"^(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d+\s+)?(?P<name>\S+)"
                           r"(?:\s+\((?P<part>MT\d+)[^)]*\))?(?:\s+\S+)*?\s+(?:fw\s+(?P<fw>\S+)\s+)?"
                           r"port\s+(?P<port>\d+)\s+(?:\((?P<state>[A-Z]+)\s*\)\s+)?==>\s+(?P<netdev>\S+)\s+"
                           r"\((?P<up>Up|Down)\s*\)\s*$", re.I)


def looks_like_ibdev2netdev(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and all(_IBDEV2NETDEV.match(line.strip()) for line in lines)


def import_ibdev2netdev(text: str, origin: str) -> Snapshot:
    ports = []
    for line in text.splitlines():
        match = _IBDEV2NETDEV.match(line.strip())
        if match:
            ports.append(RdmaDevice(name=match["name"], port=int(match["port"]), netdev=match["netdev"],
                                    netdev_up=match["up"].lower() == "up", model=match["part"],
                                    firmware=match["fw"], state=match["state"]))
    return Snapshot(sources=[origin], rdma_devices=ports)

