"""Run under real torchrun by tests/test_burnin.py: rank 1 dies at once (as a rank whose GPU fell off the bus), rank 0
raises what gloo raises when its peer vanishes mid-collective half a second later. With torchrun's monitor looking
every 3 s, both failures are seen in one look. With PEER_VANISHES_ABORT=1 rank 0 aborts instead (SIGABRT), as
ProcessGroupNCCL's watchdog tears a rank down when its peer is gone (TORCH_NCCL_ASYNC_ERROR_HANDLING=3)."""
import os
import time

if int(os.environ["RANK"]) == 1:
    os._exit(17)
time.sleep(0.5)
if os.environ.get("PEER_VANISHES_ABORT") == "1":
    os.abort()
raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
