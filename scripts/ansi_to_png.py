#!/usr/bin/env python3
"""Render a terminal capture with colours (`tmux capture-pane -e -p`) to a PNG.

Usage: ansi_to_png.py CAPTURE.ans OUT.png [--cols 120]

Needs Pillow and a monospace font (Debian: fonts-dejavu-core). Understands the SGR codes
tmux writes: reset, bold, dim, reverse, the 8/16 colours, 256 colours and 24-bit colours.
"""
import argparse
import re
import sys

from PIL import Image, ImageDraw, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
BG = (24, 24, 27)
FG = (220, 220, 220)
# xterm-like palette for codes 30-37 / 90-97.
PALETTE = [
    (0, 0, 0), (205, 49, 49), (13, 188, 121), (229, 229, 16),
    (36, 114, 200), (188, 63, 188), (17, 168, 205), (229, 229, 229),
    (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67),
    (59, 142, 234), (214, 112, 214), (41, 184, 219), (255, 255, 255),
]
SGR = re.compile(r"\x1b\[([0-9;:]*)m")


def color256(n):
    if n < 16:
        return PALETTE[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return (v, v, v)


class Pen:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fg, self.bg, self.bold, self.dim, self.rev = None, None, False, False, False

    def apply(self, params):
        codes = [int(p) if p else 0 for p in re.split("[;:]", params)] if params else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                self.reset()
            elif c == 1:
                self.bold = True
            elif c == 2:
                self.dim = True
            elif c == 22:
                self.bold = self.dim = False
            elif c == 7:
                self.rev = True
            elif c == 27:
                self.rev = False
            elif 30 <= c <= 37:
                self.fg = PALETTE[c - 30]
            elif 90 <= c <= 97:
                self.fg = PALETTE[c - 90 + 8]
            elif c == 39:
                self.fg = None
            elif 40 <= c <= 47:
                self.bg = PALETTE[c - 40]
            elif 100 <= c <= 107:
                self.bg = PALETTE[c - 100 + 8]
            elif c == 49:
                self.bg = None
            elif c in (38, 48) and i + 1 < len(codes):
                if codes[i + 1] == 5 and i + 2 < len(codes):
                    col = color256(codes[i + 2])
                    i += 2
                elif codes[i + 1] == 2 and i + 4 < len(codes):
                    col = tuple(codes[i + 2:i + 5])
                    i += 4
                else:
                    col = None
                if c == 38:
                    self.fg = col
                else:
                    self.bg = col
            i += 1

    def colours(self):
        fg, bg = self.fg or FG, self.bg or BG
        if self.dim:
            fg = tuple((a + b) // 2 for a, b in zip(fg, BG))
        if self.rev:
            fg, bg = bg, fg
        return fg, bg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("out")
    ap.add_argument("--cols", type=int, default=120)
    ap.add_argument("--size", type=int, default=16)
    a = ap.parse_args()
    text = open(a.capture, encoding="utf-8", errors="replace").read()
    lines = text.rstrip("\n").split("\n")
    font = ImageFont.truetype(FONT, a.size)
    bold = ImageFont.truetype(BOLD, a.size)
    left, top, right, bottom = font.getbbox("M")
    cw = font.getlength("M")
    ch = int(a.size * 1.25)
    img = Image.new("RGB", (int(cw * a.cols) + 20, ch * len(lines) + 20), BG)
    d = ImageDraw.Draw(img)
    pen = Pen()
    for row, line in enumerate(lines):
        col = 0
        pos = 0
        for m in list(SGR.finditer(line)) + [None]:
            end = m.start() if m else len(line)
            for chr_ in line[pos:end]:
                if chr_ == "\x1b":
                    continue
                fg, bg = pen.colours()
                x, y = 10 + col * cw, 10 + row * ch
                d.rectangle([x, y, x + cw, y + ch], fill=bg)
                # Block elements fill their cell exactly, so sparklines have no gaps.
                if "\u2581" <= chr_ <= "\u2588":
                    frac = (ord(chr_) - 0x2580) / 8
                    d.rectangle([x, y + ch * (1 - frac), x + cw, y + ch], fill=fg)
                elif chr_ != " ":
                    d.text((x, y + (ch - a.size) // 2), chr_, font=bold if pen.bold else font, fill=fg)
                col += 1
            if m:
                pen.apply(m.group(1))
                pos = m.end()
    img.save(a.out)
    print(f"wrote {a.out} ({img.width}x{img.height})", file=sys.stderr)


if __name__ == "__main__":
    main()
