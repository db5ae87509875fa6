"""A real training loop on the CPU, profiled with torch.profiler, for gpuprep diagnose's tests. Modes:
  data-bound: a dataset that sleeps per sample, num_workers=0 (the input pipeline starves the step)
  compute-bound: the same loop with an instant dataset and a heavier model
  ddp: two gloo ranks (torchrun) where rank SLOW_RANK does extra work each step
  hang: two gloo ranks where rank SLOW_RANK stops before its all-reduce (the other waits in it)
  sync-bound (TRAIN_STEPS only): the data-free loop that reads a metric with .item() every step
  workers-waiting, workers-computing (TRAIN_STEPS only): two DataLoader workers whose samples are slow, each
    waiting (a remote read) or computing (a costly decode)
Writes one Chrome trace per rank into OUT_DIR (torch.profiler.tensorboard_trace_handler); with TRAIN_STEPS set it
trains that many steps instead, unprofiled (what `gpuprep watch` looks at; every rank the same count)."""
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

MODE, OUT = sys.argv[1], sys.argv[2]


class Samples(torch.utils.data.Dataset):
    """Samples made ahead of time; a data-bound job's dataset sleeps per sample (a slow decode)."""
    def __init__(self, delay):
        self.delay = delay
        self.x, self.y = torch.randn(256, 64), torch.randn(256, 8)

    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return self.x[i % 256], self.y[i % 256]


class Decoded(Samples):
    """Each sample costs its worker CPU time (a decode) instead of a wait."""
    def __getitem__(self, i):
        end = time.process_time() + self.delay
        while time.process_time() < end:
            pass
        return self.x[i % 256], self.y[i % 256]


class Batches(Samples):
    """Whole batches ready in memory (DataLoader(batch_size=None)): the loader costs next to nothing."""
    def __getitem__(self, i):
        return self.x[:64], self.y[:64]


def main():
    rank = int(os.environ.get("RANK", 0))
    ddp = MODE in ("ddp", "hang")
    if ddp:
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(0)
    if MODE in ("sync-bound", "workers-waiting", "workers-computing"):
        # one thread: the model's small operators stay cheap beside the metric or the loader on a loaded 2-CPU host
        # (two threads meeting at every operator made the step as slow as what it waits for)
        torch.set_num_threads(1)
    width = {"data-bound": 64, "sync-bound": 64, "workers-waiting": 64, "workers-computing": 64,
             "compute-bound": 2048}.get(MODE, 512)
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 8))
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    delay = 0.005 if MODE == "data-bound" else 0.0
    if MODE in ("compute-bound", "sync-bound"):
        # the loader costs next to nothing: on a host busy with other work, Python-heavy code slows more than one
        # large operator, and a per-sample loader then held a third of a sync-bound job's samples
        loader = torch.utils.data.DataLoader(Batches(0.0), batch_size=None, num_workers=0)
    elif MODE in ("workers-waiting", "workers-computing"):
        dataset = Samples(0.02) if MODE == "workers-waiting" else Decoded(0.02)
        loader = torch.utils.data.DataLoader(dataset, batch_size=16, num_workers=2)
    else:
        loader = torch.utils.data.DataLoader(Samples(delay), batch_size=16, num_workers=0)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    slow = ddp and rank == int(os.environ.get("SLOW_RANK", "-1"))
    if os.environ.get("TRAIN_STEPS"):
        watched(model, loader, optimiser, slow, int(os.environ["TRAIN_STEPS"]))
        if ddp:
            torch.distributed.barrier()         # no rank leaves while the other still talks to it
            torch.distributed.destroy_process_group()
        return
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=5, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(OUT, worker_name=f"rank{rank}")) as prof:
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimiser.zero_grad()
            loss.backward()
            if slow:        # this rank's own work is slower, so the other waits for it in the all-reduce
                torch.randn(1200, 1200) @ torch.randn(1200, 1200)
            optimiser.step()
            prof.step()
            if step >= 8:
                break
    if ddp:
        # each rank writes its trace at its own pace: no rank tears gloo down while the other still talks to it (on a
        # loaded host a rank was aborted, SIGABRT, in the other's teardown)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def watched(model, loader, optimiser, slow, steps):
    """The same loop for `steps` steps, without the profiler; in hang mode the slow rank stops before its
    all-reduce."""
    times = []
    probe = torch.randn(1000, 1000)
    print("TRAINING", flush=True)        # imports done: a watcher started now sees the loop, not the start-up
    for step, (x, y) in enumerate(loader):
        if step >= steps:
            break
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimiser.zero_grad()
        if slow and MODE == "hang":
            open(os.path.join(OUT, "hanging"), "w").close()      # the state a test waits for, never a fixed sleep
            time.sleep(3600)        # never joins the gradient all-reduce: the other rank waits in it
        if slow:
            torch.randn(1200, 1200) @ torch.randn(1200, 1200)
        loss.backward()
        optimiser.step()
        if MODE == "sync-bound":
            # a metric read every step. On a GPU, .item() is where the host waits for every kernel queued so far; on
            # the CPU the metric's own work runs on this line, so the main thread spends the step on it the same way
            metric = (probe @ probe).abs().mean().item()
            assert metric == metric
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"STEP_MS {1000 * times[len(times) // 2]:.3f}", flush=True)


if __name__ == "__main__":
    main()
