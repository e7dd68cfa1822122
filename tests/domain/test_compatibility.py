"""A node's components against the version matrix of ACK "Manage the shared GPU scheduling component"
(rule GN007), in process: each component fits, is known incompatible, or is unknown, word for word,
with the shipped matrix (policies/data/versions.yaml) and with matrices an operator may configure.
The rule's verdicts: tests/domain/test_node_rules.py and tests/domain/test_node_messages.py."""

from __future__ import annotations

from typing import Any

import pytest

from policies.model.catalog import VersionMatrix, default_catalog
from policies.model.cluster_manifests import node_from_manifest
from policies.model.compatibility import Mismatch, node_mismatches, version_tuple
from tests.support.cluster_objects import node
from webhook.settings import Settings

SETTINGS = Settings()
NAMES = SETTINGS.names
LABELS = SETTINGS.nodes.driver_version_labels
MATRIX = default_catalog().versions
RUNTIMES = "docker >= 19.03.5, containerd >= 1.4.3"
OS = "Alibaba Cloud Linux 3, 2; CentOS 7.6, 7.7, 7.9; Ubuntu 22.04"
NO_DRIVER = ("NVIDIA driver", "unknown", "NVIDIA driver version not shown (no label "
             "ack.aliyun.com/nvidia-driver-version or aliyun.accelerator/nvidia_driver_version; needs 418.87.01 "
             "or later)")
GPUS = "P-series, T-series, V-series, A-series, H-series"


def found(mode: str = "cgpu", matrix: VersionMatrix = MATRIX, **node_args: Any) -> list[tuple[str, str, str]]:
    info = node_from_manifest(node("gpu-1", mode=mode, **node_args), NAMES)
    return [(m.component, m.status, m.message) for m in node_mismatches(info, mode, matrix, NAMES, LABELS)]


@pytest.mark.parametrize(("text", "numbers"), [
    ("v1.28.3-aliyun.1", (1, 28, 3)), ("19.03.5", (19, 3, 5)), ("1.20", (1, 20)), ("470", (470,)),
    ("containerd 1.6.20 (rc)", (1, 6, 20)), ("release-2", (2,)), ("v1.", (1,)), ("", None), ("latest", None),
])
def test_a_version_is_the_first_dotted_number(text, numbers):
    assert version_tuple(text) == numbers


def test_a_node_that_fits_has_no_mismatch():
    assert found() == []
    assert found("core_mem", kubelet="v1.20.0") == []
    assert found(runtime="docker://19.03.5", driver="418.87.01", os_image="CentOS Linux 7.9.2009 (Core)") == []
    assert found(os_image="Ubuntu 22.04.3 LTS", card_name="NVIDIA-A10") == []


def test_a_mode_the_matrix_does_not_cover_is_not_judged():
    assert found("share", kubelet="", runtime="", driver=None, os_image="", card_name=None) == []


