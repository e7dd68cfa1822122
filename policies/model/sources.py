"""Where each rule comes from, in words a user can look up.

Rules record their sources as short codes (``"000, 002"``): the ACK documentation pages the
project was built from, numbered in the order they were collected (tests/data/seeds/ keeps
copies under those numbers). Anything a user reads cites the page by its title instead;
a rule that is the project's own decision says so, with the reason.
"""

from __future__ import annotations

# The ACK (Alibaba Cloud Container Service for Kubernetes) documentation pages, by code.
ACK_PAGES: dict[str, str] = {
    "000": "Allocate computing power by scheduling shared GPU",
    "001": "Shared GPU scheduling in registered clusters",
    "002": "Manage the shared GPU scheduling component",
    "003": "GPU node scheduling labels (ACK managed cluster Pro)",
    "004": "Configure GPU sharing without GPU memory isolation",
    "005": "Use cGPU to achieve GPU sharing based on multiple GPUs",
}
PROJECT_CHOICE = "project choice"


def cite(codes: str) -> tuple[str, ...]:
    """``"001, 002"`` as the page titles a user can search for; other sources as written."""
    cited = []
    for code in (part.strip() for part in codes.split(",")):
        if code in ACK_PAGES:
            cited.append(f'ACK documentation: "{ACK_PAGES[code]}"')
        elif code:
            cited.append(code)
    return tuple(cited)
