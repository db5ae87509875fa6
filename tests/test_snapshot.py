import json

import pytest

from conftest import corpus
from gpuprep.errors import BadInput
from gpuprep.parsers import import_files
from gpuprep.snapshot import SCHEMA, Snapshot, normalize_bus_id


@pytest.mark.parametrize("name", ["h100-sxm-x8.nvidia-smi-q.txt", "a100-sxm4-80gb-mig.nvidia-smi-q.xml",
                                  "h100-sxm-x8-ib-penny.topo-m.txt", "xid13-xid43.dmesg-iso.txt"])
def test_json_round_trip(name):
    snap = import_files([corpus(name)])
    again = Snapshot.from_json(snap.to_json())
    assert again == snap
    assert json.loads(snap.to_json())["schema"] == SCHEMA


def test_newer_schema_is_refused_with_one_line():
    data = Snapshot().to_dict()
    data["schema"] = "gpuprep.snapshot/9"
    with pytest.raises(BadInput, match="newer than this gpuprep reads"):
        Snapshot.from_dict(data, "x.json")


@pytest.mark.parametrize("text,message", [
    ("{not json", "not valid JSON"),
    ('{"a": 1}', "no 'schema' field"),
    ('{"schema": "gpuprep.snapshot/1", "gpus": [{"index": "zero"}]}', "malformed snapshot"),
    ('{"schema": "gpuprep.snapshot/1", "gpus": 3}', "malformed snapshot"),
])
def test_malformed_snapshots(text, message):
    with pytest.raises(BadInput, match=message):
        Snapshot.from_json(text, "x.json")


def test_bus_id_spellings_name_one_device():
    assert normalize_bus_id("00000000:18:00.0") == normalize_bus_id("PCI:0000:18:00") == "0000:18:00"
    assert normalize_bus_id("00000009:01:00.0") == normalize_bus_id("0009:01:00")
