"""What the CUDA kernel tests share (test_kernels_gpu.py: GroupNormAct, test_gemm_kernels_gpu.py:
GemmGroupNormAct): the library handle and why it is unusable here (SKIP_REASON), seeded inputs, NaN-poisoned outputs,
the float64 reference and the tolerance rule (in test_kernels_gpu.py's docstring)."""

from __future__ import annotations

import torch

from fusedops import catalog

try:
    from fusedops.plugins import abi

    _LIB_ERR = None if abi.has_cuda() else "libfusedops was built without CUDA kernels"
except Exception as e:  # noqa: BLE001 - any failure to load the library is a reason to skip
    abi = None
    _LIB_ERR = f"fusedops native library not loadable: {e}"

if not torch.cuda.is_available():
    SKIP_REASON = "needs a CUDA device (torch.cuda.is_available() is False)"
elif _LIB_ERR:
    SKIP_REASON = f"needs the fusedops CUDA library: {_LIB_ERR} (run `fusedops build-native`)"
else:
    SKIP_REASON = None



def cutlass_skip_reason() -> str | None:
    """Why the CUTLASS sm_90 kernels cannot run here (None: they can); only asked once SKIP_REASON is None."""
    if not abi.has_cutlass():
        return "needs the fusedops CUTLASS kernels: libfusedops was built without them (scripts/get_cutlass.sh, then " \
            "rebuild)"
    if torch.cuda.get_device_capability() != (9, 0):
        cc = "".join(map(str, torch.cuda.get_device_capability()))
        return f"the CUTLASS kernels are built for sm_90a (H100/H200); this GPU is sm_{cc}"
    return None


DEV = torch.device("cuda")
TOL32 = 1e-4
ULP16 = {torch.float16: 2.0**-8, torch.bfloat16: 2.0**-5}


def run_in_threads(worker, count: int, timeout: float = 120.0) -> None:
    """worker(i) for i in range(count), each on its own thread; re-raises the first failure here (a thread's own
    exception would otherwise only be printed)."""
    import threading

    errors = []

    def guarded(i):
        try:
            worker(i)
        except Exception as e:  # noqa: BLE001 - reported by the calling thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), f"a worker thread is still running after {timeout} s"
    assert not errors, errors


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def attrs(op="GroupNormAct", **kw) -> catalog.FusedAttrs:
    return catalog.parse_attrs(op, kw)


def params(C: int, n_extra: int, seed: int, dtype=torch.float32):
    g = gen(seed)
    gamma = torch.rand(C, generator=g) + 0.5
    beta = torch.randn(C, generator=g) * 0.5
    extras = [torch.randn(C, generator=g) for _ in range(n_extra)]
    return [t.to(DEV, dtype) for t in [gamma, beta, *extras]]


def poisoned(shape, dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=DEV)


def run_gn(x, gamma, beta, extras, a, options=None):
    out = poisoned(catalog.output_shape("GroupNormAct", tuple(x.shape), a), x.dtype)
    y = abi.groupnorm_act_cuda(x, gamma, beta, extras, a, out=out, options=options)
    assert y is out
    return y


def ref_gn(x, gamma, beta, extras, a):
    d = lambda t: t.detach().cpu().double()  # noqa: E731
    return catalog.group_norm_act_reference(d(x), d(gamma), d(beta), [d(e) for e in extras], a)


def assert_close(got, want, tol, what=""):
    got = got.detach().cpu().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{what}\n{m}")


def check_gn(shape, G, pre="", post="", reduce="", seed=0, scale=2.0, shift=0.3, n_extra=2, tol=TOL32):
    x = (torch.randn(*shape, generator=gen(seed)) * scale + shift).to(DEV)
    gamma, beta, *extras = params(shape[1], n_extra, seed + 1)
    a = attrs(num_groups=G, pre=pre, post=post, reduce=reduce)
    got = run_gn(x, gamma, beta, extras, a)
    assert not torch.isnan(got).any(), "NaN left in the output: some element was not written"
    assert_close(got, ref_gn(x, gamma, beta, extras, a), tol, f"{shape} G={G} pre={pre!r} post={post!r} {reduce}")

