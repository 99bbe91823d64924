"""Every chain step of the op spec on the CUDA runtimes, against the hand-written float64 reference: the CUDA kernels
of both ops through the C ABI (GroupNormAct, GemmGroupNormAct in strict FP32), the PyTorch ops on CUDA tensors and
the ONNX Runtime library on the CUDA EP; then softsign (the step added through the spec alone) in float16 / bfloat16
against eager PyTorch in the same dtype. Parametrised over the spec like tests/test_every_step.py (the CPU side), so a
step added to ops.toml is covered here with no edit.

Tolerances as tests/gpu/test_kernels_gpu.py: 1e-4 for float32 against float64; 16-bit: no worse than 1.5x eager
PyTorch's error in the same dtype plus one output ulp at |y| ~ 4."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fusedops import catalog

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)
try:
    from fusedops.plugins import abi

    _LIB_ERR = None if abi.has_cuda() else "libfusedops was built without CUDA kernels"
except Exception as e:  # noqa: BLE001 - any failure to load the library is a reason to skip
    _LIB_ERR = f"fusedops native library not loadable: {e}"
if _LIB_ERR:
    pytest.skip(f"needs the fusedops CUDA library: {_LIB_ERR} (run `fusedops build-native`)", allow_module_level=True)

DEV = torch.device("cuda")
TOL32 = 1e-4
ULP16 = {torch.float16: 2.0**-8, torch.bfloat16: 2.0**-5}
PARAMS = {"leaky_relu": ["0.2"], "hardtanh": ["-0.5,inf"], "hardsigmoid": ["0.3,0.4"], "softplus": ["2,3"]}
CHAINS = []
for _name, _kind in catalog.STEP_KINDS.items():
    if _kind.binary:
        CHAINS += [f"{_name}(@1)", f"{_name}(1.5)"]
    else:
        CHAINS += [_name] + [f"{_name}({p})" for p in PARAMS.get(_name, [])]
OPS = ["GroupNormAct", "GemmGroupNormAct"]


def _inputs(op: str, chain: str, where: str) -> dict[str, torch.Tensor]:
    """Fresh random CPU float32 inputs, seeded by the case; extra_1 has |e| >= 1 so div / rdiv stay conditioned."""
    g = torch.Generator().manual_seed(zlib.crc32(repr((op, chain, where)).encode()))
    C, K = 12, 16
    if op == "GroupNormAct":
        t = {"X": torch.randn(3, C, 5, 7, generator=g) * 2 + 0.3}
    else:
        t = {"X": torch.randn(2, 5, K, generator=g), "W": torch.randn(C, K, generator=g) / math.sqrt(K),
             "B": torch.randn(C, generator=g)}
    t["gamma"] = torch.rand(C, generator=g) + 0.5
    t["beta"] = torch.randn(C, generator=g) * 0.5
    t["extra_0"] = torch.randn(C, generator=g)
    e1 = torch.randn(C, generator=g)
    t["extra_1"] = e1.sign() * (e1.abs() + 1)
    return t


def _attrs(op: str, where: str, chain: str) -> catalog.FusedAttrs:
    extra = {"allow_tf32": 0} if op == "GemmGroupNormAct" else {}  # strict FP32: the 1e-4 tolerance holds
    return catalog.parse_attrs(op, {"num_groups": 4, where: chain, **extra})


def _reference(op: str, a: catalog.FusedAttrs, t: dict) -> torch.Tensor:
    d = {k: v.double() for k, v in t.items()}
    extras = [d["extra_0"], d["extra_1"]]
    if op == "GroupNormAct":
        return catalog.group_norm_act_reference(d["X"], d["gamma"], d["beta"], extras, a)
    return catalog.gemm_group_norm_act_reference(d["X"], d["W"], d["B"], d["gamma"], d["beta"], extras, a)


def _close(got, want, tol, what: str) -> None:
    got = torch.as_tensor(np.asarray(got.detach().cpu() if torch.is_tensor(got) else got)).double()
    assert not torch.isnan(got).any() or torch.isnan(want).any(), f"{what}: NaN in the output"
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{what}\n{m}")


@pytest.mark.parametrize("where", ["pre", "post"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("chain", CHAINS)
def test_step_on_the_cuda_kernels_and_pytorch_ops(chain, op, where):
    from fusedops.plugins import torch_ops

    torch_ops.load()
    a = _attrs(op, where, chain)
    t = _inputs(op, chain, where)
    want = _reference(op, a, t)
    x = {k: v.to(DEV) for k, v in t.items()}
    extras = [x["extra_0"], x["extra_1"]]
    pre, post = a.onnx_attrs(op)["pre"], a.onnx_attrs(op)["post"]
    label = f"{op} {where}={chain!r}"
    if op == "GroupNormAct":
        _close(abi.groupnorm_act_cuda(x["X"], x["gamma"], x["beta"], extras, a), want, TOL32, f"CUDA kernels, {label}")
        got = torch_ops.group_norm_act(x["X"], x["gamma"], x["beta"], extras, 4, 1e-5, pre, post, "")
    else:
        _close(abi.gemm_groupnorm_act_cuda(x["X"], x["W"], x["B"], x["gamma"], x["beta"], extras, a, 0), want, TOL32,
               f"CUDA kernels, {label}")
        got = torch_ops.gemm_group_norm_act(x["X"], x["W"], x["B"], x["gamma"], x["beta"], extras, 4, 1e-5, pre,
                                            post, "", 1, 0)
    assert got.is_cuda
    _close(got, want, TOL32, f"PyTorch op (CUDA), {label}")


@pytest.fixture(scope="module")
def fo_cuda():
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
    from fusedops import ort as fo
    from fusedops.errors import FusedopsError

    try:
        fo.library_path()
    except FusedopsError as e:
        pytest.skip(f"libfusedops_ort.so is not built: {str(e).splitlines()[0]} (run `fusedops build-native`)")
    if not fo.library_has_cuda():
        pytest.skip("libfusedops_ort.so was built without CUDA (rebuild with FUSEDOPS_CUDA=ON)")
    return fo


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("chain", CHAINS)
def test_step_on_the_ort_library_cuda_ep(chain, op, fo_cuda):
    from onnx import TensorProto, helper

    a = _attrs(op, "post", chain)
    t = {k: v.numpy() for k, v in _inputs(op, chain, "post").items()}
    node = helper.make_node(op, list(t), ["Y"], domain=catalog.DOMAIN, **a.onnx_attrs(op))
    graph = helper.make_graph([node], "step", [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape)
                                               for n, v in t.items()],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 20),
                                                                   helper.make_opsetid(catalog.DOMAIN, 1)])
    sess = fo_cuda.session(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"], allow_tf32=False)
    before = fo_cuda.kernel_calls("cuda")
    (y,) = sess.run(None, t)
    assert fo_cuda.kernel_calls("cuda") > before, "the CUDA kernels did not run"
    _close(y, _reference(op, a, {k: torch.from_numpy(v) for k, v in t.items()}), TOL32, f"ORT CUDA EP, {op} {chain}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("where", ["pre", "post"])
def test_softsign_16bit_no_worse_than_eager(dtype, where):
    g = torch.Generator().manual_seed(19)
    x = (torch.randn(4, 32, 9, 11, generator=g) * 2 + 0.3).to(DEV, dtype)
    gamma = (torch.rand(32, generator=g) + 0.5).to(DEV, dtype)
    beta = (torch.randn(32, generator=g) * 0.5).to(DEV, dtype)
    a = catalog.parse_attrs("GroupNormAct", {"num_groups": 8, where: "softsign"})
    want = catalog.group_norm_act_reference(x.double().cpu(), gamma.double().cpu(), beta.double().cpu(), [], a)
    if where == "pre":
        eager = F.group_norm(F.softsign(x), 8, gamma, beta, 1e-5)
    else:
        eager = F.softsign(F.group_norm(x, 8, gamma, beta, 1e-5))
    ours = abi.groupnorm_act_cuda(x, gamma, beta, [], a)
    assert ours.dtype == dtype
    err_ours = (ours.double().cpu() - want).abs().max().item()
    err_eager = (eager.double().cpu() - want).abs().max().item()
    assert err_ours <= 1.5 * err_eager + ULP16[dtype], f"{dtype} {where}: ours {err_ours:.3g}, eager {err_eager:.3g}"
