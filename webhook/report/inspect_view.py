"""``gpushare inspect`` output: the table of ``kubectl inspect cgpu`` (as the ACK GPU-sharing pages print it), the
per-pod detail of ``-d``, and JSON.

The table is laid out as Go's tabwriter lays out the original (two spaces between columns,
the last column unpadded) and the dashed line is as long as the original computes it, so
the output is the ACK pages' expected output.
"""

from __future__ import annotations

from typing import Any

from policies.placement.allocation import ClusterUsage, NodeUsage

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


def _unit(usage: ClusterUsage) -> str:
    return usage.nodes[0].unit if usage.nodes else "GiB"


def summary_table(usage: ClusterUsage) -> str:
    """NAME, IPADDRESS, GPUi(Allocated/Total)..., [PENDING(Allocated),] GPU Memory(GiB) [, GPUi Core(%)...]
    and the cluster total. The PENDING column, as the open-source ``kubectl inspect gpushare`` prints
    it (gpushare-device-plugin cmd/inspect/display.go), appears when some pod holds memory the
    scheduler recorded on no card."""
    cards = usage.max_cards
    with_core = _core_columns(usage)
    pending = usage.has_pending
    header = ["NAME", "IPADDRESS", *(f"GPU{i}(Allocated/Total)" for i in range(cards)),
              *(["PENDING(Allocated)"] if pending else []), f"GPU Memory({_unit(usage)})"]
    if with_core:
        header += [f"GPU{i} Core(%)" for i in range(cards)]
    rows = [header]
    for node in usage.nodes:
        row = [node.name, node.ip or ABSENT]
        row += [f"{c.used_mem}/{c.total_mem}" for c in node.cards] + [ABSENT] * (cards - len(node.cards))
        if pending:
            row.append(str(node.pending_mem) if node.pending_mem else "")
        row.append(f"{node.used_mem}/{node.total_mem}")
        if with_core:
            core = [f"{c.used_core}/{c.total_core}" for c in node.cards] if node.shows_core else []
            row += core + [ABSENT] * (cards - len(core))
        rows.append(row)
    lines = tabulate(rows)
    lines += [dashed_line(rows[1] if len(rows) > 1 else None), "Allocated/Total GPU Memory In Cluster:",
              f"{usage.used_mem}/{usage.total_mem} ({usage.percent}%)"]
    return "\n".join(lines) + "\n"


def go_tabwriter(rows: list[list[str]], padding: int = PADDING) -> list[str]:
    """Lay out rows as Go's ``text/tabwriter`` (minwidth 0, padding 2, spaces) lays out lines of
    tab-terminated cells: every cell but a row's last belongs to a column, and a column's width
    holds only over the run of adjacent rows that have a cell in it (a row with fewer cells ends
    the run). Trailing blanks are dropped."""
    widths: list[list[int]] = [[0] * max(len(row) - 1, 0) for row in rows]
    for column in range(max((len(row) for row in rows), default=1) - 1):
        start = 0
        while start < len(rows):
            if len(rows[start]) - 1 <= column:
                start += 1
                continue
            end = start
            while end < len(rows) and len(rows[end]) - 1 > column:
                end += 1
            width = max(len(rows[r][column]) for r in range(start, end)) + padding
            for r in range(start, end):
                widths[r][column] = width
            start = end
    return [("".join(cell.ljust(widths[r][c]) for c, cell in enumerate(row[:-1])) + (row[-1] if row else "")).rstrip()
            for r, row in enumerate(rows)]


def _pod_rows(node: NodeUsage) -> list[list[str]]:
    """One row per pod, by the first card it holds (pending pods last): its GiB on each card [, pending]."""
    pods = sorted(node.pods, key=lambda p: (min((i for i in p.mem_by_card if i >= 0), default=len(node.cards)),
                                            p.namespace, p.name))
    pending = [str(pod.pending_mem) for pod in pods] if node.pending_mem else [None] * len(pods)
    return [[pod.name, pod.namespace, *(str(pod.mem_by_card.get(c.index, 0)) for c in node.cards),
             *([held] if held is not None else []), ""] for pod, held in zip(pods, pending, strict=True)]


def _node_detail(node: NodeUsage) -> list[list[str]]:
    percent = node.used_mem * 100 // node.total_mem if node.total_mem else 0
    return [[""], ["NAME:", node.name], ["IPADDRESS:", node.ip or "unknown"], [""],
            ["NAME", "NAMESPACE", *(f"GPU{c.index}(Allocated)" for c in node.cards),
             *(["Pending(Allocated)"] if node.pending_mem else []), ""],
            *_pod_rows(node),
            ["Allocated :", f"{node.used_mem} ({percent}%)", ""], ["Total :", f"{node.total_mem} ", ""]]


def detail_table(usage: ClusterUsage) -> str:
    """``-d``: per node its pods and the GiB each holds on each card, laid out as the open-source
    ``kubectl inspect gpushare -d`` lays it out (AliyunContainerService/gpushare-device-plugin,
    cmd/inspect/display.go, displayDetails): a NAME:/IPADDRESS: block, the pod table, the node's
    Allocated/Total, a dashed line as long as the first node's pod rows (tab-separated, before
    alignment) plus 10, and the cluster total after two blank lines. No ACK page shows this view.
    Pods the scheduler recorded on no card are shown in a Pending(Allocated) column, as the plugin
    shows them (policies/placement/cards.py)."""
    rows: list[list[str]] = []
    dashes = 0
    for node in usage.nodes:
        pod_rows = _pod_rows(node)
        if not dashes:
            dashes = sum(len("\t".join(row).encode()) + 1 for row in pod_rows) + 10
        rows += [*_node_detail(node), ["-" * dashes]]
    rows += [[""], [""], ["Allocated/Total GPU Memory In Cluster:",
                          f"{usage.used_mem}/{usage.total_mem} ({usage.percent}%)", ""]]
    return "\n".join(go_tabwriter(rows)) + "\n"


def as_json(usage: ClusterUsage) -> dict[str, Any]:
    return {
        "nodes": [{
            "name": n.name, "ipAddress": n.ip, "mode": n.mode, "placement": n.placement,
            "allocatedMemGiB": n.used_mem, "totalMemGiB": n.total_mem, "pendingMemGiB": n.pending_mem,
            "gpus": [{"index": c.index, "allocatedMemGiB": c.used_mem, "totalMemGiB": c.total_mem,
                      **({"allocatedCorePercent": c.used_core} if n.shows_core else {})} for c in n.cards],
            "pods": [{"namespace": p.namespace, "name": p.name, "memGiB": p.mem, "pendingMemGiB": p.pending_mem,
                      "memGiBByGPU": {str(k): v for k, v in sorted(p.mem_by_card.items()) if k >= 0}}
                     for p in n.pods],
        } for n in usage.nodes],
        "cluster": {"allocatedMemGiB": usage.used_mem, "totalMemGiB": usage.total_mem, "percent": usage.percent},
        # The unit of every memory figure above: names.memory_unit (MiB when the device plugin counts MiB).
        "memoryUnit": _unit(usage),
    }