@pytest.mark.parametrize(("args", "expected"), [
    ({"mode": "core_mem", "kubelet": "v1.19.16-aliyun.1"},
     ("kubelet", "incompatible", "kubelet v1.19.16-aliyun.1 is older than 1.20; upgrade to 1.20 or later")),
    ({"mode": "core_mem", "kubelet": ""}, ("kubelet", "unknown", "kubelet version not reported (needs 1.20 or later)")),
    ({"mode": "core_mem", "kubelet": "devel"},
     ("kubelet", "unknown", "kubelet 'devel' has no version number the matrix can compare (needs 1.20 or later)")),
    ({"runtime": "containerd://1.4.2"},
     ("containerd", "incompatible", "containerd 1.4.2 is older than 1.4.3; upgrade to 1.4.3 or later")),
    ({"runtime": "docker://19.03.4"},
     ("docker", "incompatible", "docker 19.03.4 is older than 19.03.5; upgrade to 19.03.5 or later")),
    ({"runtime": ""}, ("container runtime", "unknown", f"container runtime not reported (supported: {RUNTIMES})")),
    ({"runtime": "cri-o://1.28.1"},
     ("container runtime", "unknown",
      f"container runtime cri-o://1.28.1 is not in the matrix (supported: {RUNTIMES})")),
    ({"runtime": "containerd"},
     ("container runtime", "unknown", f"container runtime containerd is not in the matrix (supported: {RUNTIMES})")),
    ({"runtime": "containerd://"},
     ("container runtime", "unknown", f"container runtime containerd:// is not in the matrix (supported: {RUNTIMES})")),
    ({"driver": "418.87.00"},
     ("NVIDIA driver", "incompatible",
      "NVIDIA driver 418.87.00 is older than 418.87.01; upgrade to 418.87.01 or later")),
    ({"driver": None}, NO_DRIVER),
    ({"driver": ""}, NO_DRIVER),
    ({"card_name": None}, ("GPU", "unknown", f"GPU model not shown (no label aliyun.accelerator/nvidia_name; "
                                             f"supported: {GPUS})")),
    ({"card_name": "Tesla-K80"},
     ("GPU", "incompatible", f"GPU Tesla-K80 is K-series, not supported (supported: {GPUS})")),
    ({"card_name": "GeForce-RTX-4090"},
     ("GPU", "unknown", f"GPU GeForce-RTX-4090 has no series the matrix knows (supported: {GPUS})")),
    ({"os_image": ""}, ("OS image", "unknown", f"OS image not reported (supported: {OS})")),
    ({"os_image": "Debian GNU/Linux 12 (bookworm)"},
     ("OS image", "unknown", f"OS image 'Debian GNU/Linux 12 (bookworm)' is not in the matrix (supported: {OS})")),
    ({"os_image": "CentOS Linux 7.5.1804 (Core)"},
     ("OS image", "incompatible", "OS image 'CentOS Linux 7.5.1804 (Core)' is not a supported CentOS release "
                                  "(supported: 7.6, 7.7, 7.9)")),
    ({"os_image": "Ubuntu 20.04.6 LTS"},
     ("OS image", "incompatible",
      "OS image 'Ubuntu 20.04.6 LTS' is not a supported Ubuntu release (supported: 22.04)")),
    ({"os_image": "CentOS Linux 7 (Core)"},
     ("OS image", "unknown", "OS image 'CentOS Linux 7 (Core)' does not show which CentOS release it is "
                             "(supported: 7.6, 7.7, 7.9)")),
    ({"os_image": "Ubuntu 18.04.6 LTS"},
     ("OS image", "unknown", "OS image 'Ubuntu 18.04.6 LTS' is not in the cGPU version matrix of \"Manage the shared "
                             "GPU scheduling component\" (22.04), but \"Shared GPU scheduling in registered clusters\" "
                             "supports Ubuntu 16.04, 18.04 for its nodes")),
    ({"os_image": "Alibaba Cloud Linux 3.2104 U10 (Container Optimized)"},
     ("OS image", "unknown", "OS image 'Alibaba Cloud Linux 3.2104 U10 (Container Optimized)': the container-optimized "
                             "edition of Alibaba Cloud Linux 3 needs ack-ai-installer v1.12.6 or later")),
], ids=lambda v: "" if isinstance(v, tuple) else str(v))
def test_each_component_word_for_word(args, expected):
    assert found(**args) == [expected]


def test_every_mismatch_of_a_node_is_listed_in_order():
    assert [(c, s) for c, s, _ in found("core_mem", kubelet="", runtime="", driver=None, card_name=None,
                                        os_image="")] == [
        ("kubelet", "unknown"), ("container runtime", "unknown"), ("NVIDIA driver", "unknown"), ("GPU", "unknown"),
        ("OS image", "unknown")]


def test_the_driver_is_read_from_the_first_label_that_shows_it():
    labels = {"aliyun.accelerator/nvidia_driver_version": "535.161.08"}
    assert found(driver=None, labels=labels) == []
    assert found(driver="418.87.00", labels=labels)[0][2].startswith("NVIDIA driver 418.87.00 is older")
    assert found(driver="", labels=labels) == []  # an empty first label: the next one shows it
    assert found(driver=None, labels={"aliyun.accelerator/nvidia_driver_version": "410.1"})[0][1] == "incompatible"


def _matrix(**fields: Any) -> VersionMatrix:
    return VersionMatrix(modes=("cgpu",), **fields)


def test_a_matrix_that_says_nothing_checks_nothing():
    assert found(matrix=_matrix(), kubelet="", runtime="", driver=None, card_name=None, os_image="") == []
    # a kubelet minimum of null: no minimum known
    assert found(matrix=_matrix(kubelet={"cgpu": None}), kubelet="") == []


