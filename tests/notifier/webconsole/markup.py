"""Reading the console's HTML and SVG in tests: a strict-enough parse (every element closed in order, no
stray end tag) and lookups by ``data-testid``."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "link", "input", "br", "hr", "img", "col", "area", "base", "wbr", "source"}
#: a reference that would make a browser fetch something from elsewhere
EXTERNAL = re.compile(
    r"""(?:src|href|action|xlink:href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|"""
    r"""@import""",
    re.I,
)
SVG_NS = "{http://www.w3.org/2000/svg}"


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: list[str] = field(default_factory=list)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.stack: list[Element] = []
        self.errors: list[str] = []
        self.doctype = False

    def handle_decl(self, decl: str) -> None:
        self.doctype = self.doctype or decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(el)
        if tag not in VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1].tag != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1].tag if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for el in self.stack:
            el.text.append(data)


@dataclass
class Page:
    html: str
    elements: list[Element]

    def by_testid(self, testid: str) -> list[Element]:
        return [e for e in self.elements if e.attrs.get("data-testid") == testid]

    def one(self, testid: str) -> Element:
        found = self.by_testid(testid)
        assert len(found) == 1, f"{len(found)} elements with data-testid={testid}"
        return found[0]

    def text(self, el: Element) -> str:
        return "".join(el.text)


def parse_page(html: str) -> Page:
    """`html` parsed; fails on an unclosed or stray tag, a missing doctype, or a reference to another site."""
    p = _Parser()
    p.feed(html)
    p.close()
    assert p.doctype, "no <!doctype html>"
    assert p.errors == [] and not p.stack, (p.errors, [e.tag for e in p.stack])
    assert not EXTERNAL.search(html), EXTERNAL.search(html)
    return Page(html, p.elements)


def parse_svg(svg: str) -> ET.Element:
    """`svg` as XML (fails when it is not well-formed), its coordinates checked (:func:`coordinates`)."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    coordinates(root)
    return root


def coordinates(root: ET.Element) -> list[float]:
    """Every x and y the SVG draws at (attributes and polyline points)."""
    out: list[float] = []
    for el in root.iter():
        for name in ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "width", "height"):
            if name in el.attrib and el.tag != f"{SVG_NS}svg":
                out.append(float(el.attrib[name]))
        for pair in el.attrib.get("points", "").split():
            out.extend(float(v) for v in pair.split(","))
    assert all(math.isfinite(v) for v in out)
    return out


def find_all(root: ET.Element, tag: str, cls: str | None = None) -> list[ET.Element]:
    return [el for el in root.iter(f"{SVG_NS}{tag}") if cls is None or cls in el.attrib.get("class", "").split()]


def texts(root: ET.Element) -> list[str]:
    return ["".join(el.itertext()) for el in root.iter(f"{SVG_NS}text")]
