from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from traceql.classify import PATTERNS, KernelClass, classify, classify_names, short_name

H200_NAMES = (Path(__file__).parent / "data" / "kernel_names_h200.txt").read_text().splitlines()
KINDS = {"compute", "comm", "memory", "other"}


def test_h200_file_is_the_expected_capture():
    assert len(H200_NAMES) == 65
    assert all(n.strip() for n in H200_NAMES)


@pytest.mark.parametrize("name", H200_NAMES)
def test_every_h200_name_classifies(name):
    c = classify(name)
    assert isinstance(c, KernelClass)
    assert c.kind in KINDS
    # Every library kernel in the capture is one we have a row for; the project's own test kernels get none.
    assert (c.family == "other") == (name in ("spin_hold_sms", "half_sm_stream")), name
    assert short_name(name) and "(" not in short_name(name) and "<" not in short_name(name)


def test_h200_nccl_kernels_parse():
    got = {short_name(n): classify(n) for n in H200_NAMES if n.startswith("nccl")}
    assert got == {
        "ncclDevKernel_AllGather_RING_LL": KernelClass("comm", "nccl", "all_gather", "ring", "ll", None, None),
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL": KernelClass(
            "comm", "nccl", "all_reduce", "ring", "ll", "bf16", "sum"),
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": KernelClass(
            "comm", "nccl", "all_reduce", "ring", "ll", "f32", "sum"),
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL": KernelClass(
            "comm", "nccl", "reduce_scatter", "ring", "ll", "bf16", "sum"),
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL": KernelClass(
            "comm", "nccl", "reduce_scatter", "ring", "ll", "f32", "sum"),
    }


def test_h200_non_nccl_names_are_not_comm():
    others = [n for n in H200_NAMES if not n.startswith("nccl")]
    assert len(others) == 60
    for n in others:
        c = classify(n)
        assert c.kind != "comm", n
        assert (c.comm_op, c.comm_algo, c.comm_proto, c.comm_dtype, c.comm_redop) == (None,) * 5


def _families(prefix: str) -> set[tuple[str, str]]:
    hits = {(classify(n).kind, classify(n).family) for n in H200_NAMES if short_name(n).startswith(prefix)}
    assert hits, prefix
    return hits


@pytest.mark.parametrize(
    "prefix,expected",
    [
        ("nvjet_", {("compute", "gemm")}),
        ("sm90_xmma_gemm_", {("compute", "gemm")}),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_", {("compute", "attention")}),
        ("compute_dot_do_o", {("compute", "attention")}),
        ("multi_tensor_apply_kernel", {("compute", "optimizer")}),
        ("vectorized_layer_norm_kernel", {("compute", "norm")}),
        ("layer_norm_grad_input", {("compute", "norm")}),
        ("GammaBetaBackward", {("compute", "norm")}),
        ("cunn_SoftMax", {("compute", "softmax")}),
        ("DeviceRadixSort", {("compute", "sort")}),
        ("chunk_cat_cuda_kernel", {("memory", "copy")}),
        ("split_with_sizes_copy_out", {("memory", "copy")}),
        ("vectorized_gather_kernel", {("memory", "copy")}),
        ("reduce_kernel", {("compute", "reduce")}),
        # the project's own test kernels get no special pattern: a name no row knows is other/other
        ("spin_hold_sms", {("other", "other")}),
        ("half_sm_stream", {("other", "other")}),
        ("compute_grad_weight", {("compute", "embedding")}),
    ],
)
def test_h200_families(prefix, expected):
    assert _families(prefix) == expected


def test_elementwise_kernels_split_by_functor():
    def fam(fragment: str) -> tuple[str, str]:
        (name,) = [n for n in H200_NAMES if fragment in n and "elementwise_kernel<" in n]
        return classify(name).kind, classify(name).family

    assert fam("FillFunctor<float>") == ("memory", "memset")
    assert fam("CUDAFunctor_add<float>") == ("compute", "elementwise")
    assert fam("GeluCUDAKernelImpl") == ("compute", "elementwise")
    assert fam("bfloat16_copy_kernel_cuda") == ("memory", "copy")
    assert fam("lambda(c10::BFloat16) (instance 1)]>(at::TensorIteratorBase") == ("memory", "copy")


@pytest.mark.parametrize(
    "name,op,algo,proto,dtype,redop",
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
         "all_reduce", "ring", "ll", "f32", "sum"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
         "send_recv", "ring", "simple", "i8", "sum"),
        ("void ncclKernel_AllReduce_TREE_LL128_Sum___nv_bfloat16(ncclDevComm*, unsigned long, ncclWork*)",
         "all_reduce", "tree", "ll128", "bf16", "sum"),
        ("ncclKernel_AllReduce_COLLNET_DIRECT_SIMPLE_PreMulSum_uint64_t(ncclDevComm*, unsigned long, ncclWork*)",
         "all_reduce", "collnet_direct", "simple", "u64", "premulsum"),
        ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "generic", None, None, None, None),
        ("ncclDevKernel_Generic", "generic", None, None, None, None),
        ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<(unsigned long)4096>)", "generic", None, None, None, None),
        ("ncclSymkDevKernel_AllGather_LL", "all_gather", None, None, None, None),
        ("ncclSymkDevKernel_AllReduce_AGxLL_R_bf16", "all_reduce", None, None, "bf16", None),
        ("ncclSymkDevKernel_ReduceScatter_LDMC_sum_f8e4m3(ncclSymkDevWorkArgs4K)",
         "reduce_scatter", None, None, "f8e4m3", "sum"),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter", "ring", "ll", "f32", "sum"),
        ("ncclDevKernel_AllReduce_Sum_f16_TREE_LL128", "all_reduce", "tree", "ll128", "f16", "sum"),
        ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_SIMPLE", "all_reduce", "nvls", "simple", "bf16", "sum"),
        ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_TREE_SIMPLE", "all_reduce", "nvls_tree", "simple", "bf16", "sum"),
        ("ncclDevKernel_AllGather_PAT_SIMPLE", "all_gather", "pat", "simple", None, None),
        ("ncclDevKernel_Broadcast_RING_LL", "broadcast", "ring", "ll", None, None),
        ("ncclAllReduceRingLLKernel_sum_f16(CollectiveArgs)", "all_reduce", "ring", "ll", "f16", "sum"),
        ("_Z23ncclDevKernel_Generic_424ncclDevKernelArgsStorageILm4096EE", "generic", None, None, None, None),
        ("ncclDevKernel_AllReduce_Weird_xx9_FOO", "all_reduce", None, None, None, None),
    ],
)
def test_nccl_generations(name, op, algo, proto, dtype, redop):
    assert classify(name) == KernelClass("comm", "nccl", op, algo, proto, dtype, redop)


