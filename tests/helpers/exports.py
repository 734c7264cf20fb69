"""Small exports built by hand for the tests."""
from __future__ import annotations

from pipeline.synth import ExportWriter

MS = 1_000_000


def one_h100(path, kernels_ms=((0, 10), (20, 30))) -> str:
    """An Nsight export at ``path`` of one H100 (uuid ``aaa``) whose process 10 runs a ``gemm`` kernel on stream 7
    over each ``(start, end)`` of ``kernels_ms`` (ms); returns its path."""
    w = ExportWriter(str(path))
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="aaa")
    w.cuda_device(0, 0, 10)
    for start, end in kernels_ms:
        w.kernel(pid=10, device=0, stream=7, start=start * MS, end=end * MS, name="gemm")
    w.close()
    return str(path)
