"""PyTorch's side of the all-reduce bandwidth benchmark: gloo, 2 processes on this machine.

  /usr/bin/python3 bench/torch_allreduce.py [NPROC]

Prints one JSON line per size: a float32 sum all-reduce, 3 warm-up calls, then the median of 5
rounds of 20 back-to-back calls, with nccl-tests' bus bandwidth (bytes * 2(n-1)/n / time), as mpi's TestAllReduceBandwidth
reports it for zeroeng over Open MPI (docs/benchmarks.md).
"""
import json, os, statistics, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

SIZES = [4096, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def run(rank, world):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = "29656"
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for size in SIZES:
        x = torch.ones(size // 4)
        for _ in range(3):
            dist.all_reduce(x)
        ts = []
        for _ in range(5):  # rounds of back-to-back calls, as the engine's "one at a time"
            dist.barrier()
            t = time.perf_counter()
            for _ in range(20):
                dist.all_reduce(x)
            ts.append((time.perf_counter() - t) / 20)
        sec = statistics.median(ts)
        if rank == 0:
            print(json.dumps({"workload": "allreduce", "backend": "gloo", "world": world, "bytes": size,
                              "us": round(sec * 1e6, 1), "bus_gbps": round(size * 2 * (world - 1) / world / sec / 1e9, 2)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    mp.spawn(run, args=(n,), nprocs=n, join=True)
