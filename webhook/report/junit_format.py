"""``--format junit``: JUnit XML, one test suite per file.

Every finding that fails the run is one failing test case; an object without findings is
one passing test case; a warning that does not fail the run passes with the warning in
``system-out``; an exempted finding is a skipped test case carrying the reason; input that
could not be read is an errored test case.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import TextIO

from webhook.report.checking import Located, Report
from webhook.settings import Settings

# Characters XML 1.0 cannot carry (a YAML double-quoted string can hold them).
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


class _Suite:
    def __init__(self, parent: ET.Element, source: str) -> None:
        self.source = source
        self.element = ET.SubElement(parent, "testsuite", name=_clean(source))
        self.counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}

    def case(self, name: str, line: int | None) -> ET.Element:
        self.counts["tests"] += 1
        attrs = {"classname": _clean(self.source), "name": _clean(name), "file": _clean(self.source)}
        if line:
            attrs["line"] = str(line)
        return ET.SubElement(self.element, "testcase", attrs)

    def outcome(self, case: ET.Element, tag: str, message: str, body: str = "", **attrs: str) -> None:
        counter = {"failure": "failures", "error": "errors", "skipped": "skipped"}[tag]
        self.counts[counter] += 1
        child = ET.SubElement(case, tag, {"message": _clean(message), **attrs})
        if body:
            child.text = _clean(body)

    def close(self) -> dict[str, int]:
        for key, value in self.counts.items():
            self.element.set(key, str(value))
        return self.counts


def _details(f: Located) -> str:
    lines = [f"{f.source}:{f.line}: {f.severity} {f.message}", f"object: {f.object_label} "
             f"(document at line {f.document_line})"]
    if f.field_path:
        lines.append(f"field: {f.field_path}")
    return "\n".join(lines) + "\n"


def render(report: Report, out: TextIO, *, settings: Settings, color: bool = False) -> None:
    root = ET.Element("testsuites", name="gpushare check")
    suites: dict[str, _Suite] = {}

    def suite(source: str) -> _Suite:
        if source not in suites:
            suites[source] = _Suite(root, source)
        return suites[source]

    for source in report.sources:
        suite(source)
    for obj in report.objects:
        s = suite(obj.source)
        if not obj.findings and not obj.exempted:
            s.case(obj.label, obj.line)
        for f in obj.findings:
            case = s.case(f"{f.rule} {f.object_label} (line {f.line})", f.line)
            if report.fails(f):
                s.outcome(case, "failure", f.message, _details(f), type=f.rule)
            else:
                ET.SubElement(case, "system-out").text = _clean(_details(f))
        for f in obj.exempted:
            case = s.case(f"{f.rule} {f.object_label} (line {f.line})", f.line)
            s.outcome(case, "skipped", f"exempted: {f.exemption_reason}", _details(f))
    for problem in report.problems:
        s = suite(problem.source)
        s.outcome(s.case(f"read {problem.source}", problem.line), "error", problem.text, type="InputError")
    totals: dict[str, int] = defaultdict(int)
    for s in suites.values():
        for key, value in s.close().items():
            totals[key] += value
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
