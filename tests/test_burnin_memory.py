"""The burn-in's memory check, run on the CPU with real torch: its peak extra memory is the buffer plus
one chunk, and a word flipped between write and verify is reported with its offset and pattern."""
import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from gpuprep.burnin.load import MEMORY_CHUNK, MEMORY_MARGIN, memory_check_bytes   # noqa: E402
from gpuprep.burnin.worker import MEMORY_PATTERNS, memory_check                    # noqa: E402

MIB = 1 << 20

PEAK_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from gpuprep.burnin.worker import memory_check

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    buffer, chunk = int(sys.argv[1]), int(sys.argv[2])
    memory_check(torch, torch.device("cpu"), 4 * chunk, chunk)      # torch's one-off allocations, paid here
    with open("/proc/self/clear_refs", "w") as fh:                  # reset the peak (VmHWM) to the current RSS
        fh.write("5")
    before = status("VmRSS")
    report = memory_check(torch, torch.device("cpu"), buffer, chunk)
    print(json.dumps({"before": before, "peak": status("VmHWM"), "report": report}))
""")


@pytest.mark.slow
def test_peak_extra_memory_is_the_buffer_plus_one_chunk():
    buffer, chunk = 384 * MIB, 16 * MIB
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(buffer), str(chunk)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout)
    extra = measured["peak"] - measured["before"]
    assert measured["report"]["ok"] and measured["report"]["bytes"] == buffer
    # the whole buffer was touched (every page written), and nothing bigger than one chunk beside it:
    # the interpreter and allocator noise is a few MiB, far below a second chunk or a copy of the buffer
    assert buffer <= extra <= buffer + chunk + 8 * MIB, f"extra {extra / MIB:.1f} MiB for a {buffer / MIB:.0f} MiB buffer"


@pytest.mark.parametrize("pattern", MEMORY_PATTERNS)
def test_a_flipped_word_is_reported_with_its_offset(pattern):
    word = 3 * (4 * MIB // 8) + 12345                 # in the fourth chunk (64-bit words)
    flipped = []

    def corrupt(name, buf):
        if name == pattern:
            buf[word] ^= 0x100
            flipped.append(name)

    report = memory_check(torch, torch.device("cpu"), 32 * MIB, 4 * MIB, after_write=corrupt)
    assert flipped == [pattern]
    assert not report["ok"] and report["bad_words"] == 1
    assert report["first_bad_offset"] == word * 8
    assert [(r["pattern"], r["bad_words"]) for r in report["patterns"]] == \
        [(p, 1 if p == pattern else 0) for p in MEMORY_PATTERNS]


def test_patterns_differ_and_the_random_one_is_seeded():
    seen = {}

    def keep(name, buf):
        seen[name] = buf[:64].clone()

    memory_check(torch, torch.device("cpu"), 1 * MIB, 256 * 1024, after_write=keep)
    assert seen["zeros"].eq(0).all() and seen["ones"].eq(-1).all()
    assert [int(v) & (2**64 - 1) for v in seen["walking_ones"][:64]] == [1 << i for i in range(64)]
    assert seen["address"].tolist() == list(range(64))
    again = {}
    memory_check(torch, torch.device("cpu"), 1 * MIB, 256 * 1024, after_write=lambda n, b: again.setdefault(n, b[:64].clone()))
    assert torch.equal(seen["random"], again["random"]) and len(set(seen["random"].tolist())) > 60


def test_buffer_size_from_free_memory():
    gib = 1 << 30
    # an H100 with 79 GiB free: 90% less the margin, in whole chunks
    size = memory_check_bytes(79 * gib)
    assert size % MEMORY_CHUNK == 0 and size <= 0.9 * 79 * gib - MEMORY_MARGIN
    assert 0.9 * 79 * gib - MEMORY_MARGIN - size < MEMORY_CHUNK
    assert memory_check_bytes(256 * MIB) == 0            # too little free: nothing, never negative


def test_every_bit_of_a_word_is_driven_and_addresses_never_repeat():
    """The int32 version never set bit 31 in the random pattern and wrapped its address pattern every 4 GiB,
    so a fault aliasing two addresses 4 GiB apart read back the same value and passed."""
    seen = {}
    memory_check(torch, torch.device("cpu"), 8 * MIB, 1 * MIB,
                 after_write=lambda n, b: seen.setdefault(n, b.clone()))
    random = seen["random"]
    assert random.lt(0).any() and random.gt(0).any()                     # bit 63 set in some words, not all
    high = random.bitwise_right_shift(32).bitwise_and(0xFFFFFFFF)
    assert high.bitwise_and(1 << 31).ne(0).any() and high.ne(0).float().mean() > 0.99
    address = seen["address"]
    assert torch.equal(address, torch.arange(address.numel(), dtype=torch.int64))   # unique: no wrap anywhere
