"""`lspci -vvv` read for PCIe Access Control Services (ACS): which bridges sit above which devices, and which
of them redirect peer-to-peer traffic up to the root complex. Shared by `gpuprep check` (topo.pcie-acs).

NCCL's troubleshooting guide: ACS on PCI switches redirects GPU peer-to-peer and GPUDirect RDMA traffic through
the CPU's root complex (slow, or a hang). `ACSCtl:` lists the control bits; ReqRedir and CmpltRedir are the ones
that redirect (SrcValid alone only validates requesters). Without root, lspci prints `<access denied>` instead of
the capabilities, and ACS is unknown. Standard library only."""
import re

HEADER = re.compile(r"^((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) ([^:]+): (.*)$")
BUS = re.compile(r"Bus: primary=([0-9a-fA-F]+), secondary=([0-9a-fA-F]+), subordinate=([0-9a-fA-F]+)")
PORT = re.compile(r"Express \(v\d\) ([A-Za-z -]+?)(?: \(|, MSI|$)")
ACS_CTL = re.compile(r"ACSCtl:\s+(.*)$")
GPU_CLASSES = ("VGA compatible controller", "3D controller", "Display controller")
REDIRECT_BITS = ("ReqRedir", "CmpltRedir")


def _flags(text):
    return {word[:-1]: word.endswith("+") for word in text.split() if word[-1:] in "+-"}


def parse_lspci_vvv(text):
    """[{bdf, class, name, port, secondary, subordinate, acs_ctl, denied}] in the order lspci printed them. bdf
    carries the domain (0000 when lspci was run without -D); bus numbers are ints; acs_ctl is None without an
    ACS capability (or when lspci could not read capabilities: denied)."""
    devices = []
    for line in text.splitlines():
        header = HEADER.match(line)
        if header:
            bdf = header.group(1).lower()
            devices.append({"bdf": bdf if bdf.count(":") == 2 else "0000:" + bdf, "class": header.group(2),
                            "name": header.group(3).strip(), "port": None, "secondary": None, "subordinate": None,
                            "acs_ctl": None, "denied": False})
            continue
        if not devices or not line[:1].isspace():
            continue
        device, stripped = devices[-1], line.strip()
        bus, port, acs = BUS.search(stripped), PORT.search(stripped), ACS_CTL.match(stripped)
        if bus:
            device["secondary"], device["subordinate"] = int(bus.group(2), 16), int(bus.group(3), 16)
        elif port and stripped.startswith("Capabilities:"):
            device["port"] = port.group(1)
        elif acs:
            device["acs_ctl"] = _flags(acs.group(1))
        elif "<access denied>" in stripped:
            device["denied"] = True
    return devices


def bridges_above(devices, bdf):
    """The bridges whose bus range holds the device at `bdf` (same domain), nearest last."""
    domain, bus = bdf.split(":")[0], int(bdf.split(":")[1], 16)
    above = [d for d in devices if d["secondary"] is not None and d["bdf"].split(":")[0] == domain
             and d["secondary"] <= bus <= d["subordinate"]]
    return sorted(above, key=lambda d: d["subordinate"] - d["secondary"], reverse=True)


def redirecting(device):
    """The redirect bits set in a bridge's ACSCtl ([] when none, or when ACS is absent or unreadable)."""
    return [bit for bit in REDIRECT_BITS if (device["acs_ctl"] or {}).get(bit)]


def is_gpu(device):
    return device["class"] in GPU_CLASSES and "NVIDIA" in device["name"]
