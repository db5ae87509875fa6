"""Issue 44, the right cause: copies by the trace's own direction and memory kind, no GPU cause on a rank without
GPU work, idle measured against the step, and inputs a trace file can hold that must be one line and exit 2. The
traces are the real ones in tests/traces; where a test needs another timing, it edits a copy in timing only (how is
said at each), never the original and never an invented GPU trace."""
import gzip
import json
import os
import re
import shutil

import pytest

from conftest import REPO, run_cli
from gpuprep import api

TRACES = REPO / "tests" / "traces"
CONTROL = TRACES / "hta" / "trace_diff__control__control.json.gz"
RESNET4 = TRACES / "kineto-resnet50" / "v100-num_workers_4.pt.trace.json.gz"
CPU_ONLY = TRACES / "hta" / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def _ids(result):
    return {(f.id, f.severity) for f in result.findings}


def test_a_copy_to_pageable_memory_is_a_host_sync_named_by_its_op_not_a_pageable_upload():
    """A100 rank 3: 60 `Memcpy DtoH (Device -> Pageable)` whose cudaMemcpyAsync holds the host for milliseconds (one:
    5.2 ms for a 2 us copy)."""
    result = api.diagnose([str(CONTROL)])
    (sync,) = [f for f in result.findings if f.id == "job.host-sync"]
    assert "aten::copy_ (device to pageable memory)" in sync.evidence["calls"]
    assert "job.h2d-pageable" not in {f.id for f in result.findings}
    uploads = api.diagnose([str(RESNET4)])                       # HtoD (Pageable -> Device): the upload it is
    assert ("job.h2d-pageable", "warn") in _ids(uploads)


def test_a_rank_without_gpu_work_gets_no_gpu_cause_and_the_headline_says_so():
    result = api.diagnose([str(CPU_ONLY)])
    gpu_causes = {"job.host-sync", "job.h2d-pageable", "job.gpu-idle", "job.no-tensor-cores", "job.launch-bound"}
    assert not {f.id for f in result.findings} & gpu_causes
    document = result.document()
    assert document["verdict"] == "info" and document["not_judged"] == ["the GPUs (no GPU activity in any trace)"]
    assert "NOT JUDGED: the GPUs" in run_cli("diagnose", str(CPU_ONLY)).stdout


def _edited(source, tmp_path, name, edit):
    """A copy of a real trace with `edit(event)` applied to each event (timing only), gzip-written beside the test."""
    with gzip.open(source, "rt") as fh:
        document = json.load(fh)
    for event in document["traceEvents"]:
        edit(event)
    path = tmp_path / name
    with gzip.open(path, "wt") as fh:
        json.dump(document, fh)
    return path


def test_a_gpu_idle_most_of_every_step_reads_idle(tmp_path):
    """The fed ResNet-50 run with each ProfilerStep made 10x as long (its `dur` only: the kernels keep their times,
    so the GPU idles ~90% of each step while its kernels sit as close together as before)."""
    def stretch(event):
        if str(event.get("name", "")).startswith("ProfilerStep#"):
            event["dur"] = event["dur"] * 10
    stretched = api.diagnose([str(_edited(RESNET4, tmp_path, "stretched.json.gz", stretch))])
    (rank,) = stretched.facts.ranks
    before = api.diagnose([str(RESNET4)]).facts.ranks[0]
    assert rank.idle_pct == before.idle_pct                     # HTA's figure over the kernel span: unchanged
    assert rank.step_idle_pct > 85 and ("job.gpu-idle", "warn") in _ids(stretched)
    assert "job.gpu-idle" not in {f.id for f in api.diagnose([str(RESNET4)]).findings}


def test_every_nccl_kernel_name_family_is_communication():
    from gpuprep.job.metrics import _kind
    for name in ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",          # NCCL before 2.19 (the A100 trace)
                 "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",   # NCCL 2.19+
                 "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"):
        assert _kind(name) == "comm", name


# -- what a trace file can hold ----------------------------------------------------------------------------------

