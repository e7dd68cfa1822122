"""Resource keys as hypothesis generates them: near misses of the shared-GPU names built by edits,
the real names, other real resources and junk. Shared by the backstop's and the webhooks'
matchConditions' equivalence tests."""

from __future__ import annotations

from hypothesis import strategies as st

from policies.model.settings import ResourceNames
from tests.support.near_miss_cases import NEAR_MISSES, NOT_NEAR_MISSES

# The resource names come from the settings' one list (ResourceNames): a name declared there is
# generated here too, so the property tests exercise the rules on it.
DEFAULT_RESOURCES = ResourceNames()
MEM, CORE = DEFAULT_RESOURCES.gpu_mem, DEFAULT_RESOURCES.gpu_core
WHOLE, TOPOLOGY = DEFAULT_RESOURCES.gpu_exclusive, DEFAULT_RESOURCES.gpu_topology
COUNT = DEFAULT_RESOURCES.gpu_count
# Every resource name, and those a container asks for (all but a node's count).
GPU_NAMES, ASKED = DEFAULT_RESOURCES.names(), DEFAULT_RESOURCES.asked()
ALLOWED = ["aliyun.com/fpga", "aliyun.com/npu", "aliyun.com/rdma"]
STANDARD = ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "pods"]
DOMAINS = ["aliyun.com", "alibaba.com", "alicloud.com", "aliyun.cn", "aliyuncs.com", "alibabacloud.com",
           "nvidia.com", "example.com", "kubernetes.io", "ALIYUN.COM", " aliyun.com ", "aliyun.com\t", "a/aliyun.com"]
NAMES = ["gpu-mem", "gpu-memory", "gpu_mem", "GPU-Mem", "gpumem", "gpu-core", "gpu-core.percentage",
         "gpu-core-percentage", "gpu-core.percent", "gpu-core-percent-value", "GPUCorePercentage", "gpu", "gpu-count",
         "fpga", "cpu", "memory", "mem", "gpu-mem-memory", "percentage", "gpucore", "vgpu-mem", "gpumemorymemory",
         "gpu-memory-percentage", "gpu.core.percentagepercentage", "gpu-cor-percentage", "gpu-kore.percentage",
         "gpu_ore_percentage", "xpu-core-percentage", "gpu-mem-ory", "gpu-mememoryory"]
EDIT_CHARS = "gpumeoryctnaGPUME-_. 19x/"


@st.composite
def edited(draw: st.DrawFn, text: str, most: int) -> str:
    """``text`` after up to ``most`` random insertions, deletions and replacements."""
    chars = list(text)
    for _ in range(draw(st.integers(0, most))):
        at = draw(st.integers(0, len(chars)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        if op == "insert" or at == len(chars):
            chars.insert(at, draw(st.sampled_from(EDIT_CHARS)))
        elif op == "delete":
            del chars[at]
        else:
            chars[at] = draw(st.sampled_from(EDIT_CHARS))
    return "".join(chars)


@st.composite
def near_keys(draw: st.DrawFn) -> str:
    """A key built like a near miss: a domain (listed, edited, or none) and a name part (edited)."""
    domain = draw(st.sampled_from(DOMAINS).flatmap(lambda d: edited(d, 3)))
    name = draw(st.sampled_from(NAMES).flatmap(lambda n: edited(n, 2)))
    name = draw(st.sampled_from([str, str.upper, str.title, str.swapcase]))(name)
    form = draw(st.sampled_from(["domain", "domain", "domain", "bare", "slash"]))
    return f"{domain}/{name}" if form == "domain" else (name if form == "bare" else f"/{name}")


RESOURCE_KEYS = st.one_of(
    near_keys(),
    st.sampled_from([*GPU_NAMES, *ALLOWED, *STANDARD, *NOT_NEAR_MISSES,
                     *(key for key, _, _ in NEAR_MISSES)]),
    st.text(st.sampled_from("abcgmopuyGMPU0123-_./ \t"), max_size=24),  # junk, in the characters that matter
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=24),  # any printable ASCII
)


