"""The 3-rank gloo job that recorded tests/data/flight (PROVENANCE.md there): a hang or a desync, with PyTorch's
flight recorder read from outside through the worker server, and dumped by the job after gloo's timeout.

Launch:
  TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=/tmp/fr/hang/auto_rank_ \
  FR_MODE=hang FR_OUT=/tmp/fr/hang \
  python -m torch.distributed.run --standalone --nproc-per-node 3 /tmp/fr/job.py

FR_MODE=hang   : ranks 0,1 enter all_reduce #4; rank 2 sleeps (never enters) -> gloo timeout.
FR_MODE=desync : rank 1 skips one all_reduce (same shape), so its collective_seq_id lags by one:
                 rank 1's seq 5 silently pairs with the others' seq 5 (gloo matches by tag), ranks 0,2
                 then block in seq 6 that rank 1 never calls -> gloo timeout.
Each rank also serves FR over HTTP on a unix socket FR_OUT/sock.rank<R> (opt-in,
torch._C._distributed_c10d._WorkerServer), so an outside process can read it during the hang.
After the timeout, each rank writes API dumps (pickle + json) as a fallback.
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _WorkerServer, _dump_fr_trace, _dump_fr_trace_json

MODE = os.environ.get("FR_MODE", "hang")
OUT = os.environ.get("FR_OUT", f"/tmp/fr/{MODE}")
TIMEOUT_S = float(os.environ.get("FR_TIMEOUT_S", "15"))
SLEEP_S = float(os.environ.get("FR_SLEEP_S", "30"))


def log(*a):
    print(f"[rank{dist.get_rank() if dist.is_initialized() else '?'} t={time.time():.1f}]", *a, flush=True)


def api_dump(rank, tag):
    with open(f"{OUT}/api_pickle_rank_{rank}", "wb") as f:
        f.write(_dump_fr_trace())
    with open(f"{OUT}/api_json_rank_{rank}.json", "wb") as f:
        f.write(_dump_fr_trace_json())
    log("api dump written", tag)


def main():
    os.makedirs(OUT, exist_ok=True)
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    sock = f"{OUT}/sock.rank{rank}"
    if os.path.exists(sock):
        os.unlink(sock)
    server = _WorkerServer(sock)  # HTTP over unix socket; handler 'fr_trace_json'

    t = torch.ones(4, 8)
    for i in range(3):  # warm-up collectives everyone takes part in
        dist.all_reduce(t)
    dist.broadcast(t, src=0)
    log("warm-up done")

    try:
        if MODE == "hang":
            if rank == 2:
                log(f"sleeping {SLEEP_S}s instead of entering all_reduce")
                time.sleep(SLEEP_S)
            else:
                dist.all_reduce(torch.ones(2, 3))  # blocks -> times out after TIMEOUT_S
        elif MODE == "desync":
            if rank != 1:
                dist.all_reduce(torch.ones(5))  # rank 1 skips this one
            dist.all_reduce(torch.ones(5))
            if rank == 1:  # rank 1's 2nd call paired with the others' 1st -> it gets out; keep it alive
                log(f"rank 1 got through; sleeping {SLEEP_S}s")
                time.sleep(SLEEP_S)
        log("collective section finished without error")
    except Exception as e:  # gloo timeout surfaces here
        log("collective failed:", type(e).__name__, str(e).splitlines()[0][:200])
    api_dump(rank, MODE)
    server.shutdown()
    sys.stdout.flush()
    os._exit(0)  # skip destroy_process_group (peers may be gone)


if __name__ == "__main__":
    main()