def test_a_configured_matrix_is_what_is_judged():
    matrix = _matrix(kubelet={"cgpu": "1.26"}, container_runtime={"containerd": "1.7"}, driver="535",
                     gpu_series={"supported": ["A", "H"], "match": "^(?:NVIDIA[- ])?(?P<series>[A-Z])\\d+"},
                     os_images=[{"family": "Ubuntu", "match": "^Ubuntu (?P<version>\\d+(?:\\.\\d+)*)",
                                 "supported": ["22.04", "24"]}])
    assert found(matrix=matrix, kubelet="v1.26.0", runtime="containerd://1.7.0", driver="535.54",
                 card_name="NVIDIA-H100", os_image="Ubuntu 24.04 LTS") == []
    assert found(matrix=matrix, kubelet="v1.25.9", runtime="containerd://1.6.9", driver="470.1",
                 card_name="NVIDIA-V100", os_image="Ubuntu 20.04") == [
        ("kubelet", "incompatible", "kubelet v1.25.9 is older than 1.26; upgrade to 1.26 or later"),
        ("containerd", "incompatible", "containerd 1.6.9 is older than 1.7; upgrade to 1.7 or later"),
        ("NVIDIA driver", "incompatible", "NVIDIA driver 470.1 is older than 535; upgrade to 535 or later"),
        ("GPU", "incompatible", "GPU NVIDIA-V100 is V-series, not supported (supported: A-series, H-series)"),
        ("OS image", "incompatible", "OS image 'Ubuntu 20.04' is not a supported Ubuntu release "
                                     "(supported: 22.04, 24)")]
    # a minimum the matrix cannot read is unknown, never a crash
    unreadable = _matrix(driver="latest")
    assert found(matrix=unreadable, driver="535.1") == [
        ("NVIDIA driver", "unknown", "NVIDIA driver '535.1' has no version number the matrix can compare "
                                     "(needs latest or later)")]


def test_a_release_is_matched_on_its_leading_numbers():
    matrix = _matrix(os_images=[{"family": "Alibaba Cloud Linux", "supported": ["3", "2.1903"],
                                 "match": "^Alibaba Cloud Linux(?: release)? (?P<version>\\d+(?:\\.\\d+)*)"}])
    assert found(matrix=matrix, os_image="Alibaba Cloud Linux release 2.1903 LTS (Hunting Beagle)") == []
    assert found(matrix=matrix, os_image="Alibaba Cloud Linux 3.2104") == []
    assert found(matrix=matrix, os_image="Alibaba Cloud Linux 30.1")[0][1] == "incompatible"
    assert found(matrix=matrix, os_image="Alibaba Cloud Linux 2.1911")[0][1] == "incompatible"
    assert found(matrix=matrix, os_image="Alibaba Cloud Linux 2")[0][1] == "unknown"  # which 2.x: not shown
    # a family whose match has no version group: no release shown
    no_group = _matrix(os_images=[{"family": "Flatcar", "match": "^Flatcar", "supported": ["3602"]}])
    assert found(matrix=no_group, os_image="Flatcar Container Linux 3602.2.1")[0][:2] == ("OS image", "unknown")


def test_another_page_supports_only_the_releases_it_lists():
    matrix = _matrix(os_images=[{"family": "Ubuntu", "match": "^Ubuntu (?P<version>\\d+(?:\\.\\d+)*)",
                                 "supported": ["22.04"]}],
                     os_images_elsewhere=[
                         {"family": "Ubuntu", "match": "^Ubuntu (?P<version>\\d+(?:\\.\\d+)*)",
                          "supported": ["18.04"], "page": "Shared GPU scheduling in registered clusters"},
                         {"family": "Ubuntu LTS", "match": "^Ubuntu", "supported": ["20.04"], "page": "No version"},
                         {"family": "Debian", "match": "^Debian (?P<version>\\d+)", "supported": ["20"],
                          "page": "Other"}])
    assert found(matrix=matrix, os_image="Ubuntu 18.04.6 LTS")[0][1] == "unknown"
    assert found(matrix=matrix, os_image="Ubuntu 18.10")[0][1] == "incompatible"
    assert found(matrix=matrix, os_image="Ubuntu 20.04")[0][1] == "incompatible"  # "No version" shows none
    assert found(matrix=matrix, os_image="Ubuntu 1")[0][1] == "incompatible"


def test_notes_are_warned_only_on_a_supported_release():
    matrix = _matrix(os_images=[{"family": "Ubuntu", "match": "^Ubuntu (?P<version>\\d+(?:\\.\\d+)*)",
                                 "supported": ["22.04"]}],
                     os_notes=[{"match": "Pro", "message": "Ubuntu Pro needs a licence"},
                               {"match": "LTS", "message": "long-term support"}])
    assert found(matrix=matrix, os_image="Ubuntu 22.04 LTS Pro") == [
        ("OS image", "unknown", "OS image 'Ubuntu 22.04 LTS Pro': Ubuntu Pro needs a licence"),
        ("OS image", "unknown", "OS image 'Ubuntu 22.04 LTS Pro': long-term support")]
    assert found(matrix=matrix, os_image="Ubuntu 22.04") == []
    assert [s for _, s, _ in found(matrix=matrix, os_image="Ubuntu 20.04 LTS Pro")] == ["incompatible"]


def test_a_mismatch_is_a_record_of_what_was_found():
    assert Mismatch("GPU", "unknown", "x") == Mismatch("GPU", "unknown", "x")
