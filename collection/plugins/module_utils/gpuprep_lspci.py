# Built by tools/build_collection.py from gpuprep/parsers/lspci_vvv.py, gpuprep's one copy: edit that file, not this one.
"""`lspci -vvv` read for PCIe Access Control Services (ACS): which bridges sit above which devices, and which
of them redirect peer-to-peer traffic up to the root complex, and the ACS Control register `setpci` reads and
writes. Shared by `gpuprep check` (topo.pcie-acs), the system_tuning role's ACS concern (gpuprep_pcie_acs) and
the revert record (gpuprep_record, gpuprep_restore).

NCCL's troubleshooting guide: ACS on PCI switches redirects GPU peer-to-peer and GPUDirect RDMA traffic through
the CPU's root complex (slow, or a hang). `ACSCtl:` lists the control bits; ReqRedir and CmpltRedir are the ones
that redirect (SrcValid alone only validates requesters). Without root, lspci prints `<access denied>` instead of
the capabilities, and ACS is unknown. Standard library only."""
import re
import subprocess

HEADER = re.compile(r"^((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) ([^:]+?)(?: \[[0-9a-fA-F]{4}\])?: (.*)$")
BUS = re.compile(r"Bus: primary=([0-9a-fA-F]+), secondary=([0-9a-fA-F]+), subordinate=([0-9a-fA-F]+)")
PORT = re.compile(r"Express \(v\d\) ([A-Za-z -]+?)(?: \(|, MSI|$)")
ACS_CTL = re.compile(r"ACSCtl:\s+(.*)$")
GPU_CLASSES = ("VGA compatible controller", "3D controller", "Display controller")
REDIRECT_BITS = ("ReqRedir", "CmpltRedir")
# PCIe Base Specification, ACS Control Register (offset 06h of the ACS extended capability): bits 0..6, which
# lspci's ACSCtl line prints in this order
ACS_CTL_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
ACS_CTL_REGISTER = "ECAP_ACS+0x6.w"
# lspci leaves the port type out (None) for a bridge without an Express capability; root ports are not switches
SWITCH_PORT_TYPES = (None, "Downstream Port", "Upstream Port")
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
WORD = re.compile(r"^[0-9a-fA-F]{1,4}$")


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


# NVSwitch device ids in NVIDIA's Fabric Manager guide's lspci examples: HGX-2 (first generation), HGX A100
# (second), HGX H100 (third); pci.ids names them "... NVSwitch" where it knows them
NVSWITCH_IDS = re.compile(r"(?:\bDevice |\[10de:)(1ac2|1af1|22a3)\b")


def is_nvswitch(device):
    """An NVSwitch of an HGX-2/A100/H100-class baseboard: a Bridge-class NVIDIA device named NVSwitch or of an
    NVSwitch's id (nForce chipsets had Bridge-class NVIDIA Ethernet too). Fourth-generation NVSwitches
    (B100/B200/B300) sit behind a ConnectX-7 bridge and are no PCIe devices of the host."""
    name = device["name"]
    return device["class"] == "Bridge" and "NVIDIA" in name.upper() and bool(
        "NVSwitch" in name or NVSWITCH_IDS.search(name))


def is_rdma_nic(device):
    """A NIC that GPUDirect RDMA uses: InfiniBand, or a Mellanox/NVIDIA ConnectX or BlueField in Ethernet mode."""
    return device["class"] == "Infiniband controller" or (
        device["class"] == "Ethernet controller" and any(w in device["name"] for w in ("Mellanox", "ConnectX", "BlueField")))


def switch_ports_above(devices):
    """{bdf: bridge} for the PCIe switch ports above the NVIDIA GPUs and RDMA NICs, each with `below`: the GPUs
    and NICs under it. Their ACS redirect sends GPU peer-to-peer and GPUDirect RDMA traffic through the root
    complex; root ports are left out, since traffic between root ports crosses the root complex anyway."""
    ports = {}
    for end in (d for d in devices if is_gpu(d) or is_rdma_nic(d)):
        for bridge in bridges_above(devices, end["bdf"]):
            if bridge["port"] in SWITCH_PORT_TYPES:
                ports.setdefault(bridge["bdf"], dict(bridge, below=[]))["below"].append(end["bdf"])
    return ports


def acs_unreadable(devices, ports):
    """lspci could not read the capabilities (not root), so the ports' ACS is unknown."""
    return any(d["denied"] for d in devices) and all(p["acs_ctl"] is None for p in ports.values())


def acs_ctl_word(flags):
    """The ACS Control register's value from lspci's ACSCtl flags."""
    return sum(1 << bit for bit, name in enumerate(ACS_CTL_BITS) if flags.get(name))


def acs_ctl_flags(word):
    """lspci's ACSCtl flags from the register's value."""
    return {name: bool(word >> bit & 1) for bit, name in enumerate(ACS_CTL_BITS)}


def acs_ctl_argv(setpci, bdf, word=None):
    """setpci's argument list that reads (word None) or writes the ACS Control register of the port at bdf.
    The BDF is checked first: it also becomes a line of a systemd unit."""
    if not BDF.match(bdf):
        raise ValueError("not a PCI address (DDDD:BB:DD.F): %r" % (bdf,))
    return [setpci, "-s", bdf, ACS_CTL_REGISTER if word is None else "%s=%04x" % (ACS_CTL_REGISTER, word)]


def parse_setpci_word(text):
    """The register value setpci printed for a read (hex digits on one line); ValueError for anything else."""
    stripped = (text or "").strip()
    if not WORD.match(stripped):
        raise ValueError("setpci printed %r, not a 16-bit register value" % (stripped[:80],))
    return int(stripped, 16)


def setpci_acs_ctl(setpci, bdf, word=None, timeout=60):
    """Read (word None: the register's value) or write the ACS Control register of the port at bdf with setpci.
    ValueError naming what setpci said when it fails, or when it selected no device (pciutils warns and exits 0)."""
    argv = acs_ctl_argv(setpci, bdf, word)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError("%s: %s" % (" ".join(argv), exc))
    said = (done.stderr or "").strip().splitlines()
    if done.returncode != 0 or any("No devices selected" in line for line in said):
        raise ValueError("%s failed: %s" % (" ".join(argv), said[-1] if said else "exit %d" % done.returncode))
    return parse_setpci_word(done.stdout) if word is None else word
