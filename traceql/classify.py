"""Classify CUDA kernel names into a kind, a family and, for collectives, the NCCL parameters.

Names are the demangled C++ names Nsight Systems records. :data:`PATTERNS` is searched against the
full name, top to bottom, and the first row that matches wins, so specific rows sit above general
ones (a ``FillFunctor`` elementwise kernel is a memset, a ``multi_tensor_apply`` with a ``Copy``
functor is the optimizer). Anything unmatched is ``other``/``other``.

====================  ========  ================  ==============================================
row (in order)        kind      family            matches
====================  ========  ================  ==============================================
NCCL                  comm      nccl              ncclKernel_*, ncclDevKernel_*, ncclSymkDevKernel_*
RCCL                  comm      rccl              rccl*
NVSHMEM               comm      nvshmem           nvshmem*, nvshmemi_*
symmetric memory      comm      symm_mem          torch symm_mem / symmetric_memory, multimem*
DeepEP                comm      deepep            deep_ep::*
MSCCL++               comm      mscclpp           mscclpp*
custom all-reduce     comm      custom_allreduce  vLLM/TRT-LLM one/two-shot, cross_device_reduce
attention             compute   attention         flash, sdpa, fmha, attention; cuDNN SDPA helpers
optimizer             compute   optimizer         multi_tensor_apply, adam, fused_sgd
conv                  compute   conv              conv*, implicit gemm, fprop/dgrad/wgrad
gemm                  compute   gemm              nvjet_*, *xmma_gemm*, cutlass/ampere *gemm*, gemv
norm                  compute   norm              layer/rms/batch/group norm, GammaBeta (LN bwd)
softmax               compute   softmax           *softmax*
loss                  compute   loss              nll_loss, cross_entropy
embedding             compute   embedding         embedding and its backward segment kernels
sort                  compute   sort              radix sort, sort, topk
scan                  compute   scan              cub scan / compact / select / unique, cumsum
fill                  memory    memset            FillFunctor, fill, memset
copy                  memory    copy              copy, memcpy, cat, split, gather, scatter, transpose
reduce                compute   reduce            reduce_kernel, reduction, triton_red/per
elementwise           compute   elementwise       elementwise, pointwise, triton_poi, activations
====================  ========  ================  ==============================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa

_I = re.IGNORECASE
# (regex, kind, family); first match on the full name wins.
PATTERNS: list[tuple[re.Pattern[str], str, str]] = [
    # Not preceded by a letter, so itanium-mangled names (_Z23ncclDevKernel...) still match.
    (re.compile(r"(?<![A-Za-z])nccl\w*Kernel"), "comm", "nccl"),
    (re.compile(r"(?<![A-Za-z])rccl"), "comm", "rccl"),
    (re.compile(r"(?<![A-Za-z])nvshmem"), "comm", "nvshmem"),
    (re.compile(r"symm(?:etric)?_mem|multimem", _I), "comm", "symm_mem"),
    (re.compile(r"deep_?ep", _I), "comm", "deepep"),
    (re.compile(r"mscclpp", _I), "comm", "mscclpp"),
    (re.compile(r"cross_device_reduce|custom_?all_?reduce|(?:one|two)_?shot_?all_?reduce|allreduce_fusion", _I),
     "comm", "custom_allreduce"),
    # cuDNN's SDPA backward launches dO.O and dQ-conversion helpers next to the flash kernel.
    (re.compile(r"flash|sdpa|fmha|attention|compute_dot_do_o|convert_dq_to", _I), "compute", "attention"),
    (re.compile(r"multi_tensor_apply|adam|fused_sgd", _I), "compute", "optimizer"),
    # Above gemm: cuDNN conv kernels are "implicit gemm" and would otherwise land in gemm.
    (re.compile(r"conv(?:olution|olve|\dd|_)|implicit_?gemm|winograd|_(?:fprop|dgrad|wgrad)_", _I), "compute", "conv"),
    (re.compile(r"nvjet|gemm|gemv|splitkreduce|matmul|triton_tem_fused_(?:addmm|mm|bmm)", _I), "compute", "gemm"),
    # Spelled out so "normal_kernel" (RNG) does not count as a norm.
    (re.compile(r"(?:layer|rms|batch|group|instance)_?norm|GammaBeta", _I), "compute", "norm"),
    (re.compile(r"softmax", _I), "compute", "softmax"),
    (re.compile(r"nll_loss|cross_entropy", _I), "compute", "loss"),
    (re.compile(r"embedding|compute_grad_weight|sum_and_scatter|partials?_(?:per_)?segment", _I),
     "compute", "embedding"),
    (re.compile(r"sort|topk", _I), "compute", "sort"),
    (re.compile(r"Device(?:Scan|Compact|Select)|UniqueByKey|cumsum", _I), "compute", "scan"),
    (re.compile(r"fill|memset", _I), "memory", "memset"),
    (re.compile(r"copy|memcpy|\bcat_|chunk_cat|split_with_sizes|gather|scatter|transpose", _I), "memory", "copy"),
    (re.compile(r"reduce|reduction|triton_(?:red|per)_", _I), "compute", "reduce"),
    (re.compile(r"elementwise|pointwise|triton_poi_|gelu|silu|relu|sigmoid|tanh", _I), "compute", "elementwise"),
]


@dataclass(frozen=True)
class KernelClass:
    kind: str
    family: str
    comm_op: str | None = None
    comm_algo: str | None = None
    comm_proto: str | None = None
    comm_dtype: str | None = None
    comm_redop: str | None = None


# NCCL name token (lower case) -> (field, normalized value). Old and new generations order the
# tokens differently, so tokens are recognized by vocabulary, not by position.
_VOCAB: dict[str, tuple[str, str]] = {}
for _field, _table in {
    "op": {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
           "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send_recv", "send": "send",
           "recv": "recv", "alltoall": "all_to_all", "generic": "generic"},
    # Before NCCL 2.12 the chain variant was the only CollNet and was spelled plain COLLNET.
    "algo": {"ring": "ring", "tree": "tree", "collnet_direct": "collnet_direct", "collnet_chain": "collnet_chain",
             "collnet": "collnet_chain", "nvls": "nvls", "nvls_tree": "nvls_tree", "pat": "pat"},
    "proto": {"ll": "ll", "ll128": "ll128", "simple": "simple"},
    "redop": {"sum": "sum", "prod": "prod", "min": "min", "max": "max", "premulsum": "premulsum",
              "sumpostdiv": "sumpostdiv", "avg": "avg"},
    "dtype": {"bf16": "bf16", "bfloat16": "bf16", "nv_bfloat16": "bf16", "f16": "f16", "half": "f16",
              "float16": "f16", "f32": "f32", "float": "f32", "float32": "f32", "f64": "f64", "double": "f64",
              "i8": "i8", "int8_t": "i8", "u8": "u8", "uint8_t": "u8", "i32": "i32", "int32_t": "i32",
              "u32": "u32", "uint32_t": "u32", "i64": "i64", "int64_t": "i64", "u64": "u64", "uint64_t": "u64",
              "f8e4m3": "f8e4m3", "nv_fp8_e4m3": "f8e4m3", "fp8_e4m3": "f8e4m3",
              "f8e5m2": "f8e5m2", "nv_fp8_e5m2": "f8e5m2", "fp8_e5m2": "f8e5m2"},
}.items():
    _VOCAB.update({k: (_field, v) for k, v in _table.items()})
# Longest first so "ll128" beats "ll" and "nvls_tree" beats "nvls"; leading "_" swallows "__nv_".
_TOKEN_RE = re.compile(r"_*(" + "|".join(sorted(map(re.escape, _VOCAB), key=len, reverse=True)) + r")(?=_|$)", _I)
_NCCL_RE = re.compile(r"(?<![A-Za-z])nccl(Symk?DevKernel|DevKernel|Kernel)_(\w+)")
# NCCL <= 2.4 folded op, algo and proto into the name: ncclAllReduceRingLLKernel_sum_f16.
_NCCL_CAMEL_RE = re.compile(r"(?<![A-Za-z])nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv)"
                            r"(Ring|Tree|CollNet)?(LL128|LL)?Kernel(?:_(\w+))?")
_GENERIC_OPS = (("reducescatter", "reduce_scatter"), ("allreduce", "all_reduce"), ("allgather", "all_gather"),
                ("alltoall", "all_to_all"), ("broadcast", "broadcast"))


def _parse_tokens(rest: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        m = _TOKEN_RE.match(rest, pos)
        if m:
            field, value = _VOCAB[m.group(1).lower()]
            fields.setdefault(field, value)
            pos = m.end() + 1
        else:
            nxt = rest.find("_", pos + 1)
            if nxt < 0:
                break
            pos = nxt
    return fields


def _parse_comm(short: str) -> dict[str, str]:
    if m := _NCCL_RE.search(short):
        fields = _parse_tokens(m.group(2))
        if m.group(1).startswith("Sym"):
            # Symmetric kernels name a strategy (AGxLL, LDMC, ST), not the RING/TREE x LL/SIMPLE tunables.
            fields.pop("algo", None)
            fields.pop("proto", None)
        return fields
    if m := _NCCL_CAMEL_RE.search(short):
        return _parse_tokens("_".join(g for g in m.groups() if g))
    flat = short.lower().replace("_", "")
    return next(({"op": op} for key, op in _GENERIC_OPS if key in flat), {})


# Spellings that would confuse bracket matching are swapped for single characters and restored at the end.
_MASKS = (("(anonymous namespace)", "\x01"), ("<unnamed>", "\x02"), ("operator ()", "operator\x03"),
          ("operator()", "operator\x03"))
_UNMASK = str.maketrans({"\x01": "(anonymous namespace)", "\x02": "<unnamed>", "\x03": "()"})
_SUFFIX_RE = re.compile(r"(?:\s*\[clone [^\]]*\]|\s+const|\s+volatile|\s*&&?|\s+noexcept)+$")
_OPEN, _CLOSE = "<([", ">)]"


def _opener(s: str) -> int:
    """Index of the bracket that opens the group closing at the end of ``s``, or -1."""
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        if s[i] in _CLOSE:
            depth += 1
        elif s[i] in _OPEN:
            depth -= 1
            if depth == 0:
                return i
    return -1


def short_name(name: str) -> str:
    """Base function name: no return type, namespaces, template arguments or parameter list."""
    s = name.strip()
    for text, mask in _MASKS:
        s = s.replace(text, mask)
    s = _SUFFIX_RE.sub("", s)
    for closer in ")>":
        if s.endswith(closer) and (i := _opener(s)) > 0:
            s = s[:i].rstrip()
    depth, start = 0, 0
    for i, ch in enumerate(s):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif depth == 0 and ch in ": ":
            start = i + 1
    base = s[start:].lstrip("*&").translate(_UNMASK)
    return base or name.strip()


# Traces repeat a few hundred names millions of times; call classify.cache_clear() after editing PATTERNS.
@lru_cache(maxsize=1 << 16)
def classify(name: str) -> KernelClass:
    kind, family = next(((k, f) for rx, k, f in PATTERNS if rx.search(name)), ("other", "other"))
    if kind != "comm":
        return KernelClass(kind, family)
    c = _parse_comm(short_name(name))
    if family == "custom_allreduce":
        c.setdefault("op", "all_reduce")
    return KernelClass(kind, family, c.get("op"), c.get("algo"), c.get("proto"), c.get("dtype"), c.get("redop"))


_COLUMNS = ("kind", "family", "comm_op", "comm_algo", "comm_proto", "comm_dtype", "comm_redop")


def classify_names(names: Iterable[str]) -> pa.Table:
    """One row per distinct name (first-seen order); nulls in the input are skipped."""
    distinct = [n for n in dict.fromkeys(names) if n is not None]
    classes = [classify(n) for n in distinct]
    data = {"name": distinct} | {col: [getattr(c, col) for c in classes] for col in _COLUMNS}
    return pa.table({k: pa.array(v, type=pa.string()) for k, v in data.items()})