def test_a_fifo_is_refused_never_waited_on(tmp_path):
    fifo = tmp_path / "rank0.json"
    os.mkfifo(fifo)
    done = run_cli("diagnose", str(fifo), timeout=60)
    assert done.returncode == 2 and "a FIFO" in done.stderr
    directory = tmp_path / "ranks"
    directory.mkdir()
    os.mkfifo(directory / "rank1.json")
    done = run_cli("diagnose", str(directory), timeout=60)
    assert done.returncode == 2 and "rank1.json: a FIFO" in done.stderr


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1" * 400])
def test_a_timestamp_no_clock_holds_is_one_line_naming_the_file(tmp_path, value):
    """The real trace with one kernel's `ts` replaced (as JSON text: NaN and Infinity are what Python's json writes
    for those floats)."""
    text = gzip.open(RESNET4, "rt").read()
    at = text.index('"ts": ', text.index('"cat": "Kernel"'))
    end = text.index(",", at)
    edited = tmp_path / "edited.json"
    edited.write_text(text[:at] + f'"ts": {value}' + text[end:])
    done = run_cli("diagnose", str(edited))
    assert done.returncode == 2 and done.stdout == "" and "edited.json: event" in done.stderr, done.stderr
    assert "no time a clock holds" in done.stderr and len(done.stderr.splitlines()) == 1
    as_json = run_cli("diagnose", str(edited), "--json")           # the output is JSON, whatever happened
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["verdict"] == "error"


@pytest.mark.parametrize("path", sorted(TRACES.glob("*/*.json.gz")), ids=lambda p: p.name[:40])
def test_every_real_trace_reads_as_the_standard_librarys_json_reads_it(path):
    """Whole pieces of Kineto's layout are decoded by msgspec, the rest one by one: the events, in order (in the
    fields the metrics read), and the other keys are exactly what json.loads of the whole text gives."""
    from gpuprep.job.reader import read_trace, typed
    whole = json.loads(gzip.open(path, "rt").read())
    events = []
    trace = read_trace(str(path), events.extend)
    assert trace.complete and trace.events == len(events)
    assert events == [typed(e) for e in whole.pop("traceEvents")] and trace.meta == whole


def _args_a_list(text, at):
    """The event at `at` with args that are a list (its own args object renamed, so the JSON stays valid)."""
    return text[:at] + '"args": [1], ' + text[text.index('"args": {', at):].replace('"args": {', '"extra": {', 1)


def _ids_not_int64(text, at):
    """The next GPU event's stream a numeric string and its correlation past int64."""
    at = text.index('"stream": ', at)
    stream = re.match(r'"stream": (\d+)', text[at:]).group(1)
    edited = text[:at] + f'"stream": "{stream}"' + text[at + len(f'"stream": {stream}'):]
    at = edited.index('"correlation": ', at)
    corr = re.match(r'"correlation": (\d+)', edited[at:]).group(1)
    return edited[:at] + '"correlation": ' + "9" * 30 + edited[at + len(f'"correlation": {corr}'):]


