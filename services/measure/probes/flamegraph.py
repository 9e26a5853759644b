"""A static flame graph SVG from py-spy's speedscope samples.

py-spy writes one output format per recording; recording twice would double the
evidence run. So the run records speedscope (the richer one: per-thread profiles) and
the SVG is drawn from the same samples here: one tower per thread, width proportional
to samples, a <title> tooltip on every frame.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

WIDTH = 1200.0
ROW = 17
FONT = 11
MIN_WIDTH_PX = 0.3  # narrower frames are invisible anyway; leaving them out keeps the file small


@dataclass
class Node:
    name: str
    samples: int = 0
    children: dict[str, Node] = field(default_factory=dict)

    def child(self, name: str) -> Node:
        if name not in self.children:
            self.children[name] = Node(name)
        return self.children[name]


def frame_label(frame: dict) -> str:
    where = f"{frame.get('file', '?').rsplit('/', 1)[-1]}:{frame.get('line')}" if frame.get("line") else ""
    return f"{frame.get('name', '?')} ({where})" if where else frame.get("name", "?")


def tree_from_speedscope(profile: dict) -> Node:
    """All threads under one root; each sample's stack is root-first in speedscope."""
    frames = [frame_label(f) for f in profile["shared"]["frames"]]
    root = Node("all")
    for thread in profile["profiles"]:
        tower = root.child(thread["name"])
        for stack, weight in zip(thread["samples"], thread["weights"], strict=False):
            count = 1 if profile_unit_is_time(thread) else int(weight)
            root.samples += count
            tower.samples += count
            node = tower
            for index in stack:
                node = node.child(frames[index])
                node.samples += count
    return root


def profile_unit_is_time(thread: dict) -> bool:
    # py-spy weights every sample by its interval in seconds; each one is one sample.
    return thread.get("unit") in ("seconds", "milliseconds", "microseconds", "nanoseconds")


def _colour(name: str) -> str:
    digest = hashlib.md5(name.encode()).digest()
    return f"rgb({205 + digest[0] % 50},{80 + digest[1] % 120},{digest[2] % 60})"


def render_svg(root: Node, title: str) -> str:
    depth = _depth(root)
    height = (depth + 2) * ROW + 10
    parts = [
        '<?xml version="1.0" standalone="no"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{WIDTH:.0f}" height="{height}" '
        f'viewBox="0 0 {WIDTH:.0f} {height}" font-family="Verdana, sans-serif" font-size="{FONT}">',
        '<rect x="0" y="0" width="100%" height="100%" fill="#f8f8f8"/>',
        f'<text x="{WIDTH / 2:.0f}" y="{ROW}" text-anchor="middle" font-size="{FONT + 3}">{escape(title)}</text>',
    ]
    total = max(root.samples, 1)

    def draw(node: Node, x: float, level: int) -> None:
        width = WIDTH * node.samples / total
        if width < MIN_WIDTH_PX:
            return
        y = height - (level + 1) * ROW
        label = escape(node.name)
        share = 100.0 * node.samples / total
        parts.append(
            f"<g><title>{label}: {node.samples} samples ({share:.1f}%)</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW - 1}" fill="{_colour(node.name)}" rx="2"/>'
        )
        chars = int(width / (FONT * 0.6))
        if chars >= 3:
            shown = node.name if len(node.name) <= chars else node.name[: chars - 2] + ".."
            parts.append(f'<text x="{x + 3:.2f}" y="{y + ROW - 5}">{escape(shown)}</text>')
        parts.append("</g>")
        offset = x
        for child in sorted(node.children.values(), key=lambda n: n.name):
            draw(child, offset, level + 1)
            offset += WIDTH * child.samples / total

    draw(root, 0.0, 0)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _depth(node: Node) -> int:
    return 1 + max((_depth(child) for child in node.children.values()), default=0)
