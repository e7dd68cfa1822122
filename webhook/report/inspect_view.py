"""``gpushare inspect`` output: the table of ``kubectl inspect cgpu`` (seeds 001, 002, 003), the
per-pod detail of ``-d``, and JSON.

The table is laid out as Go's tabwriter lays out the original (two spaces between columns,
the last column unpadded) and the dashed line is as long as the original computes it, so
the output is the ACK pages' expected output.
"""

from __future__ import annotations

from typing import Any

from policies.allocation import ClusterUsage, NodeUsage

PADDING = 2
ABSENT = "-"


def tabulate(rows: list[list[str]]) -> list[str]:
    """Align cells in columns: each column as wide as its widest cell plus two spaces."""
    widths: list[int] = []
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            if i == len(widths):
                widths.append(0)
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in rows:
        cells = [cell.ljust(widths[i] + PADDING) for i, cell in enumerate(row[:-1])]
        lines.append(("".join(cells) + (row[-1] if row else "")).rstrip())
    return lines


def dashed_line(first_row: list[str] | None) -> str:
    """The separator as the open-source ``kubectl inspect gpushare`` draws it
    (AliyunContainerService/gpushare-device-plugin, cmd/inspect/display.go, displaySummary):
    as many dashes as the first node's row has bytes before tabwriter aligns it (cells joined
    by tabs, plus the newline), plus 20. No node, no dashes."""
    if first_row is None:
        return ""
    return "-" * (len("\t".join(first_row).encode()) + 1 + 20)


def _core_columns(usage: ClusterUsage) -> bool:
    return any(n.shows_core for n in usage.nodes)


def summary_table(usage: ClusterUsage) -> str:
    """NAME, IPADDRESS, GPUi(Allocated/Total)..., GPU Memory(GiB) [, GPUi Core(%)...] and the cluster total."""
    cards = usage.max_cards
    with_core = _core_columns(usage)
    header = ["NAME", "IPADDRESS", *(f"GPU{i}(Allocated/Total)" for i in range(cards)), "GPU Memory(GiB)"]
    if with_core:
        header += [f"GPU{i} Core(%)" for i in range(cards)]
    rows = [header]
    for node in usage.nodes:
        row = [node.name, node.ip or ABSENT]
        row += [f"{c.used_mem}/{c.total_mem}" for c in node.cards] + [ABSENT] * (cards - len(node.cards))
        row.append(f"{node.used_mem}/{node.total_mem}")
        if with_core:
            core = [f"{c.used_core}/{c.total_core}" for c in node.cards] if node.shows_core else []
            row += core + [ABSENT] * (cards - len(core))
        rows.append(row)
    lines = tabulate(rows)
    lines += [dashed_line(rows[1] if len(rows) > 1 else None), "Allocated/Total GPU Memory In Cluster:",
              f"{usage.used_mem}/{usage.total_mem} ({usage.percent}%)"]
    return "\n".join(lines) + "\n"


def _node_detail(node: NodeUsage) -> list[str]:
    lines = tabulate([["NAME:", node.name], ["IPADDRESS:", node.ip or ABSENT],
                      ["MODE:", f"{node.mode or 'unlabelled'} ({node.placement})"]])
    rows = [["NAME", "NAMESPACE", *(f"GPU{c.index}(Allocated)" for c in node.cards)]]
    for pod in node.pods:
        rows.append([pod.name, pod.namespace, *(str(pod.mem_by_card.get(c.index, 0)) for c in node.cards)])
    percent = node.used_mem * 100 // node.total_mem if node.total_mem else 0
    lines += ["", *tabulate(rows)]
    lines += tabulate([["Allocated:", f"{node.used_mem} ({percent}%)"], ["Total:", str(node.total_mem)]])
    return lines


def detail_table(usage: ClusterUsage) -> str:
    """Per node: its pods and the GiB each holds on each card, then the cluster total."""
    blocks = [_node_detail(node) for node in usage.nodes]
    width = max((len(line) for block in blocks for line in block), default=40)
    lines: list[str] = []
    for block in blocks:
        lines += [*block, "-" * width]
    lines += ["Allocated/Total GPU Memory In Cluster:", f"{usage.used_mem}/{usage.total_mem} ({usage.percent}%)"]
    return "\n".join(lines) + "\n"


def as_json(usage: ClusterUsage) -> dict[str, Any]:
    return {
        "nodes": [{
            "name": n.name, "ipAddress": n.ip, "mode": n.mode, "placement": n.placement,
            "allocatedMemGiB": n.used_mem, "totalMemGiB": n.total_mem,
            "gpus": [{"index": c.index, "allocatedMemGiB": c.used_mem, "totalMemGiB": c.total_mem,
                      **({"allocatedCorePercent": c.used_core} if n.shows_core else {})} for c in n.cards],
            "pods": [{"namespace": p.namespace, "name": p.name, "memGiB": p.mem,
                      "memGiBByGPU": {str(k): v for k, v in sorted(p.mem_by_card.items())}} for p in n.pods],
        } for n in usage.nodes],
        "cluster": {"allocatedMemGiB": usage.used_mem, "totalMemGiB": usage.total_mem, "percent": usage.percent},
    }