@pytest.mark.parametrize("edit, expect", [
    # args that are a list (not the shape msgspec decodes; Python's json reads it): read one by one, as no args
    (_args_a_list, lambda whole, events: any(e.get("args") == [1] for e in whole) and
     sum(e.args is None for e in events) == sum(not isinstance(e.get("args"), dict) for e in whole)),
    # ids that are not int64: read one by one as HTA reads them, the string as its number, the overflow as -1
    (_ids_not_int64, lambda whole, events: any(e.args and e.args.correlation == -1 and e.args.stream > 0 and
                                               e.ph == "X" for e in events)),
    # an event that is a number, inside a piece: named with its byte offset and index
    (lambda t, at: t[:t.rindex("\n  {", 0, at) + 3] + "7,\n  " + t[t.rindex("\n  {", 0, at) + 3:],
     "is not an object"),
    # damage inside a piece: the byte offset of the damage
    (lambda t, at: t[:at] + "}}}" + t[at:], "byte "),
], ids=["args-a-list", "ids-not-int64", "a-number", "damage"])
def test_a_piece_msgspec_does_not_read_is_read_or_named_one_event_at_a_time(tmp_path, edit, expect):
    """The real trace with one edit in its middle (text only: no timing changed)."""
    from gpuprep.errors import BadInput
    from gpuprep.job.reader import read_trace, typed
    text = gzip.open(RESNET4, "rt").read()
    at = text.index('"ph": ', len(text) // 2)
    edited = tmp_path / "edited.json"
    edited.write_text(edit(text, at))
    events = []
    if callable(expect):
        trace = read_trace(str(edited), events.extend)
        whole = json.loads(edited.read_text())["traceEvents"]
        assert trace.complete and events == [typed(e) for e in whole] and expect(whole, events)
    else:
        with pytest.raises(BadInput, match=expect) as refused:
            read_trace(str(edited), events.extend)
        assert "edited.json: " in str(refused.value) and len(events) < text.count('"ph": ')


def test_two_documents_in_one_file_are_refused(tmp_path):
    text = gzip.open(RESNET4, "rt").read()
    both = tmp_path / "both.json"
    both.write_text(text + "\n" + text)
    done = run_cli("diagnose", str(both))
    assert done.returncode == 2 and "a second JSON document" in done.stderr


def test_a_rank_in_a_compression_gpuprep_does_not_read_is_named(tmp_path):
    import shutil
    shutil.copy(RESNET4, tmp_path / "rank0.json.gz")
    (tmp_path / "rank1.json.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)     # zstd's magic: no silent skip
    done = run_cli("diagnose", str(tmp_path))
    assert done.returncode == 2 and "rank1.json.zst: zst-compressed" in done.stderr and "zstd -d" in done.stderr


def test_a_bomb_of_tiny_events_is_refused_early(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [' + b"{}," * (60 << 20) + b"{}]}")
    done = run_cli("diagnose", str(bomb))
    assert done.returncode == 2 and "gzip bomb" in done.stderr


# -- the gain, and proof that a fix helped -----------------------------------------------------------------------

RESNET0 = TRACES / "kineto-resnet50" / "v100-num_workers_0.pt.trace.json.gz"


def test_every_cause_carries_its_gain_and_the_largest_comes_first():
    """The starved ResNet-50 run: the DataLoader holds ~62 ms of its 176 ms step (num_workers=4 made the step 49 ms
    shorter: the estimate is the most the fix can buy, and it bought most of it)."""
    found = [f for f in api.diagnose([str(RESNET0)]).findings if f.severity == "warn"]
    gains = [f.evidence.get("gain_ms_per_step") for f in found]
    assert found[0].id == "job.dataloader" and 50 < gains[0] < 70 and "removing it saves up to" in found[0].title
    known = [g for g in gains if g is not None]
    assert known == sorted(known, reverse=True)
    after = api.diagnose([str(RESNET4)]).facts.ranks[0].step_ms
    assert gains[0] >= api.diagnose([str(RESNET0)]).facts.ranks[0].step_ms - after     # the most, never less


def test_compare_shows_the_fix_helped_and_the_cause_is_gone():
    result = api.compare([str(RESNET0)], [str(RESNET4)])
    by_id = {(f.id, f.evidence.get("cause")): f for f in result.findings}
    assert by_id[("job.compare-step", None)].severity == "pass" and by_id[("job.compare-step", None)].evidence[
        "change_pct"] == pytest.approx(-28.1, abs=1)
    assert by_id[("job.compare-cause", "job.dataloader")].severity == "pass"
    assert by_id[("job.compare-cause", "job.h2d-pageable")].severity == "warn"
    done = run_cli("diagnose", "--compare", str(RESNET0), str(RESNET4), "--json")
    assert json.loads(done.stdout)["schema"] == "gpuprep.compare/1"


def test_a_change_within_the_steps_own_spread_is_noise():
    same = api.compare([str(RESNET4)], [str(RESNET4)])
    (step,) = [f for f in same.findings if f.id == "job.compare-step"]
    assert step.severity == "info" and "noise" in step.title
    hta = api.compare([str(CONTROL)], [str(TRACES / "hta" / "trace_diff__test__test.json.gz")])
    assert [f.severity for f in hta.findings if f.id == "job.compare-step"] == ["warn"]       # 77 -> 107 ms
    assert run_cli("diagnose", "--compare", str(RESNET4)).returncode == 2


def test_the_html_report_draws_a_row_per_rank_over_the_steps_in_a_real_browser(tmp_path):
    """The heat map of step times, one row per rank and one cell per step, as headless Chromium renders it."""
    from test_formats import chromium, screenshot
    if not chromium():
        pytest.skip("needs chromium")
    page = tmp_path / "diagnose.html"
    assert run_cli("diagnose", str(TRACES / "hta"), "-o", str(page)).returncode == 0
    dom = screenshot(page, tmp_path / "diagnose.png")
    assert dom.count('class="step-cell"') == sum(len(r.step_ms_each or []) for r in
                                                 api.diagnose([str(TRACES / "hta")]).facts.ranks) > 0
    assert 'class="step-heatmap"' in dom and "rank 3" in dom
    from PIL import Image
    image = Image.open(tmp_path / "diagnose.png").convert("RGB")
    assert image.getbbox() is not None


def test_the_overlap_of_communication_and_compute_is_each_pair_of_their_intervals():
    """The exposed-communication sum intersects two merged interval lists in one pass: the same intervals as every
    pair of them, on random lists (seeded) with shared ends and nested spans."""
    import random
    from gpuprep.job.metrics import _intersection, _merged
    draw = random.Random(44)
    for _ in range(300):
        a, b = ([(s, s + draw.choice([0, 1, 3, 10])) for s in (draw.randrange(100) for _ in range(draw.randrange(12)))]
                for _ in range(2))
        a, b = _merged(a), _merged(b)
        pairs = _merged([(max(x, y), min(u, v)) for x, u in a for y, v in b if min(u, v) > max(x, y)])
        assert _intersection(a, b) == pairs, (a, b)


def test_a_kernel_inside_the_steps_is_found_by_search_as_by_every_step():
    """Kernels per step counts the kernels that start inside a step by binary search over the merged steps: the same
    answer as asking every step, on random steps (seeded) that touch, overlap and nest, at their ends too."""
    import random
    from gpuprep.job.metrics import _merged, _within
    draw = random.Random(44)
    for _ in range(300):
        spans = [(s, s + draw.choice([1, 3, 10])) for s in (draw.randrange(60) for _ in range(draw.randrange(1, 8)))]
        merged = _merged(spans)
        starts = [a for a, _ in merged]
        for at in range(-2, 75):
            assert _within(merged, starts, at) == any(a <= at < b for a, b in spans), (spans, at)


def test_a_launch_is_found_by_its_correlation_as_a_dict_finds_it():
    """The CPU events' correlations, kept in two arrays and searched once sorted: on random ids (seeded), in order,
    shuffled and repeated, each id finds the start of the last event that carried it, and an absent id finds none."""
    import random
    from gpuprep.job.metrics import _Launches
    draw = random.Random(44)
    for trial in range(200):
        ids = sorted(draw.randrange(50) for _ in range(draw.randrange(40)))
        if trial % 2:
            draw.shuffle(ids)
        launches, expected = _Launches(), {}
        for k, corr in enumerate(ids):
            launches.corr.append(corr)
            launches.ts.append(float(k))
            expected[corr] = float(k)
        assert list(launches.starts_of(range(-1, 52))) == [expected.get(corr) for corr in range(-1, 52)], ids


def test_ranks_read_by_several_processes_are_what_one_process_reads_and_a_damaged_one_is_named(tmp_path):
    """A directory of ranks is read by this process and forked children, meeting in the middle: each rank's facts are
    what reading it alone gives, in rank order; one rank damaged in its middle stops the job with its own name."""
    from gpuprep.job import _rank, _read_ranks
    names = [RESNET4, CONTROL, CPU_ONLY, TRACES / "kineto-resnet50" / "v100-num_workers_0.pt.trace.json.gz"]
    files = [str(shutil.copy(source, tmp_path / f"rank{k}.pt.trace.json.gz")) for k, source in enumerate(names)]
    alone = [_rank(path).to_dict() for path in files]
    assert [r.to_dict() for r in _read_ranks(files, 2)] == alone == [r.to_dict() for r in _read_ranks(files, 3)]
    text = gzip.open(RESNET4, "rt").read()
    at = text.index('"ph": ', len(text) // 2)
    (tmp_path / "rank2.pt.trace.json.gz").unlink()
    (tmp_path / "rank2.pt.trace.json").write_text(text[:at] + "}}}" + text[at:])
    done = run_cli("diagnose", str(tmp_path), timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "rank2.pt.trace.json: byte " in done.stderr