@pytest.mark.parametrize(
    "name,family,op",
    [
        ("void nvshmemi_transfer_rma_nbi_kernel<int>(int *)", "nvshmem", None),
        ("nvshmem_barrier_all_kernel", "nvshmem", None),
        ("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, (int)16>(T1 *, unsigned long)",
         "symm_mem", "all_reduce"),
        ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, (int)8>(float *, unsigned long)",
         "symm_mem", "all_reduce"),
        ("void deep_ep::intranode::dispatch<(int)8>(int4 *, float *)", "deepep", None),
        ("void vllm::cross_device_reduce_1stage<c10::BFloat16, (int)8>(vllm::RankData *)", "custom_allreduce",
         "all_reduce"),
    ],
)
def test_other_comm_libraries(name, family, op):
    c = classify(name)
    assert (c.kind, c.family, c.comm_op) == ("comm", family, op)


@pytest.mark.parametrize(
    "name,kind,family",
    [
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(T1::Params)",
         "compute", "gemm"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn", "compute", "gemm"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int)", "compute", "norm"),
        ("void at::native::(anonymous namespace)::rms_norm_kernel<float>(int)", "compute", "norm"),
        ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>(Flash_fwd_params)", "compute", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel::Params)",
         "compute", "attention"),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>(float *)",
         "memory", "copy"),
        ("[CUDA memset]", "memory", "memset"),
        ("[CUDA memcpy Device-to-Device]", "memory", "copy"),
        ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float>(long *)",
         "compute", "embedding"),
        ("triton_poi_fused_add_mul_0", "compute", "elementwise"),
        ("triton_red_fused_sum_1", "compute", "reduce"),
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "compute", "conv"),
        ("some_kernel_we_have_never_seen", "other", "other"),
        ("", "other", "other"),
    ],
)
def test_other_families(name, kind, family):
    c = classify(name)
    assert (c.kind, c.family) == (kind, family)
    assert c.comm_op is None


@pytest.mark.parametrize(
    "name,expected",
    [
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
         "std::array<char *, 1ul>>(int, T2, T3)", "vectorized_elementwise_kernel"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
         "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
        ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN"),
        ("void (anonymous namespace)::softmax_warp_forward<float, float, 10>(float *, const float *)",
         "softmax_warp_forward"),
        ("void <unnamed>::elementwise_kernel_with_index<int, at::native::arange_cuda_out(const c10::Scalar &)::"
         "[lambda() (instance 1)]::operator ()() const::[lambda(long) (instance 1)]>(T1, T2, "
         "function_traits<T2>::result_type *)", "elementwise_kernel_with_index"),
        ("at::native::foo(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const", "operator()"),
        ("void foo::bar<int>::baz<float, std::pair<int, long>>(int (*)(int), T1)", "baz"),
        ("std::enable_if<(bool)1, void>::type at::native::kernel_x<float>(float *)", "kernel_x"),
        ("void at::native::<unnamed>::qux(void)", "qux"),
        ("void kernel_with_clone(int) [clone .kd]", "kernel_with_clone"),
        ("plain_kernel", "plain_kernel"),
    ],
)
def test_short_name(name, expected):
    assert short_name(name) == expected


@pytest.mark.parametrize("name", ["(", ")", "<<<", "void foo<(int)", ">>>)", "::", "operator ()", "[lambda() ("])
def test_malformed_names_never_raise(name):
    assert isinstance(short_name(name), str)
    assert classify(name).kind in KINDS


def test_classify_names_table():
    names = [
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
        "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
        None,
        "spin_hold_sms",
    ]
    t = classify_names(names)
    cols = ["name", "kind", "family", "comm_op", "comm_algo", "comm_proto", "comm_dtype", "comm_redop"]
    assert t.column_names == cols
    assert all(t.schema.field(c).type == pa.string() for c in cols)
    assert t.num_rows == 3
    rows = t.to_pylist()
    assert rows[0] == {"name": names[0], "kind": "comm", "family": "nccl", "comm_op": "all_gather",
                       "comm_algo": "ring", "comm_proto": "ll", "comm_dtype": None, "comm_redop": None}
    assert [r["family"] for r in rows] == ["nccl", "gemm", "other"]
    assert rows[1]["comm_op"] is None


def test_classify_names_empty_and_full_file():
    assert classify_names([]).num_rows == 0
    t = classify_names(H200_NAMES)
    assert t.num_rows == 65
    assert t.column("kind").to_pylist().count("comm") == 5


def test_patterns_table_shape():
    assert PATTERNS and all(kind in KINDS and family for _, kind, family in PATTERNS)
    assert PATTERNS[0][1:] == ("comm", "nccl")
